"""`mtpedge serve` on the real SmolLM2 bundle: real text, a real stop string, two clients at once."""

from __future__ import annotations

import threading

import pytest

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from tests.server_helpers import LiveServer, streamed_text

pytestmark = pytest.mark.slow
STOPS = [".", ":"]
QUESTIONS = ["What is the capital of France?", "Name two colours of the rainbow."]


def test_two_clients_with_a_stop_string_get_the_greedy_answer_cut_at_the_stop(smollm2_float_bundle):
    # the float32 bundle: its greedy answers hold the stop strings (the fast bundle's answer to the first question
    # does not, so it would not exercise them)
    engine = Engine.load(smollm2_float_bundle)
    references = []
    for question in QUESTIONS:
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": question}])
        references.append(engine.tokenizer.decode(generate(engine, ids, 24, on_overflow="stop").token_ids))
    del engine
    live = LiveServer(smollm2_float_bundle)
    answers: dict[int, str] = {}
    try:
        def ask(i: int) -> None:
            body = {"messages": [{"role": "user", "content": QUESTIONS[i]}], "max_tokens": 24, "temperature": 0,
                    "stop": STOPS}
            if i == 0:
                answers[i] = streamed_text(live.stream("/v1/chat/completions", body), chat=True)
            else:
                answers[i] = live.post("/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(QUESTIONS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        live.close()
    for i, reference in enumerate(references):
        cuts = [reference.find(s) for s in STOPS if s in reference]
        assert cuts, reference  # else the test would not exercise the stop strings
        assert answers[i] == reference[: min(cuts)], (answers[i], reference)
