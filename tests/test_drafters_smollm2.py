"""Lossless on the real model: every drafter's greedy output == plain decoding on Spec-Bench questions.

The large run (>= 50 questions x 128 tokens, τ and speed) is `mtpedge bench` (README); this CI test keeps
to a couple of minutes: one question from each of four categories (copy-friendly and not), 40 new tokens.
"""

from __future__ import annotations

import pytest

from mtpedge.bench.questions import SPEC_BENCH, load_questions
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import accepted_drafts, generate
from mtpedge.runtime.row_probe import probe_rows

CATEGORIES = ("coding", "math_reasoning", "summarization", "qa")


def one_question_per_category() -> list[str]:
    return [q.turns[0] for q in load_questions(SPEC_BENCH, CATEGORIES, limit=1)]


@pytest.mark.slow
@pytest.mark.parametrize("bundle", ["smollm2_float_bundle", "smollm2_bundle"])
def test_drafters_are_lossless_on_smollm2(bundle, request):
    """On the float32 graphs and on the fast bundle (int8 activations): the verifier reads only a block's leading
    chain, computed bit for bit as plain decoding computes it (runtime/contract.py), so every drafter's tokens are
    plain decoding's, whatever the arithmetic's rounding, where this CPU's kernels compute a chain's rows alike at
    every width (the row probe: the fast bundle on AVX-512 VNNI, not on AVX2, where its default decodes plainly)."""
    engine = Engine.load(request.getfixturevalue(bundle))
    probe = probe_rows(engine)
    if bundle == "smollm2_bundle" and not probe.invariant:
        pytest.skip(f"{probe.describe()}; the default drafter decodes plainly here (tests/test_row_probe.py)")
    assert probe.invariant
    drafters = {
        "esp-mean": make_drafter("esp", engine, mask_init="mean"),
        "esp-soft-dynamic": make_drafter("esp", engine, mask_init="soft", tree="dynamic"),
        "lookup": make_drafter("lookup", engine),  # with the shipped static n-gram table (static=auto)
        "lookup-no-table": make_drafter("lookup:static=none", engine),
        "hybrid": make_drafter("hybrid", engine),
    }
    accepted = {name: 0 for name in drafters}
    calls = {name: 0 for name in drafters}
    for question in one_question_per_category():
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": question}])
        plain = generate(engine, prompt, 40)
        for name, drafter in drafters.items():
            out = generate(engine, prompt, 40, drafter=drafter)
            assert out.token_ids == plain.token_ids, name
            accepted[name] += accepted_drafts(out.stats.accepted_histogram)
            calls[name] += out.stats.decode_calls
    tau = {name: 1 + accepted[name] / calls[name] for name in drafters}
    assert drafters["lookup"].settings["static"] == "auto", "the default model's table is shipped"
    assert tau["lookup-no-table"] > 1.2 and tau["hybrid"] > tau["lookup-no-table"] and tau["esp-mean"] > 1.05, tau
    assert tau["lookup"] > tau["lookup-no-table"], tau
