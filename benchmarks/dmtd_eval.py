"""DMTD figures on one DMTD bundle: quality of the lossy `dmtd` vs the base model at each τ, speed of dmtd and
dmtd-spec vs plain decoding (interleaved, one process), τ of dmtd-spec, and dmtd-spec == none token for token.

    python benchmarks/dmtd_eval.py --bundle /tmp/dmtd-bundle --checkpoint /tmp/dmtd-run/d6/dmtd.pt \
        --out benchmarks/results/dmtd --spec-questions 52

Methods are named `none` (plain decoding), `dmtd:T` (lossy, cycle T: the drafter spec dmtd:tau=T) and
`dmtd-spec:K` (K draft tokens per step, dmtd-spec:draft_len=K; K = 0 is plain decoding with the drafter's
bookkeeping). Figures in benchmarks/results/dmtd were measured when DMTD ran on part graphs of its own.
Quality: (1) exact match on arithmetic questions written here (sums, differences, products; the last number
of the answer is compared: the model often answers "23 + 45 = 68"), (2) exact match on Spec-Bench
math_reasoning (GSM8K; scoring only, the number after "####" in the reference vs the last number of the answer),
(3) teacher-forced perplexity on the held-out text of export/quality.py (first 16 tokens as the prompt,
cyclic gate after it). Speed: Spec-Bench first turns, the first questions of every category, 128 new tokens,
methods in a rotated order per question.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from mtpedge.bench.questions import SPEC_BENCH as QUESTIONS
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def arithmetic_questions(count: int, seed: int = 7) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            a, b = (int(x) for x in rng.integers(10, 100, 2))
            out.append((f"What is {a} + {b}? Reply with only the number.", a + b))
        elif kind == 1:
            a, b = sorted((int(x) for x in rng.integers(10, 100, 2)), reverse=True)
            out.append((f"What is {a} - {b}? Reply with only the number.", a - b))
        else:
            a, b = int(rng.integers(2, 10)), int(rng.integers(2, 13))
            out.append((f"What is {a} times {b}? Reply with only the number.", a * b))
    return out


def numbers(text: str) -> list[float]:
    found = []
    for match in NUMBER.findall(text):
        try:
            found.append(float(match.replace(",", "")))
        except ValueError:
            pass
    return found


def spec_questions(per_category: int, category: str | None = None) -> list[dict]:
    by_category: dict[str, list[dict]] = defaultdict(list)
    for line in QUESTIONS.read_text().splitlines():
        if line.strip():
            q = json.loads(line)
            by_category[q["category"]].append(q)
    if category:
        return by_category[category][:per_category]
    return [q for c in sorted(by_category) for q in by_category[c][:per_category]]


class Runner:
    def __init__(self, bundle: Path, threads: int) -> None:
        self.engine = Engine.load(bundle, threads=threads)
        self.tok = self.engine.tokenizer

    def prompt(self, text: str) -> list[int]:
        return self.tok.encode_chat([{"role": "user", "content": text}])

    def run(self, method: str, prompt: list[int], max_new: int):
        name, _, value = method.partition(":")
        option = {"none": None, "dmtd": "tau", "dmtd-spec": "draft_len"}[name]
        drafter = make_drafter(name, self.engine, **({option: int(value)} if option else {}))
        return generate(self.engine, prompt, max_new, drafter=drafter)


def quality(runner: Runner, methods: list[str], items: list[tuple[str, float]], max_new: int, last: bool,
            say) -> dict:
    """Exact match (first or last number of the answer) per method, and token agreement with `none`."""
    correct, same = defaultdict(int), defaultdict(int)
    examples = []
    for i, (text, answer) in enumerate(items):
        prompt = runner.prompt(text)
        outs = {m: runner.run(m, prompt, max_new).token_ids for m in methods}
        for m, ids in outs.items():
            found = numbers(runner.tok.decode(ids))
            got = (found[-1] if last else found[0]) if found else None
            correct[m] += int(got is not None and abs(got - answer) < 1e-6)
            same[m] += int(ids == outs["none"])
        examples.append({"question": text, "answer": answer,
                         **{m: runner.tok.decode(ids) for m, ids in outs.items()}})
        say(f"  {i + 1}/{len(items)} " + " ".join(f"{m}={correct[m]}" for m in methods))
    n = len(items)
    return {"questions": n, "max_new_tokens": max_new, "scored_number": "last" if last else "first",
            "exact_match": {m: correct[m] / n for m in methods},
            "relative_to_base": {m: (correct[m] / correct["none"]) if correct["none"] else None for m in methods},
            "identical_to_base_output": {m: same[m] / n for m in methods}, "answers": examples}


def speed(runner: Runner, methods: list[str], extra: list[str], extra_questions: int, questions: list[dict],
          max_new: int, say) -> dict:
    rows = []
    for qi, q in enumerate(questions):
        prompt = runner.prompt(q["turns"][0])
        if len(prompt) + max_new + 16 > runner.engine.context:
            continue
        todo = methods + (extra if qi < extra_questions else [])
        order = todo[qi % len(todo):] + todo[: qi % len(todo)]
        outs = {m: runner.run(m, prompt, max_new) for m in order}
        base = outs["none"].token_ids
        for m, out in outs.items():
            s = out.stats
            first_diff = next((i for i, (a, b) in enumerate(zip(out.token_ids, base, strict=False)) if a != b),
                              None if len(out.token_ids) == len(base) else min(len(out.token_ids), len(base)))
            rows.append({"question_id": q["question_id"], "category": q["category"], "method": m,
                         "new_tokens": s.new_tokens, "tokens_per_s": s.tokens_per_second,
                         "decode_calls": s.decode_calls, "tokens_per_call": s.tokens_per_call,
                         "same_as_none": out.token_ids == base, "first_difference": first_diff})
        say(f"  {qi + 1}/{len(questions)} q{q['question_id']} " + " ".join(
            f"{m} {outs[m].stats.tokens_per_second:.1f}" for m in todo))
    summary = {}
    for m in methods + extra:
        mine = [r for r in rows if r["method"] == m]
        if not mine:
            continue
        ratios = []
        for r in mine:
            base = next(b for b in rows if b["question_id"] == r["question_id"] and b["method"] == "none")
            if base["tokens_per_s"] > 0 and r["tokens_per_s"] > 0:
                ratios.append(r["tokens_per_s"] / base["tokens_per_s"])
        summary[m] = {"questions": len(mine), "mean_tokens_per_s": statistics.mean(r["tokens_per_s"] for r in mine),
                      "speedup_vs_none": statistics.mean(ratios) if ratios else None,
                      "identical_to_none": sum(r["same_as_none"] for r in mine),
                      "tokens_compared": sum(r["new_tokens"] for r in mine),
                      "tokens_per_call": (sum(r["new_tokens"] for r in mine) - len(mine))
                      / max(1, sum(r["decode_calls"] for r in mine))}
    return {"max_new_tokens": max_new, "summary": summary, "rows": rows}


def perplexity(checkpoint: Path, taus: list[int]) -> dict:
    import torch

    from mtpedge.models.dmtd import perplexities
    from mtpedge.models.dmtd_train import held_text_ids, load_head
    from mtpedge.models.loading import load_model

    torch.set_num_threads(1)
    loaded = load_model(None)
    head, state = load_head(checkpoint, loaded)
    ids = held_text_ids(loaded)
    return {"tokens": int(len(ids)), "prompt_tokens": 16, "train_steps": int(state["step"]),
            "perplexity": perplexities(loaded.decoder, head.eval(), ids, tuple(taus), anchor=16)}


def in_domain(runner: Runner, checkpoint: Path, data: Path, count: int, taus: list[int], max_new: int,
              say) -> dict:
    """Held-out prompts of the training distribution (templates x topics the training file did not use): the
    base model's greedy answer, then teacher-forced over it: perplexity and top-1 agreement with the base model
    of DMTD at each τ (agreement = the fraction of answer positions where DMTD's argmax is the base's token)."""
    import torch

    from mtpedge.models.distill_data import TASKS, TOPICS, load_distill_prompts, prompt_set
    from mtpedge.models.dmtd import cyclic_gate, dmtd_logits, thinking_hidden
    from mtpedge.models.dmtd_train import load_head
    from mtpedge.models.loading import load_model

    torch.set_num_threads(1)
    used = set(load_distill_prompts(data))
    prompts = [p for p in prompt_set(len(TASKS) * len(TOPICS)) if p not in used][-count:]
    loaded = load_model(None)
    head, _ = load_head(checkpoint, loaded)
    head.eval()
    nll = defaultdict(float)
    agree = defaultdict(int)
    positions = 0
    for i, text in enumerate(prompts):
        prompt = runner.prompt(text)
        answer = generate(runner.engine, prompt, max_new).token_ids
        if len(answer) < 2:
            continue
        ids = np.asarray(prompt + answer, dtype=np.int64)
        anchor = len(prompt) - 1
        targets = torch.from_numpy(ids[anchor + 1:])
        with torch.no_grad():
            h = thinking_hidden(loaded.decoder, ids, head.split)
            for tau in taus:
                logits = dmtd_logits(loaded.decoder, head, ids, h, cyclic_gate(len(ids), tau, anchor))[anchor:-1]
                nll[tau] += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
                agree[tau] += int((logits.argmax(-1) == targets).sum())
        positions += len(targets)
        say(f"  {i + 1}/{len(prompts)} " + " ".join(f"τ{t} {agree[t] / positions:.1%}" for t in taus))
    return {"prompts": len(prompts), "answer_tokens": positions, "max_new_tokens": max_new,
            "perplexity_of_base_answer": {f"tau{t}": float(np.exp(nll[t] / positions)) for t in taus},
            "top1_agreement_with_base": {f"tau{t}": agree[t] / positions for t in taus}}


def markdown(doc: dict) -> str:
    """A short table view of the JSON document."""
    lines = ["# DMTD on SmolLM2-135M (measured by benchmarks/dmtd_eval.py)", ""]
    if "bundle" in doc:
        lines += [f"Bundle: `{doc['bundle']['path']}`, DMTD settings {json.dumps(doc['bundle']['dmtd'])}", ""]
    if "perplexity" in doc:
        p = doc["perplexity"]
        lines += [f"## Perplexity, held-out text ({p['tokens']} tokens, first {p['prompt_tokens']} as prompt)", "",
                  "| model | perplexity |", "|---|---|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in p["perplexity"].items()] + [""]
    for key, title in (("arithmetic", "Arithmetic exact match"), ("math_reasoning", "Spec-Bench math_reasoning")):
        if key in doc:
            q = doc[key]
            lines += [f"## {title} ({q['questions']} questions, {q['max_new_tokens']} new tokens, greedy)", "",
                      "| method | exact match | relative to base | output identical to base |", "|---|---|---|---|"]
            for m, v in q["exact_match"].items():
                rel = q["relative_to_base"][m]
                lines.append(f"| {m} | {v:.1%} | {'-' if rel is None else f'{rel:.1%}'} | "
                             f"{q['identical_to_base_output'][m]:.1%} |")
            lines.append("")
    if "in_domain" in doc:
        d = doc["in_domain"]
        lines += [f"## In-domain held-out prompts ({d['prompts']} prompts, {d['answer_tokens']} answer tokens of the "
                  "base model, teacher-forced)", "",
                  "| τ | top-1 agreement with base | perplexity of the base's answer |", "|---|---|---|"]
        for key, value in d["top1_agreement_with_base"].items():
            lines.append(f"| {key[3:]} | {value:.1%} | {d['perplexity_of_base_answer'][key]:.2f} |")
        lines.append("")
    if "spec_bench" in doc:
        sb = doc["spec_bench"]
        lines += [f"## Spec-Bench first turns, {sb['max_new_tokens']} new tokens, interleaved, 1 thread", "",
                  "| method | questions | tokens/s | speed vs none | tokens per verify call | identical to none |",
                  "|---|---|---|---|---|---|"]
        for m, v in sb["summary"].items():
            tpc = f"{v['tokens_per_call']:.2f}" if m.startswith("dmtd-spec") else "-"
            speedup = "-" if v["speedup_vs_none"] is None else f"{v['speedup_vs_none']:.2f}x"
            lines.append(f"| {m} | {v['questions']} | {v['mean_tokens_per_s']:.1f} | {speedup} | {tpc} | "
                         f"{v['identical_to_none']}/{v['questions']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, help="for the perplexity (torch); omitted: no perplexity")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--taus", default="2,3,4")
    parser.add_argument("--arith", type=int, default=45, help="arithmetic questions")
    parser.add_argument("--gsm", type=int, default=0, help="Spec-Bench math_reasoning questions (128 tokens)")
    parser.add_argument("--spec-per-category", type=int, default=4, help="Spec-Bench questions per category")
    parser.add_argument("--draft-len", type=int, default=3)
    parser.add_argument("--extra-questions", type=int, default=13,
                        help="questions on which the other τ and plain-through-parts also run")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--in-domain", type=int, default=0, help="held-out prompts of the training distribution")
    parser.add_argument("--data", type=Path,
                        help="the training data file (its prompts are excluded from --in-domain; needed with it)")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: ppl,arith,gsm,speed")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    taus = [int(t) for t in args.taus.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    doc_path = args.out / "dmtd_eval.json"
    doc = json.loads(doc_path.read_text()) if doc_path.is_file() else {}

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def save() -> None:
        doc_path.write_text(json.dumps(doc, indent=1))

    started = time.perf_counter()
    if args.checkpoint and "ppl" not in skip:
        say("perplexity on the held-out text")
        doc["perplexity"] = perplexity(args.checkpoint, taus)
        say(json.dumps(doc["perplexity"]))
        save()
    if "arith" in skip and "gsm" in skip and "speed" in skip and not args.in_domain:
        (args.out / "dmtd_eval.md").write_text(markdown(doc))
        return 0
    runner = Runner(args.bundle, args.threads)
    doc["bundle"] = {"path": str(args.bundle), "dmtd": {k: v for k, v in runner.engine.manifest.extras["dmtd"].items()
                                                         if k != "parts"}}
    if args.in_domain and args.checkpoint:
        say("in-domain held-out prompts")
        doc["in_domain"] = in_domain(runner, args.checkpoint, args.data, args.in_domain, taus, 96, say)
        save()
    quality_methods = ["none"] + [f"dmtd:{t}" for t in taus]
    if "arith" not in skip and args.arith:
        say("arithmetic exact match")
        doc["arithmetic"] = quality(runner, quality_methods, arithmetic_questions(args.arith), 24, True, say)
        save()
    if "gsm" not in skip and args.gsm:
        say("Spec-Bench math_reasoning exact match")
        items = [(q["turns"][0], numbers(q["reference"][0].split("####")[-1])[0])
                 for q in spec_questions(args.gsm, "math_reasoning")]
        doc["math_reasoning"] = quality(runner, quality_methods, items, 128, True, say)
        save()
    if "speed" not in skip:
        say("Spec-Bench speed and losslessness")
        main_methods = ["none", f"dmtd-spec:{args.draft_len}", f"dmtd:{max(taus)}"]
        extra = [f"dmtd:{t}" for t in taus if t != max(taus)] + ["dmtd-spec:0", "dmtd-spec:1"]
        doc["spec_bench"] = speed(runner, main_methods, extra, args.extra_questions,
                                  spec_questions(args.spec_per_category), args.max_new_tokens, say)
        save()
    doc["elapsed_s"] = time.perf_counter() - started
    save()
    (args.out / "dmtd_eval.md").write_text(markdown(doc))
    print(json.dumps({k: v for k, v in doc.items() if k != "spec_bench"} | {
        "spec_bench_summary": doc.get("spec_bench", {}).get("summary")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
