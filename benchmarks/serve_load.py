"""Load run for `mtpedge serve`: N concurrent clients x M requests each, with hostile clients, on loopback only.

Starts `mtpedge serve` as a child process on 127.0.0.1 (a free port), asks every prompt once alone (greedy) for
the reference answers, then lets N client threads send M requests each, alternating streaming and
non-streaming chat completions. Every answer is checked against the reference text, token count and finish
reason (a stream must also be well formed: one id, `[DONE]` last). At the same time:
- one oversized request (a 4 MB chat message) is sent; it must be refused (400, context_length_exceeded);
- slow clients trickle requests a byte every half second, half of them the request head, half the body,
  reconnecting whenever the server cuts them off (its header and body timeouts);
- a poller asks /health every 50 ms on a fresh connection and records how long each answer took.
Prints a table; the last line is one JSON document (also written to --out, with the load average).

    nice -n 19 python benchmarks/serve_load.py --clients 8 --requests 8 --slow-clients 20 --big-request-mb 4 \\
        --out benchmarks/results/serve_load/load-8x8.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"  # loopback only, by design
PROMPTS = [
    "Write a haiku about the sea.",
    "What is the capital of France? Answer in one sentence.",
    "Give three tips for staying focused while studying.",
    "Explain what a prime number is to a child.",
    "List the planets of the solar system.",
    "Describe a cat in two sentences.",
    "How do I boil an egg?",
    "Why is the sky blue?",
]


@dataclass
class Outcome:
    client: int
    prompt: int
    stream: bool
    ok: bool = False
    error: str = ""
    latency_s: float = 0.0
    first_token_s: float = 0.0
    tokens: int = 0
    text: str = ""
    finish_reason: str = ""


def chat_request(port: int, prompt: str, max_tokens: int, stream: bool, timeout: float, outcome: Outcome) -> None:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            outcome.error = f"HTTP {response.status}: {response.read()[:200]!r}"
            return
        if stream:
            read_stream(response, started, outcome)
        else:
            answer = json.loads(response.read())
            outcome.text = answer["choices"][0]["message"]["content"]
            outcome.finish_reason = answer["choices"][0]["finish_reason"]
            outcome.tokens = answer["usage"]["completion_tokens"]
            outcome.first_token_s = float("nan")
        outcome.latency_s = time.perf_counter() - started
        outcome.ok = not outcome.error
    except (OSError, http.client.HTTPException, ValueError, KeyError) as err:
        outcome.error = f"{type(err).__name__}: {err}"
    finally:
        conn.close()


def read_stream(response: http.client.HTTPResponse, started: float, outcome: Outcome) -> None:
    ids, parts, done = set(), [], False
    for raw in response:
        line = raw.decode().rstrip("\n")
        if not line:
            continue
        if not line.startswith("data: ") or done:
            outcome.error = f"malformed stream line {line[:80]!r}"
            return
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            outcome.error = f"stream error {chunk['error']}"
            return
        ids.add(chunk["id"])
        if chunk.get("usage"):
            outcome.tokens = chunk["usage"]["completion_tokens"]
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content")
            if piece:
                if not parts:
                    outcome.first_token_s = time.perf_counter() - started
                parts.append(piece)
            if choice["finish_reason"]:
                outcome.finish_reason = choice["finish_reason"]
    if not done or len(ids) != 1:
        outcome.error = f"stream ended without [DONE] or with {len(ids)} ids"
    outcome.text = "".join(parts)


@dataclass
class Hostile:
    """What the oversized request, the slow clients and the /health poller saw."""

    big_status: int = 0
    big_code: str = ""
    big_latency_s: float = 0.0
    health_s: list[float] = field(default_factory=list)
    health_errors: list[str] = field(default_factory=list)
    cut_s: list[float] = field(default_factory=list)  # how long the server let a slow client hold a connection
    slow_answers: list[int] = field(default_factory=list)  # statuses the slow clients got before being cut


def big_request(port: int, body: bytes, hostile: Hostile) -> None:
    started = time.perf_counter()
    conn = http.client.HTTPConnection(HOST, port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        hostile.big_status = response.status
        hostile.big_code = json.loads(response.read())["error"]["code"] if response.status != 200 else ""
    except (OSError, http.client.HTTPException, ValueError, KeyError) as err:
        hostile.big_code = f"{type(err).__name__}: {err}"
    finally:
        hostile.big_latency_s = time.perf_counter() - started
        conn.close()


def poll_health(port: int, interval: float, stop: threading.Event, hostile: Hostile) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        try:
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                hostile.health_s.append(time.perf_counter() - started)
            else:
                hostile.health_errors.append(f"HTTP {response.status}")
        except (OSError, http.client.HTTPException) as err:
            hostile.health_errors.append(f"{type(err).__name__}: {err}")
        finally:
            conn.close()
        stop.wait(interval)


def slow_client(port: int, body_first: bool, stop: threading.Event, hostile: Hostile) -> None:
    """Sends a request a byte every 0.5 s (the head, or the whole head and then the body), forever."""
    body = b'{"messages": [{"role": "user", "content": "' + b"a" * 400 + b'"}]}'
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            sock = socket.create_connection((HOST, port), timeout=30)
        except OSError:
            stop.wait(0.5)
            continue
        try:
            if body_first:
                sock.sendall(head)
            sock.settimeout(0.5)
            for byte in (body if body_first else head + body):
                sock.sendall(bytes([byte]))
                try:
                    answer = sock.recv(4096)
                except TimeoutError:
                    if stop.is_set():
                        break
                    continue
                if answer.startswith(b"HTTP/1.1 "):
                    hostile.slow_answers.append(int(answer[9:12]))
                hostile.cut_s.append(time.perf_counter() - started)
                break
        except OSError:  # reset by the server
            hostile.cut_s.append(time.perf_counter() - started)
        finally:
            sock.close()


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, int]:
    command = [sys.executable, "-m", "mtpedge", "serve", "--host", HOST, "--port", "0", "--temperature", "0",
               "--drafter", args.drafter, "--max-queue", str(args.clients * 2)]
    command += ["--bundle", args.bundle] if args.bundle else []
    command += ["--threads", str(args.threads)] if args.threads else []
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    if " on http://" not in line:
        server.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    print(line.strip(), file=sys.stderr)
    return server, int(line.split(" on http://")[1].split("/")[0].rsplit(":", 1)[1])


def percentile(values: list[float], q: float) -> float:
    values = sorted(v for v in values if v == v)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values) + 0.5) - 1))]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", help="bundle folder (default: the SmolLM2 bundle in the mtpedge cache)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=5, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="none")
    parser.add_argument("--threads", type=int, default=None, help="the server's onnxruntime threads")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per request")
    parser.add_argument("--slow-clients", type=int, default=0, help="clients that trickle requests (default 0)")
    parser.add_argument("--big-request-mb", type=float, default=0, help="one oversized chat request of this "
                        "many MB during the load (default 0: none)")
    parser.add_argument("--health-interval", type=float, default=0.05, help="seconds between /health polls")
    parser.add_argument("--out", help="also write the result JSON here")
    return parser.parse_args()


@dataclass
class LoadRun:
    references: list[Outcome]  # each prompt asked alone, before the load
    outcomes: list[Outcome]  # every loaded request
    wall_s: float
    hostile: Hostile


def run_load(args: argparse.Namespace, port: int) -> LoadRun:
    """The reference answers, then the clients, the health poller, the slow clients and the big request at once."""
    hostile = Hostile()
    words = int(args.big_request_mb * 1e6 / 5) - 20  # a body of that many (decimal) MB, under the 4 MiB limit
    big_body = json.dumps({"messages": [{"role": "user", "content": "word " * words}],
                           "max_tokens": 8}).encode()  # encoded before the clock starts
    references = []
    for i, prompt in enumerate(PROMPTS):  # one at a time: the answers every loaded request must match
        ref = Outcome(-1, i, False)
        chat_request(port, prompt, args.max_tokens, False, args.timeout, ref)
        if not ref.ok:
            raise SystemExit(f"reference request failed: {ref.error}")
        references.append(ref)
    outcomes: list[Outcome] = []

    def client(c: int) -> None:
        for j in range(args.requests):  # bounded: exactly M requests
            outcome = Outcome(c, (c * args.requests + j) % len(PROMPTS), stream=(c + j) % 2 == 0)
            chat_request(port, PROMPTS[outcome.prompt], args.max_tokens, outcome.stream, args.timeout, outcome)
            outcomes.append(outcome)

    stop = threading.Event()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    side = [threading.Thread(target=poll_health, args=(port, args.health_interval, stop, hostile))]
    side += [threading.Thread(target=slow_client, args=(port, i % 2 == 1, stop, hostile))
             for i in range(args.slow_clients)]
    started = time.perf_counter()
    for t in threads + side:
        t.start()
    if args.big_request_mb:
        time.sleep(2)  # while the clients' first requests run
        big_request(port, big_body, hostile)
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    stop.set()
    for t in side:
        t.join(timeout=60)
    return LoadRun(references, outcomes, wall, hostile)


def summarize(args: argparse.Namespace, run: LoadRun, failed: list[Outcome], corrupted: list[Outcome],
              load_before: tuple[float, ...]) -> dict:
    hostile, references, wall = run.hostile, run.references, run.wall_s
    good = [o for o in run.outcomes if o.ok]
    latencies = [o.latency_s for o in good]
    ttft = [o.first_token_s for o in good if o.stream]
    tokens = sum(o.tokens for o in good)
    return {
        "clients": args.clients, "requests_per_client": args.requests, "requests": len(run.outcomes),
        "max_tokens": args.max_tokens, "drafter": args.drafter, "failed": len(failed), "corrupted": len(corrupted),
        "wall_s": round(wall, 2), "requests_per_s": round(len(good) / wall, 3),
        "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
        "latency_p50_s": round(percentile(latencies, 50), 3), "latency_p90_s": round(percentile(latencies, 90), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3), "latency_max_s": round(max(latencies, default=0), 3),
        "first_token_p50_s": round(percentile(ttft, 50), 3), "first_token_p90_s": round(percentile(ttft, 90), 3),
        "alone_latency_mean_s": round(statistics.mean(r.latency_s for r in references), 3),
        "alone_tokens_per_s": round(sum(r.tokens for r in references) / sum(r.latency_s for r in references), 2),
        "health_polls": len(hostile.health_s), "health_errors": len(hostile.health_errors),
        "health_p50_ms": round(1000 * percentile(hostile.health_s, 50), 1),
        "health_p99_ms": round(1000 * percentile(hostile.health_s, 99), 1),
        "health_max_ms": round(1000 * max(hostile.health_s, default=float("nan")), 1),
        "big_request_mb": args.big_request_mb, "big_request_status": hostile.big_status,
        "big_request_code": hostile.big_code, "big_request_s": round(hostile.big_latency_s, 3),
        "slow_clients": args.slow_clients, "slow_cut_off": len(hostile.cut_s),
        "slow_longest_hold_s": round(max(hostile.cut_s, default=0), 1),
        "slow_answers": {str(s): hostile.slow_answers.count(s) for s in sorted(set(hostile.slow_answers))},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> int:
    args = parse_args()
    load_before = os.getloadavg()
    server, port = start_server(args)
    try:
        run = run_load(args, port)
    finally:
        server.terminate()
        server.wait(timeout=60)
    failed = [o for o in run.outcomes if not o.ok]
    corrupted = [o for o in run.outcomes if o.ok and (o.text, o.tokens, o.finish_reason) != (
        run.references[o.prompt].text, run.references[o.prompt].tokens, run.references[o.prompt].finish_reason)]
    for o in failed + corrupted:
        print(f"client {o.client} prompt {o.prompt} stream={o.stream}: {o.error or 'answer differs from reference'}",
              file=sys.stderr)
    result = summarize(args, run, failed, corrupted, load_before)
    print(f"{'metric':<24}{'value':>12}")
    for key, value in result.items():
        print(f"{key:<24}{value!s:>12}")
    for error in run.hostile.health_errors[:5]:
        print(f"/health: {error}", file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**result, "command": " ".join(sys.argv)}, indent=1) + "\n")
    print(json.dumps(result))
    big_refused = not args.big_request_mb or run.hostile.big_code == "context_length_exceeded"
    return 1 if failed or corrupted or run.hostile.health_errors or not big_refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
