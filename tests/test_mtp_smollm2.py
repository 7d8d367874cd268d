"""The trained SmolLM2 adapter (slow): lossless on Spec-Bench questions and better than one token per call.

Runs on the adapter shipped for the default model (exported once into the cache's `-mtp-<fast label>` bundle, as
`mtpedge generate --drafter mtp` does), or on the bundle named by MTPEDGE_MTP_BUNDLE (README, "Trained
multi-token adapter"); skipped only when neither exists.
"""

from __future__ import annotations

import os

import pytest

from mtpedge.export.shipped import DEFAULT_ADAPTER
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import accepted_drafts, generate
from tests.spec_bench import short_questions

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not os.environ.get("MTPEDGE_MTP_BUNDLE") and not DEFAULT_ADAPTER.is_file(),
    reason="no shipped adapter: set MTPEDGE_MTP_BUNDLE to a bundle exported with --mtp-adapter")]


@pytest.fixture(scope="module")
def engine() -> Engine:
    from mtpedge.bundles import ensure_bundle

    return Engine.load(ensure_bundle(os.environ.get("MTPEDGE_MTP_BUNDLE"), None, 1024, mtp=True), threads=1)


@pytest.fixture(scope="module")
def prompts_and_plain_outputs(engine) -> list[tuple[str, list[int], list[int]]]:
    out = []
    for q in short_questions(per_category=1)[:4]:
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": q.turns[0]}])
        out.append((q.question_id, prompt, generate(engine, prompt, max_new_tokens=48).token_ids))
    return out


# plain decoding is 1.0; the shipped adapter measured 1.24 / 1.38 / 1.44 / 1.42 here (4 questions x 48 tokens)
@pytest.mark.parametrize("options,min_tau", [({"mtp_layout": "linear"}, 1.1), ({"mtp_layout": "quadratic"}, 1.25),
                                             ({"mtp_layout": "tree"}, 1.3),
                                             ({"mtp_layout": "tree", "lookup": True}, 1.3)])
def test_trained_mtp_is_lossless_and_drafts_well(engine, prompts_and_plain_outputs, options, min_tau):
    calls = accepted = 0
    for question_id, prompt, plain in prompts_and_plain_outputs:
        result = generate(engine, prompt, max_new_tokens=48, drafter=make_drafter("mtp", engine, **options))
        assert result.token_ids == plain, question_id
        calls += result.stats.decode_calls
        accepted += accepted_drafts(result.stats.accepted_histogram)
    assert 1 + accepted / calls > min_tau
