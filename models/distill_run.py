"""The self-distillation run: staged prompt plans, answered in batches, written as resumable shards.

Stages (each needs the previous one's data, so they run in this order):
    questions  "write five questions about {topic}": the answers are data, and their parsed questions become
               prompts of the next stage (the prompts the model writes itself);
    first      the catalogue (`distill_prompts`) plus those self-made questions, shuffled; a seeded share is
               answered by sampling (temperature `temperature`), the rest greedily;
    second     on the first stage's finished greedy answers: a follow-up turn about the answer (multi-turn),
               or a task with the answer as its document (summarise, extract, answer from it).

The plan's seed picks which catalogue prompts both stages ask (the catalogue holds ~2.5x the default plan's), so
runs of other seeds answer mostly other prompts; until the thirtieth session it only shuffled the same first ones.

Output folder: `run.json` (the plan and generation settings; a resumed run must match it) and shards
`{stage}-{index:04d}.npz` of `shard_size` conversations each, written atomically. A shard is a fixed slice
of its stage's plan and is generated from scratch in one batch session, so a resumed run writes exactly the
shards an uninterrupted one would. `load_distill_data(folder)` reads them all.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import distill_prompts as catalogue
from .distill_batch import Answer, BatchedGenerator, GenerationConfig, Request
from .distill_data import DistillSample, load_distill_data, save_distill_data

log = logging.getLogger(__name__)

STAGES = ("questions", "first", "second")
RUN_FILE = "run.json"


@dataclass(frozen=True)
class DistillPlan:
    """How many prompts of each kind (the defaults: ~6,900 prompts, ~1.2 M response tokens on SmolLM2)."""

    question_prompts: int = 450  # stage questions: topics x question styles
    topic_prompts: int = 3300  # stage first: task templates x topics
    math: int = 450
    puzzles: int = 250
    code: int = 160
    translations: int = 150
    roles: int = 132
    self_made: int = 1400  # at most this many of the parsed self-made questions
    follow_ups: int = 650  # stage second
    documents: int = 550
    sampled_share: float = 0.25  # of stage first
    temperature: float = 0.8
    min_answer_tokens: int = 40  # a second-stage turn needs a first answer at least this long
    seed: int = 0

    @property
    def expected_conversations(self) -> int:
        """About how many conversations the plan makes (self-made questions and filters vary it a little)."""
        return (self.question_prompts + self.topic_prompts + self.math + self.puzzles + self.code
                + self.translations + self.roles + self.self_made + self.follow_ups + self.documents)

    def scaled(self, factor: float) -> DistillPlan:
        """The same mix with every count multiplied by `factor` (at least one each), for smoke runs."""
        counts = {k: max(1, round(v * factor)) for k, v in asdict(self).items()
                  if isinstance(v, int) and k not in ("min_answer_tokens", "seed")}
        return DistillPlan(**{**asdict(self), **counts})


@dataclass(frozen=True)
class Conversation:
    messages: tuple[tuple[str, str], ...]  # (role, content), ending with the user turn to answer
    temperature: float = 0.0
    seed: int = 0

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

    def key(self) -> str:
        return json.dumps(self.as_messages(), ensure_ascii=False)


@dataclass
class StageData:
    """What a stage produced, as the next stage's planner needs it."""

    conversations: list[Conversation] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # decoded answer texts
    samples: list[DistillSample] = field(default_factory=list)
    stopped: list[bool] = field(default_factory=list)


def _user(text: str, temperature: float = 0.0, seed: int = 0) -> Conversation:
    return Conversation((("user", text),), temperature, seed)


def _keep(prompts, spec_filter) -> list:
    return [p for p in prompts if spec_filter is None or not spec_filter.overlaps(p)]


def plan_stage(stage: str, plan: DistillPlan, earlier: dict[str, StageData],
               spec_filter: catalogue.SpecBenchFilter | None) -> list[Conversation]:
    """The conversations of `stage`: a pure function of the plan and the earlier stages' data."""
    rng = np.random.default_rng([plan.seed, STAGES.index(stage)])
    if stage == "questions":
        prompts = catalogue.question_writing_prompts(plan.question_prompts, plan.seed)
        return [_user(p) for p in _keep(prompts, spec_filter)]
    if stage == "first":
        made: list[str] = []
        for answer in earlier["questions"].answers:
            made += [q for q in catalogue.parse_questions(answer) if q not in made]
        made = made[: plan.self_made]
        seed = plan.seed  # picks the prompts of every family, not only their order
        prompts = (catalogue.topic_prompts(plan.topic_prompts, seed) + catalogue.math_prompts(plan.math, seed)
                   + catalogue.puzzle_prompts(plan.puzzles, seed) + catalogue.code_prompts(plan.code, seed)
                   + catalogue.translation_prompts(plan.translations, seed) + catalogue.role_prompts(plan.roles, seed)
                   + made)
        prompts = list(dict.fromkeys(_keep(prompts, spec_filter)))  # distinct, first occurrence kept
        order = rng.permutation(len(prompts))
        sampled = set(rng.choice(len(prompts), size=round(plan.sampled_share * len(prompts)), replace=False).tolist())
        seeds = rng.integers(2**31, size=len(prompts))
        return [_user(prompts[i], plan.temperature if i in sampled else 0.0, int(seeds[i]) if i in sampled else 0)
                for i in order]
    if stage == "second":
        first = earlier["first"]
        usable = [i for i, conv in enumerate(first.conversations)
                  if conv.temperature == 0 and first.stopped[i]
                  and len(first.samples[i].response_ids) >= plan.min_answer_tokens]
        picked = rng.permutation(usable)[: plan.follow_ups + plan.documents].tolist()
        out = []
        for n, i in enumerate(picked):
            question, answer = first.conversations[i].messages[-1][1], first.answers[i].strip()
            if n < plan.follow_ups:
                follow = catalogue.FOLLOW_UPS[int(rng.integers(len(catalogue.FOLLOW_UPS)))]
                conv = Conversation((("user", question), ("assistant", answer), ("user", follow)))
            else:
                task = catalogue.DOCUMENT_TASKS[int(rng.integers(len(catalogue.DOCUMENT_TASKS)))]
                conv = _user(task.format(text=answer))
            if spec_filter is None or not any(spec_filter.overlaps(c) for r, c in conv.messages if r == "user"):
                out.append(conv)
        return out
    raise ValueError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)})")


def shard_path(folder: Path, stage: str, index: int) -> Path:
    return folder / f"{stage}-{index:04d}.npz"


def write_shard(path: Path, conversations: list[Conversation], prompt_ids: list[list[int]],
                answers: list[Answer]) -> None:
    samples = [DistillSample(np.asarray(p, dtype=np.int64), a.response_ids, a.topk_ids, a.topk_probs)
               for p, a in zip(prompt_ids, answers, strict=True)]
    extra = {
        "conversations": np.array([c.key() for c in conversations], dtype=str),
        "temperatures": np.array([c.temperature for c in conversations], dtype=np.float32),
        "seeds": np.array([c.seed for c in conversations], dtype=np.int64),
        "stopped": np.array([a.stopped for a in answers], dtype=bool),
    }
    save_distill_data(samples, path, [c.messages[-1][1] for c in conversations], extra)


def read_shard_meta(path: Path) -> tuple[list[str], list[bool]]:
    with np.load(path) as data:
        return [str(c) for c in data["conversations"]], [bool(s) for s in data["stopped"]]


class DistillRun:
    """Drives the stages over a folder; `run()` generates every missing shard, in order."""

    def __init__(self, folder: str | Path, plan: DistillPlan, generation: GenerationConfig, shard_size: int,
                 model, spec_filter: catalogue.SpecBenchFilter | None, device: str = "cpu",
                 progress: Callable[[str], None] | None = None) -> None:
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.folder, self.plan, self.generation, self.shard_size = Path(folder), plan, generation, shard_size
        self.model, self.spec_filter = model, spec_filter
        self.say = progress or log.info
        self.generator = BatchedGenerator(model.decoder, model.stop_token_ids, generation, device)
        self.progress = Progress(plan.expected_conversations, self.say)
        self.settings = {"plan": asdict(plan), "generation": asdict(generation), "shard_size": shard_size,
                         "model": model.name, "model_sha256": model.source_sha256,
                         "spec_bench_filter": spec_filter is not None}

    def _check_settings(self) -> None:
        path = self.folder / RUN_FILE
        if path.is_file():
            stored = json.loads(path.read_text())
            if stored != self.settings:
                differing = sorted(k for k in set(stored) | set(self.settings) if stored.get(k) != self.settings.get(k))
                raise ValueError(f"{self.folder} holds a run with other settings ({', '.join(differing)} differ): "
                                 "resume it with the same options, or choose another --out")
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.settings, indent=1))

    def encode(self, conv: Conversation) -> list[int]:
        return list(self.model.tokenizer.apply_chat_template(conv.as_messages(), add_generation_prompt=True,
                                                             tokenize=True, return_dict=False))

    def run(self, stop_after_shards: int | None = None, time_limit: float = 0.0) -> int:
        """Generate every missing shard; returns how many shards this call wrote, and sets `complete` when none is
        left. stop_after_shards ends the call early (as an interruption would); so does time_limit > 0, before
        the first shard it would start past that many seconds (the folder resumes where it stopped)."""
        started = time.perf_counter()
        self.complete = False
        self._check_settings()
        earlier: dict[str, StageData] = {}
        written = 0
        for stage in STAGES:
            conversations = plan_stage(stage, self.plan, earlier, self.spec_filter)
            shards = [conversations[i:i + self.shard_size] for i in range(0, len(conversations), self.shard_size)]
            self.say(f"stage {stage}: {len(conversations)} conversations in {len(shards)} shards")
            data = StageData()
            for index, shard in enumerate(shards):
                path = shard_path(self.folder, stage, index)
                if path.is_file():
                    keys, _ = read_shard_meta(path)
                    if keys != [c.key() for c in shard]:
                        raise ValueError(f"{path} was made from other prompts than this plan's: remove the folder's "
                                         "shards from that one on, or choose another --out")
                elif stop_after_shards is not None and written >= stop_after_shards:
                    return written
                elif time_limit and time.perf_counter() - started >= time_limit:
                    self.say(f"time limit of {time_limit:.0f} s reached before {path.name}: the same command goes on")
                    return written
                else:
                    self._generate_shard(path, shard, f"{stage} shard {index + 1}/{len(shards)}")
                    written += 1
                samples = load_distill_data(path)
                data.conversations += shard
                data.samples += samples
                data.stopped += read_shard_meta(path)[1]
                data.answers += [self.model.tokenizer.decode(s.response_ids.tolist(), skip_special_tokens=True)
                                 for s in samples]
                self.progress.add_existing(path.name, samples)
            earlier[stage] = data
        self.complete = True
        return written

    def _generate_shard(self, path: Path, shard: list[Conversation], label: str) -> None:
        prompt_ids = [self.encode(c) for c in shard]
        requests = [Request(ids, c.temperature, c.seed) for ids, c in zip(prompt_ids, shard, strict=True)]
        answers = self.generator.generate(requests, lambda _, answer: self.progress.answered(label, answer))
        write_shard(path, shard, prompt_ids, answers)
        self.progress.shard_written(path.name, answers)


class Progress:
    """Answers and tokens so far, this process's tokens/s, and an ETA for the plan's expected total."""

    def __init__(self, expected: int, say: Callable[[str], None], every_s: float = 60.0) -> None:
        self.expected, self.say, self.every_s = expected, say, every_s
        self.seen: set[str] = set()
        self.answers = self.tokens = 0  # in the folder, counting this process's new ones
        self.new_tokens = 0  # generated by this process
        self.pending = self.pending_tokens = 0  # answers and tokens of the shard being generated
        self.started = self.last = time.perf_counter()

    def add_existing(self, name: str, samples: list[DistillSample]) -> None:
        if name not in self.seen:
            self.seen.add(name)
            self.answers += len(samples)
            self.tokens += sum(len(s.response_ids) for s in samples)

    def answered(self, label: str, answer: Answer) -> None:
        self.pending += 1
        self.pending_tokens += len(answer.response_ids)
        self.new_tokens += len(answer.response_ids)
        now = time.perf_counter()
        if now - self.last >= self.every_s:
            self.last = now
            self.say(self.line(label))

    def shard_written(self, name: str, answers: list[Answer]) -> None:
        self.seen.add(name)
        self.answers += len(answers)
        self.tokens += sum(len(a.response_ids) for a in answers)
        self.pending = self.pending_tokens = 0
        self.say(self.line(f"wrote {name}"))

    def line(self, label: str) -> str:
        elapsed = time.perf_counter() - self.started
        rate = self.new_tokens / max(elapsed, 1e-9)
        answers, tokens = self.answers + self.pending, self.tokens + self.pending_tokens
        per_answer = tokens / answers if answers else 0.0
        left = max(0, self.expected - answers) * per_answer
        eta = f"{left / rate / 3600:.1f} h" if rate > 0 else "?"
        return (f"{label}: {answers}/~{self.expected} answers, {tokens:,} response tokens, "
                f"{rate:.1f} tok/s this run, ETA {eta}")
