"""Sampled answers of the real SmolLM2 stay on topic: a request that names no sampling settings gets the defaults
(temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), through the real `openai` client, seeded.

An answer is on topic when it names the answer (the greedy answers all do). The same questions and seeds at
what such a request got before (temperature 1.0, no truncation: "lessovernbinding", "Mikasa, Japan's capital")
are the contrast. On the default (quantized) bundle, 24 seeds: 56 of 120 with the defaults, 32 of 120 before
(benchmarks/results/sampling/on-topic-fast-5q24s.log). Eight seeds were too few: 17 vs 9 of 40 (drawn alike
in CI and here) failed a bound of 45% set on the float bundle's 24 of 40. The gap bound, 10 of 120, sits about
two standard errors below the measured gap of 24.
"""

from __future__ import annotations

import pytest

from tests.server_helpers import LiveServer

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")

QUESTIONS = [("Name the capital of Japan in one word.", ["tokyo"]),
             ("What is the capital of France?", ["paris"]),
             ("What color is the sky on a clear day?", ["blue"]),
             ("Which planet is known as the Red Planet?", ["mars"]),
             ("What is 2 + 2?", ["4", "four"])]
SEEDS = range(24)


def on_topic(client, model: str, **sampling) -> int:
    count = 0
    for question, words in QUESTIONS:
        for seed in SEEDS:
            reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                                   max_tokens=32, seed=seed, **sampling)
            count += any(word in reply.choices[0].message.content.lower() for word in words)
    return count


def test_sampled_answers_to_simple_questions_stay_on_topic(smollm2_bundle):
    live = LiveServer(smollm2_bundle)
    try:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
        model = live.engine.manifest.model_name
        with_defaults = on_topic(client, model)  # no temperature, no truncation named
        before = on_topic(client, model, temperature=1.0, extra_body={"top_k": 0, "top_p": 1.0, "min_p": 0.0})
        total = len(QUESTIONS) * len(SEEDS)
        assert with_defaults >= total * 0.35 and with_defaults - before >= total * 0.08, (with_defaults, before)
    finally:
        live.close()
