"""The OpenAI request bodies the server accepts, checked field by field into one frozen request object.

Every refusal is an ApiError with an HTTP status and a message naming the field and the fix. Fields fall in
three groups: supported; OpenAI fields mtpedge does not implement, accepted only at their default value
(so that clients which always send e.g. `n: 1` keep working); anything else is an unknown field (400).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from mtpedge.runtime.drafters import DrafterSpec, parse_drafter
from mtpedge.runtime.sampling import SamplingConfig
from mtpedge.runtime.tokenizer import LONE_SURROGATE

MAX_STOP_SEQUENCES = 4  # OpenAI's limit
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ApiError(Exception):
    """A request the server refuses; becomes an OpenAI-style error body with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}  # e.g. Retry-After on 503

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class CompletionRequest:
    """One /v1/chat/completions or /v1/completions request, checked."""

    chat: bool  # True: `messages` with the chat template; False: the raw `prompt`
    messages: tuple[dict[str, str], ...]
    prompt: str | tuple[int, ...]  # text, or token ids
    max_tokens: int | None  # None: as many as the context has room for
    sampling: SamplingConfig
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage counts
    drafter: DrafterSpec | None  # mtpedge extension, a spec such as "hybrid:width=32"; None = the server's drafter


COMMON_FIELDS = {"model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "stream",
                 "stream_options", "user", "drafter"}  # top_k, min_p: llama.cpp's and vLLM's extensions
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens"}
TEXT_FIELDS = COMMON_FIELDS | {"prompt"}
# OpenAI fields without an implementation here, and the values that mean "not used"
UNSUPPORTED_DEFAULTS: dict[str, tuple] = {
    "n": (1, None), "presence_penalty": (0, None), "frequency_penalty": (0, None), "logit_bias": (None, {}),
    "logprobs": (False, None), "top_logprobs": (None, 0), "tools": (None, []), "tool_choice": (None, "none"),
    "parallel_tool_calls": (None, True, False), "response_format": (None, {"type": "text"}), "echo": (False, None),
    "best_of": (1, None), "suffix": (None, ""), "store": (None, False), "metadata": (None, {}),
    "service_tier": (None, "auto", "default"),
}


def parse_json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON ({err}): send one JSON object") from err
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_request(body: dict[str, Any], chat: bool, default_temperature: float) -> CompletionRequest:
    allowed = CHAT_FIELDS if chat else TEXT_FIELDS
    for name, value in body.items():
        if name in allowed:
            continue
        if name in UNSUPPORTED_DEFAULTS:
            if value not in UNSUPPORTED_DEFAULTS[name]:
                raise ApiError(400, f"`{name}` = {json.dumps(value)[:80]} is not supported by mtpedge serve: "
                                    "leave it out", param=name, code="unsupported_parameter")
            continue
        raise ApiError(400, f"unknown field `{name}`: this endpoint takes {', '.join(sorted(allowed))}",
                       param=name, code="unknown_parameter")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "`model` must be a string", param="model")
    if chat:
        messages, prompt = _messages(body.get("messages")), ""
    else:
        messages, prompt = (), _prompt(body.get("prompt"))
    max_tokens = _integer(body, "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = 16  # OpenAI's default for /v1/completions
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise ApiError(400, "`top_p` must be greater than 0 (use temperature 0 for greedy decoding)", param="top_p")
    min_p = _number(body, "min_p", 0.0, 1.0)
    if min_p == 1.0:
        raise ApiError(400, "`min_p` must be below 1 (use temperature 0 for greedy decoding)", param="min_p")
    # truncation the request leaves unset gets the defaults (top-k 40, top-p 0.95, min-p 0.05) when sampling
    sampling = SamplingConfig.with_defaults(default_temperature if temperature is None else temperature,
                                            _integer(body, "top_k", 0), top_p, min_p, _integer(body, "seed", 0))
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise ApiError(400, "`stream_options` must be an object with only `include_usage`", param="stream_options")
    include_usage = _boolean(options or {}, "include_usage")
    if options is not None and not stream:
        raise ApiError(400, "`stream_options` is only allowed with `stream: true`", param="stream_options")
    drafter = body.get("drafter")
    if drafter is not None:
        if not isinstance(drafter, str):
            raise ApiError(400, "`drafter` must be a drafter spec (a string such as \"hybrid:width=32\")",
                           param="drafter")
        try:
            drafter = parse_drafter(drafter)
        except ValueError as err:
            raise ApiError(400, f"`drafter`: {err}", param="drafter") from err
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise ApiError(400, "`user` must be a string", param="user")
    return CompletionRequest(chat, messages, prompt, max_tokens, sampling, _stop(body.get("stop")), stream,
                             include_usage, drafter)


def _integer(body: dict, name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(400, f"`{name}` must be an integer >= {minimum}, got {json.dumps(value)[:40]}", param=name)
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ApiError(400, f"`{name}` must be a number in [{low:g}, {high:g}], got {json.dumps(value)[:40]}",
                       param=name)
    return float(value)


def _boolean(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"`{name}` must be true or false, got {json.dumps(value)[:40]}", param=name)
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "`stop` must be a non-empty string or a list of non-empty strings", param="stop")
    for stop in stops:
        _valid_text(stop, "stop")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise ApiError(400, f"`stop` has {len(stops)} sequences; at most {MAX_STOP_SEQUENCES} are allowed",
                       param="stop")
    return tuple(stops)


def _messages(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "`messages` must be a non-empty list of {role, content} objects", param="messages")
    messages = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"`{where}` must be an object with `role` and `content`", param=where)
        extra = set(message) - {"role", "content", "name"}
        if extra:
            raise ApiError(400, f"`{where}` has unsupported field(s) {', '.join(sorted(extra))}: only role, "
                                "content and name are supported", param=where)
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise ApiError(400, f"`{where}.role` is {json.dumps(role)[:40]}: use one of "
                                f"{', '.join(CHAT_ROLES)}", param=f"{where}.role")
        messages.append({"role": CHAT_ROLES[role], "content": _content(message.get("content"), where)})
    return tuple(messages)


def _content(value: Any, where: str) -> str:
    """A message's text: a string, or a list of {"type": "text", "text": ...} parts (joined)."""
    if isinstance(value, str):
        return _valid_text(value, f"{where}.content")
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                       and isinstance(p.get("text"), str) for p in value):
        return _valid_text("".join(p["text"] for p in value), f"{where}.content")
    raise ApiError(400, f"`{where}.content` must be a string or a list of text parts (this model reads text only)",
                   param=f"{where}.content")


def _prompt(value: Any) -> str | tuple[int, ...]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise ApiError(400, "`prompt` is empty: send some text", param="prompt")
        return _valid_text(value, "prompt")
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return tuple(value)
    raise ApiError(400, "`prompt` must be one string (or a list of token ids); batches of prompts are not "
                        "supported: send one request per prompt", param="prompt")


def _valid_text(text: str, param: str) -> str:
    """JSON can carry a lone UTF-16 surrogate ("\\ud800"), which is not text: refuse it by name."""
    found = LONE_SURROGATE.search(text)
    if found:
        raise ApiError(400, f"`{param}` holds a lone UTF-16 surrogate ({ascii(found.group())} at character "
                            f"{found.start()}), which is not valid Unicode: send valid text", param=param)
    return text
