"""A real `mtpedge serve` app on a loopback port in a background thread, and a small stdlib HTTP client."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from pathlib import Path

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.sampling import DEFAULT_TEMPERATURE
from mtpedge.server.app import ServerConfig, start_server
from mtpedge.server.worker import EngineWorker


class LiveServer:
    """config: further ServerConfig fields (api_key, header_timeout_s, ...)."""

    def __init__(self, bundle: Path, drafter: str = "none", max_queue: int = 64,
                 temperature: float = DEFAULT_TEMPERATURE, **config) -> None:
        self.engine = Engine.load(bundle)
        self.worker = EngineWorker(self.engine, drafter, max_queue)
        self.config = ServerConfig(model_id=self.engine.manifest.model_name, default_temperature=temperature,
                                   **config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-server", daemon=True)
        self.thread.start()
        start = start_server(self.worker, self.config, "127.0.0.1", 0)
        self.runner = asyncio.run_coroutine_threadsafe(start, self.loop).result(timeout=30)
        self.host, self.port = self.runner.addresses[0][:2]
        self.url = f"http://{self.host}:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.worker.shutdown()
        self.loop.close()

    def connect(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body: dict | bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict]:
        """One request; returns (status, parsed JSON body). `headers` add to or replace the JSON content type."""
        status, _, payload = self.exchange(method, path, body, headers)
        return status, payload

    def exchange(self, method: str, path: str, body: dict | bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
        """One request; returns (status, response headers, parsed JSON body)."""
        conn = self.connect()
        try:
            data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), json.loads(response.read())
        finally:
            conn.close()

    def post(self, path: str, body: dict | bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        return self.request("POST", path, body, headers)

    def stream(self, path: str, body: dict) -> list[dict]:
        """A streaming request read to the end: the parsed `data:` events, `[DONE]` checked and dropped."""
        conn = self.connect()
        try:
            conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            assert response.status == 200, response.read()
            assert response.getheader("Content-Type").startswith("text/event-stream")
            return parse_events(response.read().decode())
        finally:
            conn.close()


def parse_events(raw: str) -> list[dict]:
    blocks = [b for b in raw.split("\n\n") if b]
    assert all(b.startswith("data: ") for b in blocks), raw[:200]
    assert blocks[-1] == "data: [DONE]", blocks[-1]
    return [json.loads(b[len("data: "):]) for b in blocks[:-1]]


def streamed_text(events: list[dict], chat: bool) -> str:
    if chat:
        return "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    return "".join(e["choices"][0]["text"] for e in events if e["choices"])
