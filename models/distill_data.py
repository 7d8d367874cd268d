"""Self-distilled training data: the base model's own answers to prompts written for this project.

The trained drafters (learned mask embeddings, gated-LoRA MTP, DMTD) learn to predict what the base model
itself will say, so the best data is its own output: no network, no licence question, and the exact
distribution the verifier accepts. None of the prompts comes from Spec-Bench, which is kept for measurement.

Two producers write the same .npz layout (tokens + prompt/response lengths, optionally the teacher's top-k
distribution per response token):
    - `distill_run` (batched PyTorch, `mtpedge distill`): a folder of shards, the data at scale;
    - `build_distill_file` below (one sequence at a time on the ONNX runtime, no torch): the first generator,
      kept for small sets and as the baseline the batched one is measured against.
`load_distill_data` reads a single .npz or a folder of shards, so the trainers take either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtpedge.runtime.atomic_npz import save_npz
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class DistillSample:
    prompt_ids: np.ndarray  # int64, the chat-templated prompt
    response_ids: np.ndarray  # int64, the base model's answer (stop token excluded)
    # the teacher's distribution at each response position (None in data made without it):
    topk_ids: np.ndarray | None = None  # (R, k) int32, most likely next tokens, most likely first
    topk_probs: np.ndarray | None = None  # (R, k) float16, their probabilities (temperature 1)

    @property
    def token_ids(self) -> np.ndarray:
        return np.concatenate([self.prompt_ids, self.response_ids])


def save_distill_data(samples: list[DistillSample], path: str | Path, prompts: list[str] | None = None,
                      extra: dict[str, np.ndarray] | None = None) -> None:
    """Write samples to an .npz atomically (temp file in the same folder, then rename).

    The teacher top-k is written when every sample has it; `extra` holds per-sample arrays of the producer
    (conversations, temperatures, ...), stored as they are.
    """
    arrays = {
        "prompt_lengths": np.array([len(s.prompt_ids) for s in samples], dtype=np.int64),
        "response_lengths": np.array([len(s.response_ids) for s in samples], dtype=np.int64),
        "tokens": np.concatenate([s.token_ids for s in samples]) if samples else np.zeros(0, np.int64),
        "prompts": np.array(prompts if prompts is not None else [], dtype=str),
        **(extra or {}),
    }
    if samples and all(s.topk_ids is not None for s in samples):
        arrays["topk_ids"] = np.concatenate([s.topk_ids for s in samples]).astype(np.int32)
        arrays["topk_probs"] = np.concatenate([s.topk_probs for s in samples]).astype(np.float16)
    save_npz(path, arrays)


def shard_files(folder: str | Path) -> list[Path]:
    """The finished shards of a data folder, by name (temporary files of an unfinished save are hidden)."""
    return sorted(p for p in Path(folder).glob("*.npz") if not p.name.startswith("."))


def load_distill_data(path: str | Path) -> list[DistillSample]:
    """The samples of one .npz file, or of every shard in a folder (in name order)."""
    path = Path(path)
    if path.is_dir():
        return [sample for shard in shard_files(path) for sample in load_distill_data(shard)]
    if not path.is_file():
        raise FileNotFoundError(f"no distillation data at {path}: make it with `mtpedge distill --out {path}`")
    with np.load(path) as data:
        tokens = data["tokens"].astype(np.int64)
        top_ids = data["topk_ids"] if "topk_ids" in data.files else None
        top_probs = data["topk_probs"] if "topk_probs" in data.files else None
        samples, start, row = [], 0, 0
        for p_len, r_len in zip(data["prompt_lengths"], data["response_lengths"], strict=True):
            ids = probs = None
            if top_ids is not None:
                ids, probs = top_ids[row:row + r_len], top_probs[row:row + r_len]
            samples.append(DistillSample(tokens[start:start + p_len], tokens[start + p_len:start + p_len + r_len],
                                         ids, probs))
            start += p_len + r_len
            row += r_len
    return samples


def load_distill_prompts(path: str | Path) -> list[str]:
    """The prompt texts (the last user turn of each sample) of one .npz file or of a folder of shards."""
    path = Path(path)
    if path.is_dir():
        return [prompt for shard in shard_files(path) for prompt in load_distill_prompts(shard)]
    with np.load(path) as data:
        return [str(p) for p in data["prompts"]]


def distill_one(engine: Engine, prompt: str, max_new_tokens: int) -> DistillSample:
    prompt_ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])
    result = generate(engine, prompt_ids, max_new_tokens=max_new_tokens, on_overflow="stop")
    return DistillSample(np.array(prompt_ids, dtype=np.int64), np.array(result.token_ids, dtype=np.int64))


def make_distill_data(engine: Engine, prompts: list[str], max_new_tokens: int) -> list[DistillSample]:
    """Greedy answers of the bundle's model to `prompts`, in memory (small sets, tests)."""
    return [distill_one(engine, prompt, max_new_tokens) for prompt in prompts]


def build_distill_file(engine: Engine, prompts: list[str], max_new_tokens: int, path: str | Path,
                       save_every: int = 16, progress: Callable[[int, int, int], None] | None = None) -> int:
    """Answer every prompt not yet in `path`, saving every `save_every` prompts; returns the sample count.

    progress(done, total, response_tokens_so_far) is called after each prompt.
    """
    path = Path(path)
    samples: list[DistillSample] = []
    done: list[str] = []
    if path.is_file():
        samples, done = load_distill_data(path), load_distill_prompts(path)
        if done != prompts[: len(done)]:
            raise ValueError(f"{path} was made from other prompts: remove it or choose another --out")
        log.info("resuming %s: %d of %d prompts done", path, len(done), len(prompts))
    for i, prompt in enumerate(prompts[len(done):], start=len(done)):
        samples.append(distill_one(engine, prompt, max_new_tokens))
        done.append(prompt)
        if (i + 1) % save_every == 0 or i + 1 == len(prompts):
            save_distill_data(samples, path, done)
        if progress:
            progress(i + 1, len(prompts), sum(len(s.response_ids) for s in samples))
    return len(samples)
