"""Held-out figures of a DMTD model, teacher-forced, cheap enough to run every few hundred training steps.

    spec_tau        τ of `dmtd-spec` with chains of k drafts on held-out questions: the reference is the base
                    model's greedy answer (what lossless decoding outputs whatever the drafts). Each call's head
                    is the last verified token p and its drafts are the DMTD model's predictions at p + 1 .. p + k
                    given the true tokens before them; while drafts are right those ARE the tokens the runtime
                    feeds, so the accepted count is the number of leading right predictions. One gated pass per
                    phase of the cycle (k + 1 of them) gives it for every p; the calls are then walked as the
                    runtime makes them (the prefill's token first, then one call per accepted chain + 1).
    spec_acc_d<j>   top-1 of the j-th draft given the true tokens before it
    <set>_tau<t>_*  the lossy `dmtd` at cycle τ = t, teacher-forced from `anchor` on (the prompt, or the first
                    16 tokens of the held text): top1 = its argmax is the text's next token, agree = its argmax
                    is the base model's, ppl = perplexity of the text; <set>_base_* the base model's own
"""

from __future__ import annotations

import numpy as np
import torch

from .decoder import Decoder
from .dmtd import DmtdModel, base_logits, dmtd_logits, draft_windows, tapped_states
from .mtp_eval import HeldOut


def spec_accepted(decoder: Decoder, model: DmtdModel, tokens: np.ndarray, prompt_len: int, k: int) -> np.ndarray:
    """accepted[p] for every head p in [prompt_len - 1, n - 2]: leading right drafts of a k-draft chain."""
    n = tokens.size
    tapped = tapped_states(decoder, tokens, model.tap)
    accepted = np.zeros(n, dtype=np.int64)
    for phase in range(k + 1):
        anchor = prompt_len - 1 + phase
        if anchor > n - 2:
            break
        predicted = dmtd_logits(decoder, model, tokens, tapped, draft_windows(n, k + 1, anchor)).argmax(-1)
        predicted = predicted.cpu().numpy()
        for p in range(anchor, n - 1, k + 1):
            depth = min(k, n - 2 - p)  # drafts past the text's end cannot be scored
            hits = predicted[p + 1: p + 1 + depth] == tokens[p + 2: p + 2 + depth]
            accepted[p] = int(np.cumprod(hits).sum())
    return accepted


def walk_calls(accepted: np.ndarray, prompt_len: int, end: int) -> tuple[int, int]:
    """(calls, accepted drafts) of decoding tokens prompt_len .. end - 1: the prefill gives x_P, then each call
    whose last verified token is p commits accepted[p] drafts + one token of its own."""
    calls = total = 0
    root = prompt_len  # index of the newest token, not yet verified
    while root < end:
        a = int(accepted[root - 1])
        calls, total, root = calls + 1, total + a, root + a + 1
    return calls, total


def lossy_scores(decoder: Decoder, model: DmtdModel, tokens: np.ndarray, anchor: int,
                 taus: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Per-position (top1 hit, agreement with the base, NLL) of the base and of DMTD at each τ, rows >= anchor."""
    n = tokens.size
    tapped = tapped_states(decoder, tokens, model.tap)
    targets = torch.from_numpy(tokens[anchor + 1:]).to(tapped.device)
    base = base_logits(decoder, tapped, model.tap)[anchor:-1]
    base_top = base.argmax(-1)

    def score(logits: torch.Tensor) -> np.ndarray:
        nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        top = logits.argmax(-1)
        return torch.stack([(top == targets).float(), (top == base_top).float(), nll]).cpu().numpy()

    out = {"base": score(base)}
    for tau in taus:
        out[f"tau{tau}"] = score(dmtd_logits(decoder, model, tokens, tapped, draft_windows(n, tau, anchor))[anchor:-1])
    return out


def _summary(prefix: str, scores: list[dict[str, np.ndarray]]) -> dict[str, float]:
    result = {}
    for name in scores[0]:
        top1, agree, nll = np.concatenate([s[name] for s in scores], axis=1)
        result[f"{prefix}_{name}_top1"] = round(float(top1.mean()), 4)
        if name != "base":
            result[f"{prefix}_{name}_agree"] = round(float(agree.mean()), 4)
        result[f"{prefix}_{name}_ppl"] = round(float(np.exp(nll.mean())), 3)
    return result


@torch.no_grad()
def evaluate(decoder: Decoder, model: DmtdModel, heldout: HeldOut, held_text: np.ndarray,
             taus: tuple[int, ...] = (2, 3, 4), k: int = 3) -> dict[str, float]:
    """Every figure of the module docstring: spec on `heldout`, lossy on `held_text` and on `heldout`'s answers."""
    was_training = model.training
    model.eval()
    calls = total = 0
    depth_hits, depth_seen = np.zeros(k), np.zeros(k)
    answer_scores = []
    for prompt, answer in zip(heldout.prompts, heldout.answers, strict=True):
        if answer.size < 3:
            continue
        tokens = np.concatenate([prompt, answer]).astype(np.int64)
        p_len = prompt.size
        accepted = spec_accepted(decoder, model, tokens, p_len, k)
        c, a = walk_calls(accepted, p_len, min(tokens.size - 1, p_len + heldout.budget))
        calls, total = calls + c, total + a
        for j in range(k):  # draft j + 1 is scored only where the j before it were right
            seen = accepted[p_len - 1: tokens.size - 2 - j] >= j
            depth_seen[j] += seen.sum()
            depth_hits[j] += (accepted[p_len - 1: tokens.size - 2 - j][seen] > j).sum()
        answer_scores.append(lossy_scores(decoder, model, tokens, p_len - 1, taus))
    result = {"spec_tau": round(1 + total / max(calls, 1), 4)}
    result.update({f"spec_acc_d{j + 1}": round(float(depth_hits[j] / max(depth_seen[j], 1)), 4) for j in range(k)})
    result.update(_summary("held", [lossy_scores(decoder, model, np.asarray(held_text, np.int64), 16, taus)]))
    result.update(_summary("answers", answer_scores))
    model.train(was_training)
    return result
