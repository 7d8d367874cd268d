"""Training the multi-token adapter on self-distilled data: one sample per step, resumable checkpoints.

Per step (one DistillSample = prompt + the base model's own greedy response):
  1. the token sequence runs once through the frozen base (no gradients; gate 0 = the base exactly): its K/V
     become the mask block's cache, its final latents the LCM targets. Cached per sample (bounded), so later
     epochs skip it.
  2. a random subset of owner tokens gets k mask slots each; one gated call over all of them (gate 1);
  3. loss = CE(plain mask logits) + CE(sampler-head logits) + lcm_weight * MSE(mask latent, NTP latent of the
     same target, detached). The base's own NTP CE has no gradient (frozen, gate 0): it is reported only.
     With teacher_weight w > 0 each CE is (1 - w) * CE(hard label) + w * CE(the teacher's stored top-k
     distribution at the target, renormalised): distillation from the base's own distribution, which for greedy
     data has the hard label as its argmax but also ranks the runners-up the drafts compete with.

Every `eval_every` steps `train` calls an evaluation (models/mtp_eval.heldout_tau: τ on held-out questions),
so k, rank and the head's form are chosen by held-out τ rather than training loss.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from .checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from .device import PRECISIONS, training_autocast
from .distill_data import DistillSample
from .mtp_adapter import MtpAdapter, MtpConfig
from .mtp_layout import IGNORE, block_owners, causal_bias, mask_block_layout
from .schedule import TrainingClock, learning_rate

log = logging.getLogger(__name__)

ADAPTER_FORMAT = "mtpedge-mtp-adapter"
ADAPTER_VERSION = 1


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    lr: float = 1e-3
    warmup: int = 20
    max_seq_len: int = 256  # prompt + response tokens per sample (the prompt is cut from the left)
    max_blocks: int = 48  # owner tokens (mask blocks) per step
    lcm_weight: float = 1.0
    seed: int = 0
    checkpoint_every: int = 25
    base_cache_mb: int = 2000  # memory for cached base passes (K/V + latents) across epochs
    cosine_steps: int = 0  # > 0: cosine decay of the learning rate to 10% at this step (then flat); 0: constant
    teacher_weight: float = 0.0  # share of the CE taken against the stored teacher top-k (0: hard labels only)
    eval_every: int = 0  # steps between held-out evaluations (0: none)
    # > 0: stop after this many seconds of training (resumed sessions included) and lay the cosine over them
    # instead of over cosine_steps (schedule.TrainingClock); steps stays the upper bound
    time_limit: float = 0.0
    precision: str = "float32"  # of the forward passes: float32 or bfloat16 (device.training_autocast)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.steps < 1 or self.max_blocks < 1 or self.max_seq_len < 4:
            raise ValueError("steps and max_blocks must be >= 1 and max_seq_len >= 4")
        if self.time_limit < 0:
            raise ValueError(f"time_limit must be >= 0 seconds (0: none), got {self.time_limit}")
        if self.lr <= 0:
            raise ValueError(f"the learning rate must be > 0, got {self.lr}")
        if not 0.0 <= self.teacher_weight <= 1.0:
            raise ValueError(f"teacher_weight must be in [0, 1], got {self.teacher_weight}")


@dataclass
class BasePass:
    kv: list[torch.Tensor]  # per layer (1, Hkv, T, D), interleaved key/value
    hidden: torch.Tensor  # (T, d) final-normed latents (LCM targets)
    ntp_ce: float  # the base's own CE on the response (reported, no gradient)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * 4 for t in self.kv) + self.hidden.numel() * 4


def sample_tokens(prompt_ids: np.ndarray, response_ids: np.ndarray, max_len: int) -> tuple[np.ndarray, int]:
    """prompt + response cut to max_len tokens (prompt cut from the left, then the response's tail)."""
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    response = np.asarray(response_ids, dtype=np.int64)[: max_len - 1]
    keep = max(1, max_len - response.size)
    prompt = prompt[-keep:]
    return np.concatenate([prompt, response]), prompt.size


def soft_cross_entropy(logits: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor) -> torch.Tensor:
    """Mean CE of `logits` (N, V) against top-k target distributions (N, k), each renormalised to sum 1."""
    target = top_probs / top_probs.sum(-1, keepdim=True).clamp_min(1e-12)
    return -(target * torch.log_softmax(logits, -1).gather(1, top_ids)).sum(-1).mean()


class MtpTrainer:
    def __init__(self, adapter: MtpAdapter, config: TrainConfig) -> None:
        self.adapter = adapter
        self.config = config
        self.device = adapter.masks.device
        cfg = adapter.decoder.cfg
        self.inv_freq = inverse_frequencies(cfg.rope, cfg.head_dim)
        params = [p for p in adapter.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
        self.step = 0
        self.history: list[dict] = []
        self.heldout: list[dict] = []  # {"step": s, **evaluation} every eval_every steps
        self.clock = TrainingClock(config.time_limit)
        self._cache: dict[int, BasePass] = {}
        self._cache_bytes = 0

    def _rope(self, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rope_tables(positions, self.inv_freq)
        return self._tensor(cos), self._tensor(sin)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def base_pass(self, index: int, tokens: np.ndarray, prompt_len: int) -> BasePass:
        if index in self._cache:
            return self._cache[index]
        cfg = self.adapter.decoder.cfg
        t_len = tokens.shape[0]
        ids = self._tensor(tokens)
        empty = [torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim, device=self.device)] * (2 * cfg.num_layers)
        cos, sin = self._rope(np.arange(t_len))
        with torch.no_grad():
            embeds = self.adapter.decoder.model.embed_tokens(ids)[None]
            hidden, kv = self.adapter.run(embeds, self._tensor(causal_bias(t_len)), cos, sin, empty, None)
            logits = self.adapter.unembed(hidden[0, prompt_len - 1: -1])
            ntp_ce = float(F.cross_entropy(logits, ids[prompt_len:]))
        result = BasePass(kv, hidden[0], ntp_ce)
        if self._cache_bytes + result.nbytes <= self.config.base_cache_mb * 2**20:
            self._cache[index] = result
            self._cache_bytes += result.nbytes
        return result

    def lr_at(self, step: int) -> float:
        # a fixed horizon (not --steps) so that a resumed run longer than planned keeps the same schedule; a
        # time-limited run's cosine follows its clock
        return learning_rate(step, self.config.lr, self.config.warmup, self.config.cosine_steps,
                             self.clock.progress())

    def _ce(self, logits: torch.Tensor, targets: torch.Tensor, teacher: tuple | None) -> torch.Tensor:
        hard = F.cross_entropy(logits, targets)
        w = self.config.teacher_weight
        if teacher is None or w == 0:
            return hard
        return (1 - w) * hard + w * soft_cross_entropy(logits, *teacher)

    def train_step(self, index: int, sample: DistillSample) -> dict:
        """One optimisation step on one sample; returns its metrics."""
        started = time.perf_counter()
        cfg = self.config
        rng = np.random.default_rng(cfg.seed * 1_000_003 + self.step)
        tokens, prompt_len = sample_tokens(sample.prompt_ids, sample.response_ids, cfg.max_seq_len)
        owners = block_owners(prompt_len, tokens.shape[0], cfg.max_blocks, rng)
        if owners.size == 0:
            return {}
        with training_autocast(self.device, cfg.precision):
            loss, metrics, hits, valid = self._loss(index, sample, tokens, prompt_len, owners)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        k = self.adapter.config.k
        depth = self._tensor(np.tile(np.arange(k), owners.size))[valid]
        metrics.update({"step": self.step, "loss": float(loss.detach()), "mask_slots": int(valid.sum()),
                        "seconds": round(time.perf_counter() - started, 3)})
        for j in range(k):
            sel = depth == j
            if sel.any():
                metrics[f"top1_m{j + 1}"] = float(hits[sel].mean())
        return metrics

    def _loss(self, index: int, sample: DistillSample, tokens: np.ndarray, prompt_len: int,
              owners: np.ndarray) -> tuple[torch.Tensor, dict, torch.Tensor, torch.Tensor]:
        """The step's loss, its parts, the draft hits and the valid-slot mask (the forward passes)."""
        cfg = self.config
        k = self.adapter.config.k
        base = self.base_pass(index, tokens, prompt_len)
        layout = mask_block_layout(tokens, owners, k)
        n = layout.positions.shape[0]
        embeds = self.adapter.masks.repeat(owners.size, 1)[None]  # (1, N, d): block-major, mask j in order
        cos, sin = self._rope(layout.positions)
        gate = torch.ones(1, n, device=self.device)
        hidden, _ = self.adapter.run(embeds, self._tensor(layout.bias), cos, sin, base.kv, gate)
        hidden = hidden[0]
        targets = self._tensor(layout.targets)
        valid = targets != IGNORE
        teacher = self._teacher(sample, owners, prompt_len, layout.targets != IGNORE)
        plain_logits = self.adapter.unembed(hidden[valid])
        ce_plain = self._ce(plain_logits, targets[valid], teacher)
        loss = ce_plain
        metrics = {"ce_mask": float(ce_plain.detach())}
        if self.adapter.sampler is not None:
            prev = self._tensor(layout.prev_tokens)[valid]
            sampled_logits = self.adapter.unembed(self.adapter.sampler_hidden(prev, hidden[valid]))
            ce_sampler = self._ce(sampled_logits, targets[valid], teacher)
            loss = loss + ce_sampler
            metrics["ce_sampler"] = float(ce_sampler.detach())
        else:
            sampled_logits = plain_logits
        if cfg.lcm_weight:
            ntp_latent = base.hidden[self._tensor(layout.ntp_rows)[valid]].detach()
            lcm = F.mse_loss(hidden[valid], ntp_latent)
            loss = loss + cfg.lcm_weight * lcm
            metrics["lcm"] = float(lcm.detach())
        metrics["ntp_ce"] = base.ntp_ce
        hits = (sampled_logits.argmax(-1) == targets[valid]).float()
        return loss, metrics, hits, valid

    def _teacher(self, sample: DistillSample, owners: np.ndarray, prompt_len: int,
                 valid: np.ndarray) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The stored teacher top-k (ids, probs) at each valid mask slot's target, or None (hard labels only)."""
        if self.config.teacher_weight == 0 or sample.topk_ids is None:
            return None
        k = self.adapter.config.k
        target_index = np.repeat(owners, k) + 2 + np.tile(np.arange(k), owners.size)
        rows = target_index[valid] - prompt_len  # response index: the prompt was cut from the left only
        return (self._tensor(sample.topk_ids[rows].astype(np.int64)),
                self._tensor(sample.topk_probs[rows].astype(np.float32)))


def save_checkpoint(path: Path, trainer: MtpTrainer, base_info: dict, data_info: dict) -> None:
    """Adapter + optimizer + history, written atomically (an interrupted save leaves the old one)."""
    payload = {
        "format": ADAPTER_FORMAT, "version": ADAPTER_VERSION,
        "mtp_config": trainer.adapter.config.to_dict(), "train_config": asdict(trainer.config),
        "base": base_info, "data": data_info, "step": trainer.step,
        "state": trainer.adapter.trainable_state(), "optimizer": trainer.optimizer.state_dict(),
        "history": trainer.history, "heldout": trainer.heldout, "trained_seconds": round(trainer.clock.seconds(), 1),
    }
    write_checkpoint(payload, path)


def load_checkpoint(path: str | Path) -> dict:
    """An adapter checkpoint's payload (read safely: a file that asks to run code is refused unread)."""
    payload = read_checkpoint(path, "MTP adapter", "train one with `mtpedge train-mtp`")
    if payload.get("format") != ADAPTER_FORMAT:
        raise CheckpointError(f"{path} is not an mtpedge MTP adapter checkpoint (format {payload.get('format')!r})")
    if payload.get("version") != ADAPTER_VERSION:
        raise CheckpointError(f"{path}: adapter version {payload.get('version')}, this mtpedge reads "
                              f"{ADAPTER_VERSION}; retrain with `mtpedge train-mtp`")
    return payload


def write_release_copy(checkpoint: str | Path, out: str | Path) -> int:
    """An export-only copy of a checkpoint: no optimizer state or per-step history, weights in float16 (what the
    project ships; drafts only propose, so rounding the adapter can change speed, never the output). Loading
    casts it back to float32. Returns the file's size in bytes."""
    payload = load_checkpoint(checkpoint)
    history, heldout = payload.get("history", []), payload.get("heldout", [])
    release = {**payload, "optimizer": None, "history": history[-1:], "heldout": heldout[-1:],
               "state": {name: value.to(torch.float16) for name, value in payload["state"].items()}}
    write_checkpoint(release, out)
    return Path(out).stat().st_size


def start_from(adapter: MtpAdapter, payload: dict, base_sha256: str) -> None:
    """Load a trained adapter's weights (a checkpoint or a release copy) into `adapter` as a starting point: a
    fine-tuning run on new data begins where that one ended, with a fresh optimizer and schedule."""
    if MtpConfig(**payload["mtp_config"]) != adapter.config:
        raise ValueError(f"the starting adapter was trained with {payload['mtp_config']}, not "
                         f"{adapter.config.to_dict()}: pass its --k / --rank / --alpha / --sampler-form")
    if payload.get("base", {}).get("source_sha256") != base_sha256:
        raise ValueError(f"the starting adapter was trained on {payload.get('base', {}).get('name')}, not on this "
                         "base model (weights differ): pass the model it was trained on, or drop --init")
    adapter.load_trainable_state(payload["state"])


def adapter_from_checkpoint(decoder, payload: dict) -> MtpAdapter:
    adapter = MtpAdapter(decoder, MtpConfig(**payload["mtp_config"]))
    adapter.load_trainable_state(payload["state"])
    return adapter


def train(adapter: MtpAdapter, samples: list, config: TrainConfig, checkpoint: Path, base_info: dict,
          data_info: dict, resume: dict | None = None, progress: Callable[[dict], None] | None = None,
          evaluate: Callable[[MtpAdapter], dict] | None = None) -> MtpTrainer:
    """Run `config.steps` steps in total (continuing a resumed checkpoint), or until `config.time_limit` seconds of
    training have passed, checkpointing as it goes.

    evaluate(adapter) -> metrics runs every `config.eval_every` steps and at the last step (no gradients); its
    results go to the trainer's `heldout` list (and the checkpoint), and to `progress` as {"heldout": ...}.
    """
    if not samples:
        raise ValueError("no training samples: make the distillation data first")
    if config.teacher_weight and not any(s.topk_ids is not None for s in samples):
        raise ValueError("--teacher-weight needs data with the teacher's top-k (made by `mtpedge distill`); this "
                         "data has hard labels only: pass --teacher-weight 0")
    trainer = MtpTrainer(adapter, config)
    if resume is not None:
        if MtpConfig(**resume["mtp_config"]) != adapter.config:
            raise ValueError(f"the checkpoint was trained with {resume['mtp_config']}, not {adapter.config.to_dict()}:"
                             " resume with the same --k / --rank / --no-sampler / --sampler-form")
        adapter.load_trainable_state(resume["state"])
        trainer.optimizer.load_state_dict(resume["optimizer"])
        trainer.step, trainer.history = resume["step"], list(resume["history"])
        trainer.heldout = list(resume.get("heldout", []))
        trainer.clock = TrainingClock(config.time_limit, float(resume.get("trained_seconds", 0.0)))
    order_rng = np.random.default_rng(config.seed)
    order = order_rng.permutation(len(samples))
    done = trainer.step >= config.steps or trainer.clock.out_of_time()
    while not done:
        index = int(order[trainer.step % len(samples)])
        metrics = trainer.train_step(index, samples[index])
        if not metrics:  # no room for a mask block in this sample: the step passes without an update
            trainer.step += 1
        done = trainer.step >= config.steps or trainer.clock.out_of_time()
        if metrics:
            if not all(math.isfinite(v) for v in metrics.values() if isinstance(v, float)):
                raise FloatingPointError(f"non-finite loss at step {trainer.step}: {metrics}; lower --lr")
            trainer.history.append(metrics)
            if progress:
                progress(metrics)
        due = config.eval_every and (trainer.step % config.eval_every == 0 or done)
        if evaluate is not None and due:
            with torch.no_grad():
                result = {"step": trainer.step, **evaluate(adapter)}
            trainer.heldout.append(result)
            if progress:
                progress({"heldout": result})
        if trainer.step % config.checkpoint_every == 0 or done:
            save_checkpoint(checkpoint, trainer, base_info, data_info)
    return trainer


def write_curve(history: list[dict], path: Path) -> None:
    """The loss curve as JSON (one record per step)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(history, indent=None))
    os.replace(tmp, path)
