"""Other clients against the server: the `openai` Python package, and `mtpedge serve` as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def bundle(tiny_bundle):
    return tiny_bundle("qwen2")


def greedy_chat(bundle, content: str, max_tokens: int) -> str:
    engine = Engine.load(bundle)
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": content}])
    return engine.tokenizer.decode(generate(engine, ids, max_tokens, on_overflow="stop").token_ids)


def test_the_openai_client_works(server, bundle):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    assert model == server.engine.manifest.model_name
    expected = greedy_chat(bundle, "Hello there", 30)

    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello there"}],
                                           max_tokens=30, temperature=0)
    assert reply.choices[0].message.content == expected
    assert reply.usage.completion_tokens > 0

    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello there"}],
                                            max_tokens=30, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens

    text = client.completions.create(model=model, prompt="Once", max_tokens=5, temperature=0)
    assert text.choices[0].finish_reason in ("length", "stop") and text.usage.prompt_tokens > 0

    with pytest.raises(openai.BadRequestError, match="not supported"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], n=3)


def test_the_serve_command_listens_on_loopback_and_stops_on_sigint(bundle):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "mtpedge", "serve", "--bundle", str(bundle), "--port", "0",
                                "--temperature", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        line = process.stdout.readline()
        assert "on http://127.0.0.1:" in line, (line, process.stderr.read() if process.poll() is not None else "")
        url = line.split("on ", 1)[1].split("/v1")[0]
        with urllib.request.urlopen(f"{url}/health", timeout=30) as response:
            assert json.loads(response.read())["status"] == "ok"
        body = json.dumps({"prompt": "hi", "max_tokens": 3}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] >= 1
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_serve_command_refuses_an_unknown_drafter(bundle):
    done = subprocess.run([sys.executable, "-m", "mtpedge", "serve", "--bundle", str(bundle), "--drafter", "zzz"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown drafter 'zzz'" in done.stderr
