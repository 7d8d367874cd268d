"""`mtpedge serve` against a real HTTP client on loopback, tiny random model: every answer is compared with
plain greedy decoding of the same bundle (a second engine), text for text."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.server import worker as worker_module
from tests.server_helpers import LiveServer, parse_events, read_response, streamed_text

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


@pytest.fixture(scope="module")
def reference(bundle):
    """reference(chat, content, max_tokens) -> (greedy text, tokens generated, finish reason)."""
    engine = Engine.load(bundle)

    def run(chat: bool, content: str, max_tokens: int):
        tok = engine.tokenizer
        ids = tok.encode_chat([{"role": "user", "content": content}]) if chat else tok.encode(content)
        result = generate(engine, ids, max_tokens, on_overflow="stop")
        return tok.decode(result.token_ids), result.stats.new_tokens, result.stats.finish_reason

    return run


def chat_body(content: str, max_tokens: int, **extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, **extra}


def text_body(content: str, max_tokens: int, **extra) -> dict:
    return {"prompt": content, "max_tokens": max_tokens, "temperature": 0, **extra}


def test_chat_completion_equals_plain_greedy_decoding(server, reference):
    status, body = server.post(CHAT, chat_body("Tell me a story", 40))
    assert status == 200, body
    text, n, reason = reference(True, "Tell me a story", 40)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert body["choices"][0]["finish_reason"] == reason
    prompt_tokens = len(server.engine.tokenizer.encode_chat([{"role": "user", "content": "Tell me a story"}]))
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
    assert body["mtpedge"]["new_tokens"] == n and body["mtpedge"]["drafter"] == "none"
    assert body["mtpedge"]["tokens_per_call"] == 1.0


@pytest.mark.parametrize("spec", ["lookup:width=4", "hybrid:width=32:masks=2", "esp:tree=dynamic"])
def test_a_request_names_its_drafter_by_spec_and_gets_the_same_answer(server, reference, spec):
    status, body = server.post(CHAT, chat_body("Tell me a story", 40, drafter=spec))
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == reference(True, "Tell me a story", 40)[0]
    stats = body["mtpedge"]
    assert stats["drafter"] == spec.split(":")[0] and stats["lossless"] is True
    if spec.startswith("lookup"):
        assert stats["drafter_settings"]["width"] == 4


def test_text_completion_and_default_max_tokens(server, reference):
    status, body = server.post(TEXT, {"prompt": "Once upon a time", "temperature": 0})
    assert status == 200, body
    text, n, reason = reference(False, "Once upon a time", 16)  # OpenAI's default max_tokens for completions
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == text and body["usage"]["completion_tokens"] == n


@pytest.mark.parametrize("chat", [True, False])
def test_stream_chunks_add_up_to_the_whole_answer(server, reference, chat):
    body = chat_body("Stream me", 50) if chat else text_body("Stream me", 50)
    events = server.stream(CHAT if chat else TEXT, {**body, "stream_options": {"include_usage": True}})
    text, n, reason = reference(chat, "Stream me", 50)
    assert streamed_text(events, chat) == text
    ids = {e["id"] for e in events}
    assert len(ids) == 1
    if chat:
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert all(e["object"] == "chat.completion.chunk" for e in events)
    content_chunks = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"] is None]
    assert len(content_chunks) >= 3  # streamed in pieces, not one block at the end
    final, usage = events[-2], events[-1]
    assert final["choices"][0]["finish_reason"] == reason and final["mtpedge"]["new_tokens"] == n
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == n


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("chat", [True, False])
def test_stop_sequences_cut_the_text(server, reference, chat, stream):
    text, _, _ = reference(chat, "Stop somewhere", 60)
    assert len(text) > 20
    stop = text[12:15]  # a 3-character piece from the middle: also a test of stops split over tokens
    expected = text[: text.find(stop)]
    body = (chat_body if chat else text_body)("Stop somewhere", 60, stop=[stop, "\u2603never"])
    if stream:
        events = server.stream(CHAT if chat else TEXT, body)
        assert streamed_text(events, chat) == expected
        reason = events[-1]["choices"][0]["finish_reason"]
    else:
        status, answer = server.post(CHAT if chat else TEXT, body)
        assert status == 200, answer
        choice = answer["choices"][0]
        assert (choice["message"]["content"] if chat else choice["text"]) == expected
        reason = choice["finish_reason"]
    assert reason == "stop"


def test_seeded_sampling_is_reproducible(server):
    body = chat_body("Sample", 30, temperature=1.0, top_p=0.9, seed=1234)
    first, second = server.post(CHAT, body)[1], server.post(CHAT, body)[1]
    other = server.post(CHAT, {**body, "seed": 99})[1]
    assert first["choices"][0]["message"] == second["choices"][0]["message"]
    assert other["choices"][0]["message"] != first["choices"][0]["message"]


def test_concurrent_clients_all_get_complete_correct_answers(server, reference):
    prompts = [f"Client {i} asks something" for i in range(6)]
    answers: dict[int, str] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            chat, stream = i % 2 == 0, i % 3 == 0
            body = (chat_body if chat else text_body)(prompts[i], 40)
            if stream:
                answers[i] = streamed_text(server.stream(CHAT if chat else TEXT, body), chat)
            else:
                status, got = server.post(CHAT if chat else TEXT, body)
                assert status == 200, got
                answers[i] = got["choices"][0]["message"]["content"] if chat else got["choices"][0]["text"]
        except BaseException as err:  # noqa: B036 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for i, prompt in enumerate(prompts):
        assert answers[i] == reference(i % 2 == 0, prompt, 40)[0], i


@pytest.mark.parametrize("raw, status, fragment", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b"", 400, "not valid JSON"),
])
def test_malformed_bodies_get_400(server, raw, status, fragment):
    got, body = server.post(CHAT, raw)
    assert got == status and fragment in body["error"]["message"]


@pytest.mark.parametrize("extra, param, fragment", [
    ({"frobnicate": 1}, "frobnicate", "unknown field `frobnicate`"),
    ({"n": 2}, "n", "not supported"),
    ({"logprobs": True}, "logprobs", "not supported"),
    ({"temperature": 3}, "temperature", "[0, 2]"),
    ({"temperature": "hot"}, "temperature", "must be a number"),
    ({"top_p": 0}, "top_p", "greater than 0"),
    ({"max_tokens": 0}, "max_tokens", ">= 1"),
    ({"max_tokens": 10_000}, "max_tokens", "context is 256 tokens"),
    ({"seed": -1}, "seed", ">= 0"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ({"stop": [""]}, "stop", "non-empty"),
    ({"stream": "yes"}, "stream", "true or false"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed with"),
    ({"drafter": "no-such-drafter"}, "drafter", "unknown drafter"),
    ({"drafter": "lookup:masks=2"}, "drafter", "takes no option masks; its options: width, max_ngram"),
    ({"drafter": "hybrid:width=64"}, "drafter", "above this bundle's widest decode graph"),
    ({"drafter": "dmtd"}, "drafter", "not a DMTD bundle"),
    ({"drafter": "dmtd", "temperature": 0.5}, "drafter", "greedily only"),
    ({"drafter": 7}, "drafter", "a drafter spec"),
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role", "use one of"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content", "text only"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, "messages[0]", "unsupported field"),
])
def test_bad_fields_get_400_naming_the_field(server, extra, param, fragment):
    status, body = server.post(CHAT, {**chat_body("hi", 8), **extra})
    assert status == 400, body
    assert body["error"]["param"] == param and fragment in body["error"]["message"], body


def test_defaults_of_unsupported_fields_are_accepted(server):
    status, body = server.post(CHAT, chat_body("hi", 4, n=1, presence_penalty=0, logprobs=False, user="me"))
    assert status == 200, body


def test_overlong_prompts_get_400(server):
    status, body = server.post(TEXT, {"prompt": "word " * 400, "max_tokens": 4})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
    assert "context is 256" in body["error"]["message"]
    status, body = server.post(TEXT, {"prompt": [10**6], "max_tokens": 4})
    assert status == 400 and "token ids outside" in body["error"]["message"]


def test_http_level_errors_are_json(server):
    status, body = server.request("GET", CHAT)
    assert status == 405 and "Method Not Allowed" in body["error"]["message"]
    status, body = server.request("GET", "/v1/nothing")
    assert status == 404 and body["error"]["message"].startswith("Not Found")
    status, body = server.post(CHAT, b" " * (5 * 1024 * 1024))
    assert status == 413
    status, body = server.request("GET", "/v1/models/not-this-one")
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_models_and_health(server):
    status, models = server.request("GET", "/v1/models")
    model_id = server.engine.manifest.model_name
    assert status == 200 and [m["id"] for m in models["data"]] == [model_id]
    assert server.request("GET", f"/v1/models/{model_id}")[1]["id"] == model_id
    status, health = server.request("GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["context"] == 256 and health["waiting"] == 0


@pytest.fixture
def slow_generations(monkeypatch):
    """Slows each decode step to 20 ms, records every run's result, and checks that runs never overlap."""
    results, active = [], []
    real = worker_module.generate

    def slow_generate(*args, on_tokens, **kwargs):
        assert not active, "two generations ran at once on one engine"
        active.append(1)

        def slow(ids):
            time.sleep(0.02)
            on_tokens(ids)

        try:
            result = real(*args, on_tokens=slow, **kwargs)
        finally:
            active.pop()
        results.append(result)
        return result

    monkeypatch.setattr(worker_module, "generate", slow_generate)
    return results


def wait_idle(server: LiveServer, count: int, results: list, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (len(results) < count or server.worker.busy or server.worker.waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(results) == count and not server.worker.busy


def raw_request(server: LiveServer, path: str, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_a_streaming_client_that_disconnects_cancels_its_generation(server, slow_generations):
    sock = raw_request(server, CHAT, chat_body("Go on and on", 200, stream=True))
    received = b""
    while received.count(b"data: ") < 3:  # the role chunk and two content chunks
        received += sock.recv(4096)
    sock.close()
    wait_idle(server, 1, slow_generations)
    stats = slow_generations[0].stats
    assert stats.finish_reason == "cancelled" and stats.new_tokens < 50
    assert server.post(CHAT, chat_body("still alive?", 4))[0] == 200


def test_disconnects_cancel_waiting_and_non_streaming_requests(server, slow_generations):
    running = raw_request(server, CHAT, chat_body("first", 200))
    time.sleep(0.3)  # the first is generating now
    queued = raw_request(server, CHAT, chat_body("second", 200))
    time.sleep(0.1)
    assert server.worker.waiting == 1
    queued.close()
    running.close()
    wait_idle(server, 1, slow_generations)  # the queued request never reached the engine
    assert slow_generations[0].stats.finish_reason == "cancelled"
    assert server.worker.waiting == 0


def test_a_full_queue_gets_503(bundle, slow_generations):
    live = LiveServer(bundle, max_queue=1)
    try:
        first = raw_request(live, TEXT, text_body("one", 100))
        time.sleep(0.3)
        second = raw_request(live, TEXT, text_body("two", 2))
        time.sleep(0.1)
        status, body = live.post(TEXT, text_body("three", 2))
        assert status == 503 and body["error"]["code"] == "queue_full"
        first.close()
        _, reply = read_response(second)
        second.close()
        assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    finally:
        live.close()


def test_parse_events_rejects_a_truncated_stream():
    with pytest.raises(AssertionError):
        parse_events('data: {"a": 1}\n\n')
