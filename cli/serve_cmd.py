"""mtpedge serve [--bundle DIR | --model PATH] [--host 127.0.0.1] [--port 8000]: an OpenAI-compatible local server.

    curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
         -d '{"messages": [{"role": "user", "content": "Hi"}], "stream": true}'
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys

from mtpedge.bundles import ensure_bundle
from mtpedge.generate_cmd import add_precision_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", help="bundle folder (default: export --model, or the default model, once)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder to export when no --bundle is given")
    parser.add_argument("--context", type=int, default=1024, help="context of an automatic export (default 1024)")
    add_precision_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; the server has no "
                             "authentication, so think twice before binding anything else)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    parser.add_argument("--drafter", default="none",
                        help="drafter for requests that name none (none = plain decoding); a request may pick "
                             "another with the extension field `drafter`")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="temperature for requests that name none (default 1.0, as OpenAI's API)")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests allowed to wait for the engine; more get 503 (default 64)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError as err:
        raise SystemExit("mtpedge serve needs aiohttp: `pip install 'mtpedge[serve]'`") from err
    from mtpedge.runtime.drafters import drafter_names
    from mtpedge.runtime.engine import Engine
    from mtpedge.server.app import ServerConfig
    from mtpedge.server.worker import EngineWorker

    if args.drafter not in drafter_names():
        raise ValueError(f"unknown drafter {args.drafter!r}: choose one of {', '.join(drafter_names())}")
    if not 0 <= args.temperature <= 2:
        raise ValueError(f"--temperature must be in [0, 2], got {args.temperature}")
    if args.max_queue < 1:
        raise ValueError(f"--max-queue must be >= 1, got {args.max_queue}")
    if not is_loopback(args.host):
        print(f"warning: listening on {args.host}, not a loopback address: anyone who can reach it can use the "
              "model (there is no authentication)", file=sys.stderr)
    engine = Engine.load(ensure_bundle(args.bundle, args.model, args.context, precision=args.precision),
                         threads=args.threads)
    worker = EngineWorker(engine, args.drafter, args.max_queue)
    config = ServerConfig(model_id=engine.manifest.model_name, default_temperature=args.temperature)
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
