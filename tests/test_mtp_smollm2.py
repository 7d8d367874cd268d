"""The trained SmolLM2 adapter (slow): lossless on Spec-Bench questions and better than one token per call.

Needs a bundle exported with a trained adapter (README, "Trained multi-token adapter"):
    MTPEDGE_MTP_BUNDLE=/path/to/bundle pytest -m slow tests/test_mtp_smollm2.py
Skipped when the variable is unset: the adapter is not shipped (it is made by `mtpedge train-mtp`).
"""

from __future__ import annotations

import os

import pytest

from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from tests.spec_bench import questions

BUNDLE = os.environ.get("MTPEDGE_MTP_BUNDLE")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BUNDLE, reason="set MTPEDGE_MTP_BUNDLE to a bundle exported with --mtp-adapter")]


# plain decoding is 1.0; the trained adapter measured 1.2-2.0 per question (benchmarks/results/mtp)
@pytest.mark.parametrize("layout,min_tau", [("linear", 1.15), ("quadratic", 1.25)])
def test_trained_mtp_is_lossless_and_drafts_well(layout, min_tau):
    engine = Engine.load(BUNDLE, threads=1)
    calls = accepted = 0
    for q in questions(per_category=1)[:4]:
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": q["turns"][0]}])
        plain = generate(engine, prompt, max_new_tokens=48)
        result = generate(engine, prompt, max_new_tokens=48, drafter=make_drafter("mtp", engine, mtp_layout=layout))
        assert result.token_ids == plain.token_ids, q["question_id"]
        calls += result.stats.decode_calls
        accepted += sum(k * v for k, v in result.stats.accepted_histogram.items())
    assert 1 + accepted / calls > min_tau
