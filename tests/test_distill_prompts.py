"""The distillation prompts: enough of them, distinct, none from Spec-Bench, self-made questions parsed strictly."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.bench.questions import all_turns
from mtpedge.models import distill_prompts as catalogue
from mtpedge.models.distill_data import DistillSample
from mtpedge.models.distill_run import Conversation, DistillPlan, StageData, plan_stage


@pytest.fixture(scope="module")
def spec_filter():
    return catalogue.SpecBenchFilter(all_turns())


def test_the_default_plan_asks_enough_distinct_prompts():
    plan = DistillPlan()
    first = plan_stage("first", plan, {"questions": StageData()}, None)  # without the self-made questions
    texts = [c.messages[-1][1] for c in first]
    assert len(set(texts)) == len(texts) == 4442
    assert plan.expected_conversations >= 5000
    sampled = [c for c in first if c.temperature > 0]
    assert len(sampled) == round(0.25 * len(first)) and len({c.seed for c in sampled}) == len(sampled)


def test_plans_of_other_seeds_ask_mostly_other_prompts():
    # until the thirtieth session the seed only shuffled the same first prompts of each family: two runs at scale
    # 0.75 shared 2,842 of 3,332 first-stage prompts, and their questions stage was the same 338 greedy answers
    def prompts(seed: int, stage: str) -> set[str]:
        plan = DistillPlan(seed=seed).scaled(0.75)
        return {c.messages[-1][1] for c in plan_stage(stage, plan, {"questions": StageData()}, None)}

    for stage, most_shared in (("questions", 0.6), ("first", 0.3)):
        a, b = prompts(30, stage), prompts(31, stage)
        assert len(a & b) < most_shared * len(a), stage
        assert prompts(30, stage) == a  # the same seed: the same plan, which is what a resumed run relies on


def test_no_catalogue_prompt_comes_from_spec_bench(spec_filter):
    everything = (catalogue.topic_prompts(len(catalogue.TASKS) * len(catalogue.TOPICS))
                  + catalogue.question_writing_prompts(len(catalogue.QUESTION_WRITING) * len(catalogue.TOPICS))
                  + catalogue.code_prompts(len(catalogue.CODE_FORMS) * len(catalogue.CODE_TASKS))
                  + catalogue.role_prompts(len(catalogue.ROLE_SCENES) * len(catalogue.ROLES))
                  + catalogue.translation_prompts(len(catalogue.SENTENCES) * len(catalogue.LANGUAGES))
                  + catalogue.math_prompts(2000) + catalogue.puzzle_prompts(1000)
                  + list(catalogue.FOLLOW_UPS) + [t.format(text="") for t in catalogue.DOCUMENT_TASKS])
    assert not [p for p in everything if spec_filter.overlaps(p)]


def test_the_filter_catches_spec_bench_turns_and_long_shared_runs(spec_filter):
    turns = all_turns()
    assert all(spec_filter.overlaps(t) for t in turns[::25])
    assert spec_filter.overlaps(turns[0].upper() + "  ")  # case and spacing do not hide a repeat
    words = turns[0].split()
    assert spec_filter.overlaps("Please summarise: " + " ".join(words[:8]) + " and so on.")
    assert not spec_filter.overlaps("Explain photosynthesis to a curious twelve-year-old.")


def test_self_made_questions_are_parsed_strictly():
    answer = ("Here are five questions:\n1. What is a tide?\n2) **Why does the Moon pull on the sea?**\n"
              "3. Tides.\n4. Why?\n- How do tides change over a month, and why does that happen?\n"
              "5. What is {x} in code?\n6. What is a tide?\nNot numbered: is this kept?")
    assert catalogue.parse_questions(answer) == [
        "What is a tide?", "Why does the Moon pull on the sea?",
        "How do tides change over a month, and why does that happen?"]
    assert catalogue.parse_questions(answer, limit=1) == ["What is a tide?"]


def test_second_stage_turns_quote_the_models_own_answer():
    plan = DistillPlan(follow_ups=2, documents=2, min_answer_tokens=1)
    first = [Conversation(c.messages) for c in plan_stage("first", DistillPlan(), {"questions": StageData()}, None)[:6]]
    data = StageData(first, [f"answer number {i}" for i in range(6)],
                     [DistillSample(np.array([1]), np.array([5, 6])) for _ in first], [True] * 6)
    second = plan_stage("second", plan, {"first": data}, None)
    assert len(second) == 4
    multi = [c for c in second if len(c.messages) == 3]
    assert len(multi) == 2
    for conv in multi:
        index = [c.messages[-1][1] for c in data.conversations].index(conv.messages[0][1])
        assert conv.messages[1] == ("assistant", f"answer number {index}")
        assert conv.messages[2][1] in catalogue.FOLLOW_UPS
    assert all("answer number" in c.messages[0][1] for c in second if len(c.messages) == 1)
