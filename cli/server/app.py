"""The HTTP side of `mtpedge serve` (aiohttp): OpenAI-compatible routes over one EngineWorker.

    POST /v1/chat/completions   POST /v1/completions   (stream: server-sent events, `data: [DONE]` last)
    GET  /v1/models             GET  /v1/models/{id}    GET /health

Responses carry OpenAI's `usage` plus an `mtpedge` object with the run's stats (tokens per call, drafter,
queue wait). Every refusal is a JSON error body with a 4xx/5xx status; a handler never takes the server down.
The runner is built with handler_cancellation, so a client that disconnects cancels its handler, and the
handler's `finally` cancels the job.

No request holds the event loop: the body is parsed and the prompt tokenized on other threads, a text that
cannot fit the context is refused before it is tokenized (`TextTokenizer.tokens_at_least`), and a client
that sends its request head or body too slowly is cut off (`ServerConfig`'s timeouts). Who may call at all
is access.py's business.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mtpedge.runtime.sampling import DEFAULT_TEMPERATURE
from mtpedge.runtime.tokenizer import ChatTemplateError, TextTokenizer

from .access import access_guard, check_bind, is_loopback
from .protocol import ApiError, CompletionRequest, parse_json_body, parse_request
from .worker import EngineWorker, Failed, Finished, Job, TextDelta

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ServerConfig:
    model_id: str
    default_temperature: float = DEFAULT_TEMPERATURE  # for a request that names none (llama.cpp's; OpenAI's is 1)
    api_key: str | None = None  # required from clients (Authorization: Bearer) when set; see access.py
    # a connection must send a whole request head within this long of opening (or of its last response), and
    # a request its whole body within body_timeout_s: else it is closed (half-sent requests held sockets forever)
    header_timeout_s: float = 15.0
    body_timeout_s: float = 60.0


WORKER = web.AppKey("worker", EngineWorker)
CONFIG = web.AppKey("config", ServerConfig)


def make_app(worker: EngineWorker, config: ServerConfig, loopback_bind: bool = True) -> web.Application:
    app = web.Application(middlewares=[json_errors, access_guard(loopback_bind, config.api_key)],
                          client_max_size=MAX_BODY_BYTES)
    app[WORKER], app[CONFIG] = worker, config
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model:.+}", get_model)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", text_completions)
    return app


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    """OpenAI-style JSON bodies for every error, including aiohttp's own 404/405/413."""
    try:
        return await handler(request)
    except ApiError as err:
        response = web.json_response(err.body(), status=err.status, headers=err.headers)
        if err.status == 408:  # the rest of the body may still come: the connection cannot carry another request
            response.force_close()
        return response
    except web.HTTPException as err:
        if err.status < 400:
            raise
        allow = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else None
        message = f"{err.reason}: {request.method} {request.path}" if err.status in (404, 405) else err.text
        body = ApiError(err.status, message or err.reason, kind="invalid_request_error").body()
        return web.json_response(body, status=err.status, headers=allow)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        body = ApiError(500, "internal server error (see the server log)", kind="server_error").body()
        return web.json_response(body, status=500)


async def health(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    return web.json_response({"status": "ok", "model": request.app[CONFIG].model_id, "busy": worker.busy,
                              "waiting": worker.waiting, "context": worker.engine.context,
                              "drafter": str(worker.default_drafter)})


def _model_card(request: web.Request) -> dict[str, Any]:
    worker = request.app[WORKER]
    return {"id": request.app[CONFIG].model_id, "object": "model", "created": 0, "owned_by": "mtpedge",
            "context_length": worker.engine.context}


async def list_models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_model_card(request)]})


async def get_model(request: web.Request) -> web.Response:
    if request.match_info["model"] != request.app[CONFIG].model_id:
        raise ApiError(404, f"model {request.match_info['model']!r} is not served here; this server serves "
                            f"{request.app[CONFIG].model_id!r}", code="model_not_found")
    return web.json_response(_model_card(request))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=True)


async def text_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=False)


async def _read_json(request: web.Request, timeout_s: float) -> dict[str, Any]:
    try:
        raw = await asyncio.wait_for(request.read(), timeout_s)
    except asyncio.TimeoutError as err:
        raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s: send it whole, at once",
                       code="request_timeout") from err
    except ConnectionResetError as err:  # the client left mid-body: an answer nobody reads, and no traceback
        raise ApiError(400, "the connection closed before the request body was complete") from err
    # json.loads holds the GIL, but off the loop it is preempted every few ms: a 4 MB body stalls no one
    return await asyncio.to_thread(parse_json_body, raw)


async def _prompt_ids(worker: EngineWorker, req: CompletionRequest) -> list[int]:
    tok, context = worker.engine.tokenizer, worker.engine.context
    what = "messages" if req.chat else "prompt"
    if req.chat or isinstance(req.prompt, str):
        chars = sum(len(m["content"]) for m in req.messages) if req.chat else len(req.prompt)
        at_least = tok.tokens_at_least(chars)
        if at_least >= context:  # refused before tokenizing: a 4 MB text would take the tokenizer seconds
            raise ApiError(400, f"the {what} have {chars} characters, which is at least {at_least} tokens, but the "
                                f"model's context is {context} tokens: shorten the input", param=what,
                           code="context_length_exceeded")
        return await asyncio.to_thread(_encode, tok, req)  # the tokenizer releases the GIL
    if len(req.prompt) >= context:
        return list(req.prompt)  # _make_job names the problem; no need to check a million ids first
    vocab = worker.engine.config.vocab_size
    bad = [t for t in req.prompt if not 0 <= t < vocab]
    if bad:
        raise ApiError(400, f"`prompt` has token ids outside [0, {vocab}): {bad[:5]}", param="prompt")
    return list(req.prompt)


def _encode(tok: TextTokenizer, req: CompletionRequest) -> list[int]:
    if not req.chat:
        return tok.encode(req.prompt)
    try:
        return tok.encode_chat(list(req.messages))
    except ChatTemplateError as err:  # e.g. the template's own check on role order
        raise ApiError(400, str(err), param="messages") from err


def _make_job(worker: EngineWorker, req: CompletionRequest, prompt_ids: list[int]) -> Job:
    context = worker.engine.context
    what = "messages" if req.chat else "prompt"
    if len(prompt_ids) >= context:
        raise ApiError(400, f"the {what} take {len(prompt_ids)} tokens but the model's context is {context} "
                            "(at least one token must fit after them): shorten the input", param=what,
                       code="context_length_exceeded")
    room = context - len(prompt_ids)
    if req.max_tokens is not None and req.max_tokens > room:
        raise ApiError(400, f"the model's context is {context} tokens, but {len(prompt_ids) + req.max_tokens} "
                            f"were requested ({len(prompt_ids)} in the {what}, {req.max_tokens} in max_tokens): "
                            f"lower max_tokens to at most {room} or shorten the input", param="max_tokens",
                       code="context_length_exceeded")
    drafter = worker.check_drafter(req.drafter or worker.default_drafter, req.sampling)
    return Job(prompt_ids, req.max_tokens or room, req.sampling, req.stop, drafter)


async def _complete(request: web.Request, chat: bool) -> web.StreamResponse:
    worker, config = request.app[WORKER], request.app[CONFIG]
    req = parse_request(await _read_json(request, config.body_timeout_s), chat, config.default_temperature)
    prompt_ids = await _prompt_ids(worker, req)
    job = _make_job(worker, req, prompt_ids)
    events, future = worker.submit(job)
    reply = Reply(chat, config.model_id, len(prompt_ids))
    try:
        if req.stream:
            return await _stream(request, reply, events, req.include_usage)
        return await _collect(reply, events)
    finally:
        # the client went away, or the reply is complete: either way the engine need not go on
        job.cancel.set()
        future.cancel()


async def _collect(reply: Reply, events: asyncio.Queue) -> web.Response:
    parts = []
    while True:
        event = await events.get()
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, Finished):
            return web.json_response(reply.whole("".join(parts), event))
        elif isinstance(event, Failed):
            raise event.error


async def _stream(request: web.Request, reply: Reply, events: asyncio.Queue, include_usage: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(payload: dict[str, Any] | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        await response.write(f"data: {data}\n\n".encode())

    if reply.chat:
        await send(reply.chunk({"role": "assistant", "content": ""}))
    while True:
        event = await events.get()
        if isinstance(event, TextDelta):
            await send(reply.chunk({"content": event.text} if reply.chat else event.text))
        elif isinstance(event, Finished):
            await send(reply.chunk({} if reply.chat else "", event))
            if include_usage:
                await send({**reply.chunk({} if reply.chat else ""), "choices": [], "usage": reply.usage(event)})
            break
        elif isinstance(event, Failed):
            status = event.error.status if isinstance(event.error, ApiError) else 500
            message = event.error.message if isinstance(event.error, ApiError) else "internal server error"
            await send(ApiError(status, message, kind="server_error").body())
            break
    await send("[DONE]")
    await response.write_eof()
    return response


class Reply:
    """Builds the OpenAI response objects of one request (one id, one creation time)."""

    def __init__(self, chat: bool, model_id: str, prompt_tokens: int) -> None:
        self.chat, self.model, self.prompt_tokens = chat, model_id, prompt_tokens
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def usage(self, done: Finished) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done.completion_tokens,
                "total_tokens": self.prompt_tokens + done.completion_tokens}

    def _head(self, streaming: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if streaming else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, done: Finished) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": done.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": done.finish_reason}
        return {**self._head(False), "choices": [choice], "usage": self.usage(done), "mtpedge": done.stats}

    def chunk(self, delta: dict[str, str] | str, done: Finished | None = None) -> dict[str, Any]:
        reason = done.finish_reason if done else None
        if self.chat:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason}
        chunk = {**self._head(True), "choices": [choice]}
        if done:
            chunk["mtpedge"] = done.stats
        return chunk


async def start_server(worker: EngineWorker, config: ServerConfig, host: str, port: int) -> web.AppRunner:
    """Start listening; returns the runner (`runner.addresses` has the bound port, `runner.cleanup()` stops)."""
    check_bind(host, config.api_key)
    # aiohttp's keep-alive timer runs from a connection's opening and from each response, and closes the
    # connection if no whole request head has arrived by then: the header timeout
    runner = web.AppRunner(make_app(worker, config, is_loopback(host)), handler_cancellation=True, access_log=None,
                           keepalive_timeout=config.header_timeout_s)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
