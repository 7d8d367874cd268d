"""llama.cpp's own tools on the same GGUF file: `llama-completion` (greedy) and `llama-lookup` (prompt lookup).

The `llama.cpp` peer drives llama.cpp through llama-cpp-python, whose Python loop around each token costs
3-6% of llama.cpp's decode speed on a fast CPU, and whose prompt-lookup drafter is a Python re-implementation
at about half the speed of llama.cpp's own `llama-lookup` (benchmarks/results/fast/README.md section 29). Users
of llama.cpp run its binaries, so these peers do too: one process per turn, the prompt given as text (the
prompt ids detokenized with their special tokens; a prompt that does not tokenize back to the same ids is
reported in the run's `extra`), timed by the tool's own report (prompt evaluation, then decoding).

`scripts/setup_bench_peers.sh` builds both tools from the llama.cpp source that llama-cpp-python ships, with
the same CPU flags, into .venv/llama.cpp/bin.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..methods import MethodRun
from . import PeerConfig

TOOLS = {"llama.cpp-native": "llama-completion", "llama.cpp-native-lookup": "llama-lookup"}
# where scripts/setup_bench_peers.sh builds them: the venv's own folder (.venv/llama.cpp/bin), found from any
# working directory (a path relative to the repository root made a bench run elsewhere call them missing)
DEFAULT_BIN = Path(sys.prefix) / "llama.cpp" / "bin"

# llama.cpp's timing lines (common_perf_print and llama-lookup's own summary)
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")


@dataclass(frozen=True)
class NativeTiming:
    prompt_tokens: int  # as llama.cpp tokenized the prompt
    prompt_s: float  # prompt evaluation (the first token's logits)
    decoded: int  # tokens the decode time covers (llama.cpp's own rate: decoded / decode_s)
    decode_s: float


def parse_timing(tool: str, log: str) -> NativeTiming:
    """The prompt and decode times a llama.cpp tool printed (stderr); ValueError naming what is missing."""
    if tool == "llama-lookup":
        encoded, decoded = _ENCODED.findall(log), _DECODED.findall(log)
        if not encoded or not decoded:
            raise ValueError("llama-lookup printed no 'encoded ... / decoded ... tokens in ... seconds' summary")
        (n_prompt, prompt_s), (n_decoded, decode_s) = encoded[-1], decoded[-1]
        return NativeTiming(int(n_prompt), float(prompt_s), int(n_decoded), float(decode_s))
    prompt, runs = _PROMPT_EVAL.findall(log), _EVAL.findall(log)
    if not prompt or not runs:
        raise ValueError(f"{tool} printed no 'prompt eval time' / 'eval time' lines (common_perf_print)")
    (prompt_ms, n_prompt), (eval_ms, n_runs) = prompt[-1], runs[-1]
    return NativeTiming(int(n_prompt), float(prompt_ms) / 1e3, int(n_runs), float(eval_ms) / 1e3)


def native_missing_reason(name: str, folder: Path | None) -> str | None:
    """None if the tool is built, else how to build it."""
    tool = (folder or DEFAULT_BIN) / TOOLS[name]
    if not tool.is_file():
        return (f"{tool} not found: `bash scripts/setup_bench_peers.sh` builds llama.cpp's tools (about 5 minutes), "
                "or pass --llama-cpp-bin FOLDER")
    return None


class LlamaCppNativePeer:
    kind = "peer"

    def __init__(self, name: str, config: PeerConfig) -> None:
        from llama_cpp import Llama

        self.name, self.config = name, config
        self.tool_name, self.lookup = TOOLS[name], name.endswith("-lookup")
        self.tool = str((config.llama_cpp_bin or DEFAULT_BIN) / self.tool_name)
        # the vocabulary only: prompt ids -> text for the tool, the tool's text -> ids for the report
        self.vocab = Llama(model_path=str(config.model), vocab_only=True, verbose=False)

    def command(self, prompt_file: str, max_new_tokens: int) -> list[str]:
        threads = str(self.config.threads)
        common = ["-m", str(self.config.model), "-f", prompt_file, "-n", str(max_new_tokens), "--temp", "0",
                  "-t", threads, "-tb", threads, "-c", str(self.config.context)]
        if self.lookup:
            return [self.tool, *common, "--spec-draft-n-max", str(self.config.lookup_tokens)]
        return [self.tool, *common, "-no-cnv", "--no-display-prompt", "--simple-io"]

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun:
        text = self.vocab.detokenize(list(prompt_ids), special=True)
        with tempfile.NamedTemporaryFile("wb", suffix=".txt") as prompt:
            prompt.write(text + b"\n")  # the tools drop one trailing newline from a prompt file
            prompt.flush()
            done = subprocess.run(self.command(prompt.name, max_new_tokens), capture_output=True, timeout=600)
        log = done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(f"{self.tool_name} exited with {done.returncode}: {log.strip()[-400:]}")
        timing = parse_timing(self.tool_name, log)
        answer = done.stdout
        if self.lookup:  # llama-lookup echoes the prompt (after two newlines) before the answer
            start = answer.find(text)
            answer = answer[start + len(text):] if start >= 0 else answer
        tokens = self.vocab.tokenize(answer.rstrip(b"\n"), add_bos=False, special=True)
        stop = next((i for i, t in enumerate(tokens) if t in self.config.eos_token_ids), len(tokens))
        tokens = tokens[:min(stop, max_new_tokens)]
        # keep the tool's own decode rate: (tokens - 1) / decode time = decoded / decode_s
        decode_s = timing.decode_s * (len(tokens) - 1) / timing.decoded if timing.decoded and len(tokens) > 1 else 0.0
        extra = {"prompt_tokens_native": timing.prompt_tokens}
        if timing.prompt_tokens != len(prompt_ids):
            extra["prompt_mismatch"] = f"{timing.prompt_tokens} tokens natively, {len(prompt_ids)} given"
        return MethodRun([int(t) for t in tokens], timing.prompt_s, timing.prompt_s + decode_s, extra=extra)

    def close(self) -> None:
        self.vocab.close()


def make(name: str, config: PeerConfig) -> LlamaCppNativePeer:
    return LlamaCppNativePeer(name, config)
