"""The one engine behind the server: requests queue for a single worker thread that runs `generate`.

An Engine (its KV cache, its sessions) serves one generation at a time, so every job runs on one thread in
arrival order, off the event loop. A job streams events back to its request's asyncio queue; its `cancel`
event (set when the client goes away, or by a stop string) is polled between decode steps, and a job
cancelled while still waiting never touches the engine.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from mtpedge.runtime.bundle import BundleError
from mtpedge.runtime.cost_table import decode_widths
from mtpedge.runtime.drafters import DRAFTERS, Drafter, DrafterSpec, check_fits, make_drafter, parse_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.sampling import SamplingConfig
from mtpedge.runtime.tokenizer import StreamDecoder

from .protocol import ApiError
from .stop_text import StopText

log = logging.getLogger(__name__)


@dataclass(eq=False)  # identity: a job is one request
class Job:
    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingConfig
    stop: tuple[str, ...]
    drafter: DrafterSpec
    cancel: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Finished:
    finish_reason: str  # "stop" (end token or stop string), "length", or "cancelled"
    completion_tokens: int
    stats: dict  # GenerationStats.to_dict() plus queue_s


@dataclass(frozen=True)
class Failed:
    error: Exception


Event = TextDelta | Finished | Failed


class EngineWorker:
    """Owns the engine; `submit` queues a job and returns the asyncio queue its events arrive on."""

    def __init__(self, engine: Engine, default_drafter: str | DrafterSpec = "none", max_queue: int = 64) -> None:
        self.engine = engine
        self.default_drafter = parse_drafter(default_drafter)
        self.max_queue = max_queue
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtpedge-engine")
        self._drafters: dict[DrafterSpec, Drafter | None] = {}  # touched only on the worker thread
        self._lock = threading.Lock()
        self._waiting = 0
        self._running = False
        self._jobs: set[Job] = set()
        self._mean_job_s = 1.0  # moving average of a job's engine time: the Retry-After estimate of a full queue

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, job: Job) -> tuple[asyncio.Queue, Future]:
        with self._lock:
            if self._waiting >= self.max_queue:
                retry_s = max(1, min(60, math.ceil(self._waiting * self._mean_job_s)))
                raise ApiError(503, f"the server is busy: {self._waiting} requests are already waiting "
                                    f"(--max-queue {self.max_queue}); retry in about {retry_s} s",
                               kind="server_error", code="queue_full", headers={"Retry-After": str(retry_s)})
            self._waiting += 1
            self._jobs.add(job)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(event: Event) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is closed: the server is shutting down
                job.cancel.set()

        future = self._executor.submit(self._run, job, emit)
        future.add_done_callback(lambda f: self._forget(job, started=not f.cancelled()))
        return events, future

    def _forget(self, job: Job, started: bool) -> None:
        with self._lock:
            self._jobs.discard(job)
            if not started:  # cancelled while waiting: _run never decremented the count
                self._waiting -= 1

    def shutdown(self) -> None:
        with self._lock:
            for job in self._jobs:
                job.cancel.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def check_drafter(self, spec: DrafterSpec, sampling: SamplingConfig) -> DrafterSpec:
        """A request's drafter, refused (400) if this bundle's graphs cannot hold it or it cannot sample."""
        try:
            check_fits(spec, decode_widths(self.engine.manifest))
        except ValueError as err:
            raise ApiError(400, f"`drafter`: {err}", param="drafter") from err
        if spec.name in DRAFTERS and DRAFTERS[spec.name].lossy and not sampling.greedy:
            raise ApiError(400, f"`drafter`: {spec.name} is lossy and decodes greedily only: send temperature 0",
                           param="drafter")
        return spec

    def _drafter(self, spec: DrafterSpec) -> Drafter | None:
        if spec not in self._drafters:
            try:
                self._drafters[spec] = make_drafter(spec, self.engine)
            except (ValueError, BundleError) as err:  # e.g. mtp on a bundle without an adapter
                raise ApiError(400, f"`drafter`: {err}", param="drafter") from err
        return self._drafters[spec]

    def _run(self, job: Job, emit: Callable[[Event], None]) -> None:
        with self._lock:
            self._waiting -= 1
            self._running = True
        started = time.perf_counter()
        queue_s = started - job.queued_at
        try:
            if job.cancel.is_set():
                emit(Finished("cancelled", 0, {"queue_s": round(queue_s, 4)}))
                return
            emit(self._generate(job, emit, queue_s))
            self._mean_job_s += 0.2 * (time.perf_counter() - started - self._mean_job_s)
        except BundleError as err:  # the model itself is broken (e.g. NaN logits): say so, and keep serving
            log.error("generation failed: %s", err)
            emit(Failed(ApiError(500, str(err), kind="server_error", code="model_error")))
        except Exception as err:  # reported to the one request that caused it; the server keeps serving
            log.exception("generation failed")
            emit(Failed(err))
        finally:
            self._running = False

    def _generate(self, job: Job, emit: Callable[[Event], None], queue_s: float) -> Finished:
        tok = self.engine.tokenizer
        decoder, matcher = StreamDecoder(tok), StopText(job.stop)

        def on_tokens(ids: list[int]) -> None:
            text, _ = matcher.push(decoder.push(ids))
            if text:
                emit(TextDelta(text))

        result = generate(self.engine, job.prompt_ids, job.max_tokens, job.sampling, on_tokens=on_tokens,
                          drafter=self._drafter(job.drafter), on_overflow="stop",
                          should_stop=lambda: matcher.stopped or job.cancel.is_set())
        if not matcher.stopped:
            # text the stream decoder still held (an unfinished UTF-8 sequence at the very end), then the
            # tail the stop matcher held back
            full = tok.decode(result.token_ids)
            rest = full[len(decoder.text):] if full.startswith(decoder.text) else ""
            text = matcher.push(rest)[0] if rest else ""
            text += matcher.flush()
            if text:
                emit(TextDelta(text))
        reason = "stop" if matcher.stopped else result.stats.finish_reason
        stats = {**result.stats.to_dict(), "finish_reason": reason, "queue_s": round(queue_s, 4)}
        return Finished(reason, result.stats.new_tokens, stats)
