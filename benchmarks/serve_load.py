"""Load run for `mtpedge serve`: N concurrent clients x M requests each, on loopback only.

Starts `mtpedge serve` as a child process on 127.0.0.1 (a free port), asks every prompt once alone (greedy) for
the reference answers, then lets N client threads send M requests each, alternating streaming and
non-streaming chat completions. Every answer is checked against the reference text, token count and finish
reason (a stream must also be well formed: one id, `[DONE]` last). Prints a table; the last line is one JSON
document.

    python benchmarks/serve_load.py --clients 4 --requests 5 --max-tokens 64
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", help="bundle folder (default: the SmolLM2 bundle in the mtpedge cache)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=5, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="none")
    parser.add_argument("--threads", type=int, default=None, help="the server's onnxruntime threads")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per request")
    args = parser.parse_args()
    server, port = start_server(args)
    try:
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

        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=60)
    failed = [o for o in outcomes if not o.ok]
    corrupted = [o for o in outcomes if o.ok and (o.text, o.tokens, o.finish_reason) !=
                 (references[o.prompt].text, references[o.prompt].tokens, references[o.prompt].finish_reason)]
    for o in failed + corrupted:
        print(f"client {o.client} prompt {o.prompt} stream={o.stream}: {o.error or 'answer differs from reference'}",
              file=sys.stderr)
    good = [o for o in outcomes if o.ok]
    latencies = [o.latency_s for o in good]
    ttft = [o.first_token_s for o in good if o.stream]
    tokens = sum(o.tokens for o in good)
    alone = statistics.mean(r.latency_s for r in references)
    result = {
        "clients": args.clients, "requests_per_client": args.requests, "requests": len(outcomes),
        "max_tokens": args.max_tokens, "drafter": args.drafter, "failed": len(failed), "corrupted": len(corrupted),
        "wall_s": round(wall, 2), "requests_per_s": round(len(good) / wall, 3),
        "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
        "latency_p50_s": round(percentile(latencies, 50), 3), "latency_p90_s": round(percentile(latencies, 90), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3), "latency_max_s": round(max(latencies, default=0), 3),
        "first_token_p50_s": round(percentile(ttft, 50), 3), "first_token_p90_s": round(percentile(ttft, 90), 3),
        "alone_latency_mean_s": round(alone, 3),
        "alone_tokens_per_s": round(sum(r.tokens for r in references) / sum(r.latency_s for r in references), 2),
    }
    print(f"{'metric':<24}{'value':>12}")
    for key, value in result.items():
        print(f"{key:<24}{value!s:>12}")
    print(json.dumps(result))
    return 1 if failed or corrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
