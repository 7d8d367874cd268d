"""mtpedge serve [--bundle DIR | --model PATH] [--host 127.0.0.1] [--port 8000] [--api-key KEY]: an
OpenAI-compatible local server.

    curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
         -d '{"messages": [{"role": "user", "content": "Hi"}], "stream": true}'

Bound to loopback (the default) it answers requests addressed to localhost only; bound to anything else it
needs an API key (server/access.py).

A request may pick its drafter with the extension field `drafter`, a spec as everywhere else in mtpedge
(e.g. "drafter": "hybrid:width=32"; `mtpedge drafters` lists them); without it, --drafter's applies. Through the
`openai` client: `extra_body={"drafter": "lookup"}`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from mtpedge.bundles import COST_MODEL_HELP, attach_cost_table
from mtpedge.generate_cmd import add_precision_argument, bundle_for_drafter, drafter_spec, settle_drafter
from mtpedge.runtime.drafters import DEFAULT_DRAFTER
from mtpedge.runtime.sampling import DEFAULT_TEMPERATURE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", help="bundle folder (default: export --model, or the default model, once)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder to export when no --bundle is given")
    parser.add_argument("--context", type=int, default=1024, help="context of an automatic export (default 1024)")
    add_precision_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; any other address "
                             "needs --api-key)")
    parser.add_argument("--api-key", default=os.environ.get("MTPEDGE_API_KEY"),
                        help="key clients must send as `Authorization: Bearer KEY` (default: the MTPEDGE_API_KEY "
                             "environment variable, which other users cannot read in the process list; "
                             "required unless --host is a loopback address)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    parser.add_argument("--drafter", type=drafter_spec, default=None, metavar="SPEC",
                        help=f"drafter for requests that name none, e.g. hybrid:width=32 (default: {DEFAULT_DRAFTER} "
                             "on float32 bundles, none = plain decoding on quantized ones, where drafting is not "
                             "lossless; `mtpedge drafters` lists them); a request may pick another with the "
                             "extension field `drafter`")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                        help=f"temperature for requests that name none (default {DEFAULT_TEMPERATURE}, llama.cpp's "
                             "and ollama's; OpenAI's API uses 1.0); top-k 40, top-p 0.95 and min-p 0.05 apply "
                             "unless a request sets them")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests allowed to wait for the engine; more get 503 (default 64)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--cost-model", default="measured", metavar="measured|remeasure|flat|FILE",
                        help=COST_MODEL_HELP)


def run(args: argparse.Namespace) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError as err:
        raise SystemExit("mtpedge serve needs aiohttp: `pip install 'mtpedge[serve]'`") from err
    from mtpedge.runtime.drafters import make_drafter
    from mtpedge.runtime.engine import Engine
    from mtpedge.runtime.generate import LOSSY_WARNING
    from mtpedge.server.access import check_bind
    from mtpedge.server.app import ServerConfig
    from mtpedge.server.worker import EngineWorker

    if not 0 <= args.temperature <= 2:
        raise ValueError(f"--temperature must be in [0, 2], got {args.temperature}")
    if args.max_queue < 1:
        raise ValueError(f"--max-queue must be >= 1, got {args.max_queue}")
    check_bind(args.host, args.api_key)  # before the model loads
    engine = Engine.load(bundle_for_drafter(args), threads=args.threads)
    settle_drafter(args, engine)
    attach_cost_table(engine, args.cost_model)  # a request may name any drafter: measured (or read) once here
    drafter = make_drafter(args.drafter, engine)  # refuse now, not at the first request, what the bundle cannot run
    if drafter is not None and drafter.lossy:
        print(f"warning: {LOSSY_WARNING.format(name=drafter.name)}", file=sys.stderr)
    worker = EngineWorker(engine, args.drafter, args.max_queue)
    config = ServerConfig(model_id=engine.manifest.model_name, default_temperature=args.temperature,
                          api_key=args.api_key or None)
    try:
        asyncio.run(_serve(worker, config, args.host, args.port))
    finally:
        worker.shutdown()
    return 0


async def _serve(worker, config, host: str, port: int) -> None:
    from mtpedge.server.app import start_server

    try:
        runner = await start_server(worker, config, host, port)
    except OSError as err:
        raise ValueError(f"cannot listen on {host}:{port} ({err.strerror}): pick another --port") from err
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"mtpedge serve: {config.model_id} (context {worker.engine.context}, drafter {worker.default_drafter}) "
          f"on http://{shown}:{bound_port}/v1 — Ctrl-C to stop", flush=True)
    try:
        await stop.wait()
    finally:
        print("mtpedge serve: stopping", file=sys.stderr, flush=True)
        await runner.cleanup()
