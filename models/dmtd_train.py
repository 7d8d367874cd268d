"""Training the DMTD decoding copy: teacher-forced next-token loss under the cyclic gate, with checkpoints.

One step = one self-distilled sequence (chat-templated prompt + the base model's own greedy response) with τ
drawn from `taus`: one checkpoint then serves every τ of that set at inference (the paper trains one τ per
model; three runs do not fit an hour on one core). The thinking layers are frozen, so their hidden states are
computed once per sequence and cached. The data file may still be growing while we train: it is re-read when
its modification time changes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..export.quality import HELD_TEXT
from .checkpoint import read_checkpoint, write_checkpoint
from .decoder import Decoder
from .dmtd import DmtdHead, cyclic_gate, dmtd_logits, perplexities, thinking_hidden
from .loading import LoadedModel

log = logging.getLogger(__name__)

CHECKPOINT = "dmtd.pt"


@dataclass(frozen=True)
class TrainSettings:
    decoding_layers: int = 4
    taus: tuple[int, ...] = (2, 3, 4)
    steps: int = 2000
    lr: float = 1e-4
    warmup: int = 50
    weight_decay: float = 0.0
    max_len: int = 256  # tokens per sequence (prompt + response), longer ones are cut
    seed: int = 0
    checkpoint_every: int = 100
    eval_every: int = 250  # held-text perplexity (0: never)
    reload_every: int = 50  # steps between checks whether the data file has grown

    def __post_init__(self) -> None:
        if not self.taus or min(self.taus) < 2:
            raise ValueError(f"--taus must be cycle lengths >= 2, got {self.taus}")
        if self.steps < 0 or self.max_len < 2 or self.lr <= 0:
            raise ValueError("--steps must be >= 0, --max-len >= 2 and --lr > 0")


def learning_rate(settings: TrainSettings, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class DistillStream:
    """Sequences of the (possibly growing) distillation file, with cached thinking hidden states."""

    def __init__(self, path: Path, decoder: Decoder, head: DmtdHead, max_len: int) -> None:
        self.path, self.decoder, self.head, self.max_len = path, decoder, head, max_len
        self.mtime = -1.0
        self.sequences: list[tuple[np.ndarray, int]] = []  # (ids, anchor)
        self._hidden: dict[bytes, torch.Tensor] = {}
        self.refresh()

    def refresh(self) -> bool:
        """Re-read the file if it changed; True if it did."""
        from .distill_data import load_distill_data

        if not self.path.exists():
            raise FileNotFoundError(f"distillation data {self.path} does not exist: pass --data with the folder "
                                    "of `mtpedge distill` (or an .npz of `save_distill_data`)")
        mtime = self.path.stat().st_mtime
        if mtime == self.mtime:
            return False
        samples = load_distill_data(self.path)
        if not samples:
            raise ValueError(f"{self.path} holds no samples yet")
        self.mtime = mtime
        self.sequences = []
        for s in samples:
            ids = np.concatenate([s.prompt_ids, s.response_ids]).astype(np.int64)[: self.max_len]
            anchor = min(len(s.prompt_ids), len(ids)) - 1  # the last prompt token is the first cyclic head
            self.sequences.append((ids, anchor))
        log.info("distillation data: %d sequences, %d tokens", len(self.sequences),
                 sum(len(ids) for ids, _ in self.sequences))
        return True

    def hidden(self, ids: np.ndarray) -> torch.Tensor:
        key = ids.tobytes()
        if key not in self._hidden:
            self._hidden[key] = thinking_hidden(self.decoder, ids, self.head.split)
        return self._hidden[key]

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids, _ in self.sequences)


def held_text_ids(loaded: LoadedModel, limit: int = 512) -> np.ndarray:
    return np.asarray(loaded.tokenizer(HELD_TEXT, add_special_tokens=False)["input_ids"][:limit], dtype=np.int64)


def save_checkpoint(path: Path, head: DmtdHead, optimizer, step: int, settings: TrainSettings, loaded: LoadedModel,
                    history: list) -> None:
    write_checkpoint({"head": head.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                      "settings": dataclasses.asdict(settings), "decoding_layers": settings.decoding_layers,
                      "base_sha256": loaded.source_sha256, "base_name": loaded.name, "history": history}, path)


def load_head(path: Path, loaded: LoadedModel) -> tuple[DmtdHead, dict]:
    """The trained decoding copy of a checkpoint, checked against the base model it was trained on."""
    state = read_checkpoint(path, "DMTD", "train one with `mtpedge train-dmtd`")
    if state.get("base_sha256") != loaded.source_sha256:
        raise ValueError(f"{path} was trained on {state.get('base_name')}, not on {loaded.name} (weights differ): "
                         "pass the base model the checkpoint was trained on")
    head = DmtdHead(loaded.decoder, int(state["decoding_layers"])).to(loaded.decoder.lm_head.weight.device)
    head.load_state_dict(state["head"])
    return head, state


def train_dmtd(loaded: LoadedModel, data: Path, out_dir: Path, settings: TrainSettings, resume: bool = False,
               progress: Callable[[str], None] | None = None, stop_at: int | None = None) -> Path:
    """Train (or resume) the DMTD decoding copy; returns the checkpoint path (written every checkpoint_every).

    stop_at ends this run early at that step (as an interruption would), keeping the schedule of `steps`.
    """
    say = progress or log.info
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt = out_dir / CHECKPOINT
    decoder = loaded.decoder.eval()
    for p in decoder.parameters():  # embeddings, thinking layers, base decoding layers and LM head stay frozen
        p.requires_grad_(False)
    head = DmtdHead(decoder, settings.decoding_layers).to(decoder.lm_head.weight.device)
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    step, history = 0, []
    if resume and ckpt.is_file():
        head, state = load_head(ckpt, loaded)
        if state["decoding_layers"] != settings.decoding_layers:
            raise ValueError(f"{ckpt} has D = {state['decoding_layers']}, not {settings.decoding_layers}: "
                             "resume with the same --decoding-layers or use another --out")
        optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
        optimizer.load_state_dict(state["optimizer"])
        step, history = int(state["step"]), list(state["history"])
        say(f"resumed from {ckpt} at step {step}")
    elif ckpt.is_file():
        raise ValueError(f"{ckpt} exists: pass --resume to continue it, or another --out")
    head.train()
    stream = DistillStream(Path(data), decoder, head, settings.max_len)
    held = held_text_ids(loaded)
    say(f"training D = {settings.decoding_layers} decoding layers ({sum(p.numel() for p in head.parameters()):,} "
        f"weights), τ from {settings.taus}, on {len(stream.sequences)} sequences ({stream.tokens} tokens)")
    started, tokens_done, steps_run, ema = time.perf_counter(), 0, 0, None
    last = settings.steps if stop_at is None else min(stop_at, settings.steps)
    while step < last:
        if settings.reload_every and step % settings.reload_every == 0 and stream.refresh():
            say(f"step {step}: data now {len(stream.sequences)} sequences ({stream.tokens} tokens)")
        rng = np.random.default_rng([settings.seed, step])  # reproducible across resumes without saving rng state
        ids, anchor = stream.sequences[int(rng.integers(len(stream.sequences)))]
        tau = int(settings.taus[int(rng.integers(len(settings.taus)))])
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(settings, step)
        logits = dmtd_logits(decoder, head, ids, stream.hidden(ids), cyclic_gate(len(ids), tau, anchor))
        loss = torch.nn.functional.cross_entropy(logits[:-1], torch.from_numpy(ids[1:]).to(logits.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        step += 1
        steps_run += 1
        tokens_done += len(ids)
        ema = float(loss.detach()) if ema is None else 0.95 * ema + 0.05 * float(loss.detach())
        history.append([step, round(float(loss.detach()), 4), tau])
        if step % 10 == 0 or step == settings.steps:
            rate = tokens_done / (time.perf_counter() - started)
            eta = (settings.steps - step) * (time.perf_counter() - started) / steps_run
            say(f"step {step}/{settings.steps} loss {ema:.3f} (τ={tau}) lr {learning_rate(settings, step):.1e} "
                f"{rate:.0f} tok/s, ~{eta / 60:.0f} min left")
        if settings.eval_every and (step % settings.eval_every == 0 or step == settings.steps):
            head.eval()
            ppl = perplexities(decoder, head, held, settings.taus, anchor=16)
            head.train()
            history.append([step, "held_ppl", ppl])
            say(f"step {step}: held-text perplexity " + ", ".join(f"{k} {v:.2f}" for k, v in ppl.items()))
        if step % settings.checkpoint_every == 0 or step == settings.steps:
            save_checkpoint(ckpt, head, optimizer, step, settings, loaded, history)
    save_checkpoint(ckpt, head, optimizer, step, settings, loaded, history)
    return ckpt
