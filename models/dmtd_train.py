"""Training a DMTD model (models/dmtd.py): the gated two-stream pass, distilled from the base's own distribution.

One step = one sequence of the self-distilled data (the base model's answer to a prompt, with the teacher's
top-k next-token distribution at every answer token), with τ drawn from `taus` and the cycle's phase drawn at
random (dmtd-spec starts a cycle at every verified token, so every phase occurs): one model serves both modes
and every τ of the set. The loss is the cross-entropy against the teacher's top-k at every answer position,
heads and drafts alike (hard labels where the data has no teacher distribution).

The frozen prefix's output (the tapped states) is the same for every step that draws a sequence again, so it
is kept in memory (float16) up to `cache_gb`. The data folder may still be growing: it is re-read every
`reload_every` steps when its modification time changed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoint import read_checkpoint, write_checkpoint
from .decoder import Decoder
from .device import PRECISIONS, training_autocast
from .distill_data import DistillSample, load_distill_data
from .dmtd import DmtdConfig, DmtdModel, dmtd_hidden, draft_windows, tapped_states
from .loading import LoadedModel
from .mtp_training import sample_tokens, soft_cross_entropy
from .schedule import TrainingClock, learning_rate

log = logging.getLogger(__name__)

CHECKPOINT = "dmtd.pt"
FREQUENT_TOKENS = 16384  # answer tokens by frequency kept in a checkpoint: the drafting shortlist is taken from them
HOW_TO_MAKE = "train one with `mtpedge train-dmtd`"


@dataclass(frozen=True)
class TrainSettings:
    model: DmtdConfig = field(default_factory=DmtdConfig)
    taus: tuple[int, ...] = (2, 3, 4)
    steps: int = 3000
    lr: float = 5e-4
    warmup: int = 50
    # the cosine schedule's horizon; 0: this session's --steps for a new run, the checkpoint's own on resume.
    # Stated on resume it replaces the checkpoint's: the rate goes on along the new cosine from the step reached
    lr_horizon: int = 0
    weight_decay: float = 0.0
    max_len: int = 384  # tokens per sequence (prompt cut from the left, then the answer's tail)
    seed: int = 0
    checkpoint_every: int = 100
    eval_every: int = 250  # held-out figures (models/dmtd_eval.py; 0: never)
    reload_every: int = 50  # steps between checks whether the data folder has grown
    cache_gb: float = 2.0  # tapped states kept in memory
    # > 0: stop after this many seconds of training (resumed sessions included), the cosine laid over them
    # instead of over the step horizon (schedule.TrainingClock); steps stays the upper bound
    time_limit: float = 0.0
    precision: str = "float32"  # of the forward passes: float32 or bfloat16 (device.training_autocast)
    # a new run starts from this DMTD model's file instead of the base's layers; to rank 0 its LoRA is folded in
    # (DmtdModel.start_from). Ignored on resume
    init: str = ""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not self.taus or min(self.taus) < 2:
            raise ValueError(f"--taus must be cycle lengths >= 2, got {self.taus}")
        if self.steps < 0 or self.max_len < 8 or self.lr <= 0 or self.lr_horizon < 0 or self.time_limit < 0:
            raise ValueError("--steps, --lr-horizon and --time-limit must be >= 0, --max-len >= 8 and --lr > 0")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "model": self.model.to_dict(), "taus": list(self.taus)}

    @classmethod
    def from_dict(cls, data: dict) -> TrainSettings:
        return cls(**{**data, "model": DmtdConfig(**data["model"]), "taus": tuple(data["taus"])})


class DistillStream:
    """The samples of a (possibly growing) data folder or file, cut to max_len, with cached tapped states."""

    def __init__(self, path: Path, decoder: Decoder, tap: int, max_len: int, cache_gb: float) -> None:
        self.path, self.decoder, self.tap, self.max_len = Path(path), decoder, tap, max_len
        self.cache_budget = int(cache_gb * 2**30)
        self.mtime = -1.0
        self.samples: list[DistillSample] = []
        self._tapped: dict[bytes, torch.Tensor] = {}
        self._cached_bytes = 0
        self.refresh()

    def refresh(self) -> bool:
        """Re-read the data if it changed; True if it did."""
        if not self.path.exists():
            raise FileNotFoundError(f"distillation data {self.path} does not exist: pass --data with the folder "
                                    "of `mtpedge distill` (or an .npz of `save_distill_data`)")
        mtime = self.path.stat().st_mtime
        if mtime == self.mtime:
            return False
        samples = [s for s in load_distill_data(self.path) if s.response_ids.size >= 2]
        if not samples:
            raise ValueError(f"{self.path} holds no answers yet: wait for `mtpedge distill` to write a shard")
        self.mtime, self.samples = mtime, samples
        counts = np.bincount(np.concatenate([s.response_ids for s in samples]), minlength=self.decoder.cfg.vocab_size)
        self.frequent_tokens = np.argsort(-counts, kind="stable")[:FREQUENT_TOKENS].astype(np.int32)
        return True

    @property
    def tokens(self) -> int:
        return sum(s.prompt_ids.size + s.response_ids.size for s in self.samples)

    def sequence(self, index: int) -> tuple[np.ndarray, int, DistillSample]:
        sample = self.samples[index]
        tokens, prompt_len = sample_tokens(sample.prompt_ids, sample.response_ids, self.max_len)
        return tokens, prompt_len, sample

    def tapped(self, tokens: np.ndarray) -> torch.Tensor:
        key = tokens.tobytes()
        cached = self._tapped.get(key)
        if cached is not None:
            return cached.float()
        states = tapped_states(self.decoder, tokens, self.tap).half()  # rounded alike whether cached or not
        if self._cached_bytes + 2 * states.numel() <= self.cache_budget:
            self._tapped[key] = states
            self._cached_bytes += 2 * states.numel()
        return states.float()


def gated_loss(decoder: Decoder, model: DmtdModel, tokens: np.ndarray, prompt_len: int, sample: DistillSample,
               tapped: torch.Tensor, tau: int, anchor: int) -> torch.Tensor:
    """CE of the gated pass at every answer position (prompt_len - 1 .. n - 2) against the teacher's top-k."""
    hidden = dmtd_hidden(decoder, model, tokens, tapped, draft_windows(tokens.size, tau, anchor))
    rows = np.arange(prompt_len - 1, tokens.size - 1)
    logits = decoder.lm_head(hidden[torch.from_numpy(rows).to(hidden.device)])
    if sample.topk_ids is None:
        return F.cross_entropy(logits, torch.from_numpy(tokens[rows + 1]).to(logits.device))
    answer_rows = rows + 1 - prompt_len  # answer index of each target (a cut prompt loses its head only)
    device = logits.device
    top_ids = torch.from_numpy(sample.topk_ids[answer_rows].astype(np.int64)).to(device)
    top_probs = torch.from_numpy(sample.topk_probs[answer_rows].astype(np.float32)).to(device)
    return soft_cross_entropy(logits, top_ids, top_probs)


def save_checkpoint(path: Path, model: DmtdModel, optimizer, step: int, settings: TrainSettings,
                    loaded: LoadedModel, history: list, heldout: list, data_tokens: int,
                    frequent_tokens: np.ndarray, lr_horizon: int, trained_seconds: float = 0.0) -> None:
    """frequent_tokens: the training answers' tokens, most frequent first (the export's drafting shortlist);
    lr_horizon: the schedule's horizon, the --steps of the run's first session (kept on resume);
    trained_seconds: training time of every session so far (a time-limited run's clock)."""
    write_checkpoint({"kind": "dmtd", "dmtd": model.trainable_state(), "config": model.config.to_dict(),
                      "optimizer": optimizer.state_dict() if optimizer is not None else None, "step": step,
                      "lr_horizon": lr_horizon, "trained_seconds": round(trained_seconds, 1),
                      "settings": settings.to_dict(), "base_sha256": loaded.source_sha256, "base_name": loaded.name,
                      "history": history, "heldout": heldout, "data_tokens": data_tokens,
                      "frequent_tokens": torch.from_numpy(np.asarray(frequent_tokens, dtype=np.int32))}, path)


def load_dmtd(path: Path, loaded: LoadedModel) -> tuple[DmtdModel, dict]:
    """The DMTD model of a checkpoint or shipped file, checked against the base model it was trained on."""
    state = read_checkpoint(path, "DMTD", HOW_TO_MAKE)
    if state.get("kind") != "dmtd" or "dmtd" not in state:
        raise ValueError(f"{path} is not a DMTD checkpoint of this mtpedge (an older copy-of-layers one, or "
                         f"another kind): {HOW_TO_MAKE}")
    if state.get("base_sha256") != loaded.source_sha256:
        raise ValueError(f"{path} was trained on {state.get('base_name')}, not on {loaded.name} (weights differ): "
                         "pass the base model the checkpoint was trained on")
    model = DmtdModel(loaded.decoder, DmtdConfig(**state["config"])).to(loaded.decoder.lm_head.weight.device)
    model.load_trainable_state(state["dmtd"])
    return model, state


def write_release(checkpoint: Path, out: Path, loaded: LoadedModel) -> int:
    """The shipped form of a checkpoint: the trained weights in float16, the provenance, no optimizer; bytes."""
    state = read_checkpoint(checkpoint, "DMTD", HOW_TO_MAKE)
    model, _ = load_dmtd(checkpoint, loaded)
    release = {**state, "dmtd": {k: v.half() for k, v in model.trainable_state().items()}, "optimizer": None,
               "history": state["history"][-1:]}
    write_checkpoint(release, out)
    return out.stat().st_size


def _freeze(decoder: Decoder) -> Decoder:
    decoder.eval()
    for p in decoder.parameters():  # the base model stays exactly as it is
        p.requires_grad_(False)
    return decoder


@dataclass
class _Run:
    """What a checkpoint carries from one session of a run to the next."""

    model: DmtdModel
    lr_horizon: int  # the first session's --steps (or a stated --lr-horizon): a resumed run keeps its schedule
    optimizer_state: dict | None = None
    step: int = 0
    history: list = field(default_factory=list)
    heldout: list = field(default_factory=list)
    trained_seconds: float = 0.0  # earlier sessions' training time (schedule.TrainingClock)


def _start_or_resume(loaded: LoadedModel, ckpt: Path, settings: TrainSettings, resume: bool,
                     say: Callable[[str], None]) -> _Run:
    if not ckpt.is_file():
        model = DmtdModel(loaded.decoder, settings.model, settings.seed).to(loaded.decoder.lm_head.weight.device)
        if settings.init:
            model.start_from(load_dmtd(Path(settings.init), loaded)[0])
            say(f"started from the DMTD model {settings.init}")
        return _Run(model, settings.lr_horizon or settings.steps)
    if not resume:
        raise ValueError(f"{ckpt} exists: pass --resume to continue it, or another --out")
    model, state = load_dmtd(ckpt, loaded)
    started_with = TrainSettings.from_dict(state["settings"])
    if started_with.model != settings.model:
        raise ValueError(f"{ckpt} was trained with {state['config']}, not {settings.model.to_dict()}: resume "
                         "with the same --decoding-layers / --thinking-layers / --rank, or use another --out")
    step, horizon = int(state["step"]), int(state.get("lr_horizon", started_with.steps))
    say(f"resumed from {ckpt} at step {step}")
    if settings.lr_horizon and settings.lr_horizon != horizon:
        if settings.lr_horizon <= step:
            raise ValueError(f"--lr-horizon {settings.lr_horizon} is not past the checkpoint's step {step}: the rate "
                             f"would stay at its floor; state a horizon past {step}, or leave it out to keep the "
                             f"checkpoint's ({horizon})")
        before, after = (learning_rate(step, settings.lr, settings.warmup, h) for h in (horizon, settings.lr_horizon))
        say(f"learning-rate horizon {horizon} -> {settings.lr_horizon}: the rate at step {step} goes from "
            f"{before:.1e} to {after:.1e}, then along the new cosine")
        horizon = settings.lr_horizon
    return _Run(model, horizon, state["optimizer"], step, list(state["history"]), list(state.get("heldout", [])),
                float(state.get("trained_seconds", 0.0)))


def _draw(stream: DistillStream, settings: TrainSettings, step: int) -> tuple[np.ndarray, int, DistillSample, int, int]:
    """Step `step`'s sequence, τ and cycle anchor: drawn from (seed, step), so a resumed run draws the same
    without saving a random state."""
    rng = np.random.default_rng([settings.seed, step])
    tokens, prompt_len, sample = stream.sequence(int(rng.integers(len(stream.samples))))
    tau = int(settings.taus[int(rng.integers(len(settings.taus)))])
    anchor = min(prompt_len - 1 + int(rng.integers(tau)), tokens.size - 2)
    return tokens, prompt_len, sample, tau, anchor


def _step_loss(decoder: Decoder, model: DmtdModel, stream: DistillStream, settings: TrainSettings,
               step: int) -> tuple[torch.Tensor, int, int]:
    """Step `step`'s loss (its forward passes in settings.precision), sequence length and τ."""
    tokens, prompt_len, sample, tau, anchor = _draw(stream, settings, step)
    with training_autocast(decoder.lm_head.weight.device, settings.precision):
        loss = gated_loss(decoder, model, tokens, prompt_len, sample, stream.tapped(tokens), tau, anchor)
    return loss, int(tokens.size), tau


def _seconds_left(by_steps: float, time_limit: float, clock: TrainingClock) -> float:
    """What is left of the run: the steps still to go at the pace so far, or the time limit, if sooner."""
    return min(by_steps, max(0.0, time_limit - clock.seconds())) if time_limit else by_steps


def _optimise(loss: torch.Tensor, optimizer: torch.optim.Optimizer, params: list, step: int) -> float:
    """One AdamW step on `loss` (gradients clipped to norm 1); the loss's value."""
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite loss at step {step}: lower --lr")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return value


def _describe(model: DmtdModel, settings: TrainSettings, params: list, stream: DistillStream) -> str:
    cfg = settings.model
    return (f"DMTD: tap at layer {model.tap}, m = {cfg.thinking_layers} thinking + D = {cfg.decoding_layers} decoding "
            f"layers trained (LoRA rank {cfg.lora_rank}: {sum(p.numel() for p in params):,} weights), τ from "
            f"{settings.taus}, on {len(stream.samples)} answers ({stream.tokens:,} tokens)")


def train_dmtd(loaded: LoadedModel, data: Path, out_dir: Path, settings: TrainSettings, resume: bool = False,
               progress: Callable[[str], None] | None = None, stop_at: int | None = None,
               evaluate: Callable[[DmtdModel], dict] | None = None) -> Path:
    """Train (or resume) a DMTD model; returns the checkpoint path (written every checkpoint_every steps).

    stop_at ends this run early at that step (as an interruption would), keeping the schedule of `steps`;
    settings.time_limit ends it at the first step past that many seconds of training, as planned.
    evaluate(model) -> figures runs every eval_every steps and at the end; they go to the checkpoint's `heldout`.
    """
    say = progress or log.info
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt = out_dir / CHECKPOINT
    decoder = _freeze(loaded.decoder)
    run = _start_or_resume(loaded, ckpt, settings, resume, say)
    model, step = run.model, run.step
    params, optimizer = _optimizer(model, settings, run.optimizer_state)
    model.train()
    stream = DistillStream(Path(data), decoder, model.tap, settings.max_len, settings.cache_gb)
    say(_describe(model, settings, params, stream))
    started, tokens_done, steps_run, ema = time.perf_counter(), 0, 0, None
    last = settings.steps if stop_at is None else min(stop_at, settings.steps)
    clock = TrainingClock(settings.time_limit, run.trained_seconds)
    timed_out = clock.out_of_time()

    def rate(at: int) -> float:
        return learning_rate(at, settings.lr, settings.warmup, run.lr_horizon, clock.progress())

    def save() -> None:
        save_checkpoint(ckpt, model, optimizer, step, settings, loaded, run.history, run.heldout, stream.tokens,
                        stream.frequent_tokens, run.lr_horizon, clock.seconds())

    while step < last and not timed_out:
        if settings.reload_every and step % settings.reload_every == 0 and step and stream.refresh():
            say(f"step {step}: data now {len(stream.samples)} answers ({stream.tokens:,} tokens)")
        for group in optimizer.param_groups:
            group["lr"] = rate(step)
        loss, length, tau = _step_loss(decoder, model, stream, settings, step)
        value = _optimise(loss, optimizer, params, step)
        step, steps_run, tokens_done = step + 1, steps_run + 1, tokens_done + length
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        run.history.append([step, round(value, 4), tau])
        timed_out = clock.out_of_time()
        if step % 10 == 0 or step == last or timed_out:
            elapsed = time.perf_counter() - started
            left = _seconds_left((last - step) * elapsed / steps_run, settings.time_limit, clock)
            say(f"step {step}/{settings.steps} loss {ema:.3f} lr {rate(step):.1e} "
                f"{tokens_done / elapsed:.0f} tok/s, ~{left / 60:.0f} min left")
        if evaluate is not None and settings.eval_every and (step % settings.eval_every == 0 or step == settings.steps):
            _evaluate_into(run, step, model, evaluate, say)
        if step % settings.checkpoint_every == 0 or step == last or timed_out:
            save()
    if timed_out and steps_run:
        say(f"time limit: {clock.seconds():.0f} s of training reached at step {step}")
    final = step == settings.steps or timed_out
    if evaluate is not None and final and (not run.heldout or run.heldout[-1]["step"] != step):
        # the end of a time-limited run, or a run cut short and resumed with --steps at the step it reached
        _evaluate_into(run, step, model, evaluate, say)
        save()
    elif steps_run == 0:
        save()
    return ckpt


def _optimizer(model: DmtdModel, settings: TrainSettings, state: dict | None):
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    if state is not None:
        optimizer.load_state_dict(state)
    return params, optimizer


def _evaluate_into(run, step: int, model: DmtdModel, evaluate: Callable[[DmtdModel], dict],
                   say: Callable[[str], None]) -> None:
    run.heldout.append({"step": step, **evaluate(model)})
    say("held-out " + " ".join(f"{k} {v}" for k, v in run.heldout[-1].items()))
