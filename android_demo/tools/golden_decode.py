"""Record short decodes of the real SmolLM2 bundle (plain greedy and each drafter) for the Java replay test.

Per graph call: the chosen width, n_past, positions, cache slots, the attention bias (as zero runs per row), a
fingerprint of each input embedding row, the LoRA gate (adapter bundles), and the outputs as top-k logits + each
row's log-sum-exp (the full rows are 49152 floats), the mask slots' hidden states (the mtp drafter's recordings,
base64 float32) and the call's seconds (a cost-aware drafter's recordings, see below). Per decode step: the
drafter's tree (and whether the drafter observed the step), and the slots each commit gathered. Plus the prompt's
and the committed tokens' embedding rows (base64 float32), so that mask embeddings can be recomputed in Java, and
the bundle's adapter files (learned masks, sampler head) as they are.

Recordings of a drafter that sizes its trees run it over a cost table written into the recording, with a clock
that ticks CLOCK_STEP seconds per reading and graph calls that report the table's seconds for their width (a
simulated device), so that the Java replay feeds its sizer the same times and the files stay reproducible.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import shutil
import tempfile
from pathlib import Path

import mtpedge.runtime.generate as generate_module
import numpy as np
from golden_common import RopePositions, f32, output, write, zero_runs
from mtpedge.runtime.cost_table import CostTable
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.tree import SLOT

log = logging.getLogger("make_golden")
TOP_K = 16
# long enough (> 64 tokens with the chat template) that prefill takes two chunks of the 64-wide graph
PROMPT = ("Here is a list of the planets of the solar system, from the Sun outwards: Mercury, Venus, Earth, Mars, "
          "Jupiter, Saturn, Uranus, Neptune. Write the same list again, separated by commas, and then say which "
          "planet is the largest.")
RECORDINGS = [("plain", None, {}, 24)]
# a random tiny model (seeded) in a 64-position context: its greedy text repeats, so lookup and hybrid trees are
# accepted deep, and the runs end at the context limit (on_overflow="stop"), where a block reaches past the end of
# the context and the accepted path is cut to the free positions
TINY_PROMPT = "Questions? Answers! Lists: one, two, three."
TINY_RECORDINGS = [("tiny_plain", None, {}, 200), ("tiny_lookup", "lookup", {}, 200),
                   ("tiny_hybrid", "hybrid", {"masks": 2}, 200), ("tiny_esp", "esp", {"masks": 1}, 200)]
# cost-aware trees on the tiny model: a CPU-like table (a wide call costs several narrow ones), so that the trees
# shrink to what their candidates pay for
CLOCK_STEP = 0.01
TINY_SIZED_RECORDINGS = [("tiny_lookup_sized", "lookup", {}, 200, {1: 0.010, 8: 0.012, 16: 0.030}),
                         ("tiny_hybrid_sized", "hybrid", {"masks": 2}, 200, {1: 0.002, 8: 0.004, 16: 0.012})]
# the tiny model with a random multi-token adapter (k = 3 learned masks, gated LoRA of rank 4, a sampler head; every
# part away from its initial value, as tests/test_mtp_decode.py makes it): the mtp drafter's layouts, and ESP / the
# hybrid with the adapter's learned masks (their default on such a bundle) and its gate on at the mask slots.
# candidates 8 / 0: the sampler head's shortlist stays inside the recorded top-16 logits of a row (0 = no shortlist);
# mask_gain 0 gives few mask owners, so that accepted paths end below them (the next drafts skip the used masks)
TINY_MTP_RECORDINGS = [("tiny_mtp_tree", "mtp", {"candidates": 8, "lookup": False}, 200),
                       ("tiny_mtp_tree_lookup", "mtp", {"lookup": True, "sampler": False, "mask_gain": 0.0}, 200),
                       ("tiny_mtp_quadratic", "mtp", {"mtp_layout": "quadratic", "candidates": 0}, 200),
                       ("tiny_mtp_linear", "mtp", {"mtp_layout": "linear", "masks": 2, "candidates": 8}, 200),
                       ("tiny_mtp_hybrid", "hybrid", {}, 200)]
# the paper's two-block sampler head (models/mtp_adapter.PaperSamplerHead), scored over the whole vocabulary
TINY_MTP_PAPER_RECORDINGS = [("tiny_mtp_paper_tree", "mtp", {"candidates": 0, "lookup": False}, 200)]


def drafter_recordings() -> list:
    """(name, drafter registry name, options, new tokens) for every drafter this runtime has."""
    from mtpedge.runtime.drafters import DRAFTERS
    # the default bundle carries learned masks (k = 1), the default of ESP and the hybrid ("_learned"); the others
    # name the vocab mean, the init of a bundle without them
    wanted = [("esp_static", "esp", {"masks": 1, "tree": "static", "mask_init": "mean"}),
              ("esp_dynamic", "esp", {"masks": 2, "tree": "dynamic", "mask_init": "mean"}),
              ("lookup", "lookup", {}), ("hybrid", "hybrid", {"mask_init": "mean"}),
              ("hybrid_learned", "hybrid", {}), ("esp_learned", "esp", {})]
    return [(name, key, options, 40) for name, key, options in wanted if key in DRAFTERS]


def top_rows(logits: np.ndarray) -> dict:
    rows = np.asarray(logits, dtype=np.float32)
    ids = np.argsort(-rows, axis=1, kind="stable")[:, :TOP_K]
    top = np.take_along_axis(rows, ids, axis=1)
    high = rows.astype(np.float64).max(axis=1, keepdims=True)
    lse = (high[:, 0] + np.log(np.exp(rows.astype(np.float64) - high).sum(axis=1)))
    return {"ids": ids.tolist(), "values": [f32(r) for r in top], "lse": lse.tolist()}


@contextlib.contextmanager
def recording(engine: Engine, drafter):
    """Spy on graph calls, commits, trees and verification while `generate` runs."""
    calls, commits, trees = [], [], []
    positions_of = RopePositions(engine.inv_freq, engine.context + engine.graphs.max_width)
    original_run = engine.graphs.run
    original_commit = engine.cache.commit_accepted_kv
    original_verify = generate_module.verify_tree

    sizer = getattr(drafter, "sizer", None)

    def run(entry, feeds, n_real):
        out = original_run(entry, feeds, n_real)
        embeds = feeds["inputs_embeds"][0, :n_real].astype(np.float64)
        call = {"width": entry.width, "n_real": n_real, "n_past": engine.cache.n_past,
                "positions": positions_of(feeds), "cache_slots": feeds["cache_slots"][0].tolist(),
                "bias_zero_runs": [zero_runs(r) for r in feeds["attention_bias"][0, 0]],
                "embed_sums": embeds.sum(axis=1).tolist(), "embed_sumsq": (embeds ** 2).sum(axis=1).tolist(),
                "logits": top_rows(out.logits)}
        if sizer is not None:  # a simulated device whose calls cost what its table says (reproducible bytes)
            out.seconds = call["seconds"] = sizer.costs.cost(entry.width)
        if "lora_gate" in feeds:  # the slots whose gate is on (padding must be off)
            gate = feeds["lora_gate"][0]
            assert not gate[n_real:].any(), "a padding slot has the LoRA gate on"
            call["gate_on"] = np.flatnonzero(gate[:n_real]).tolist()
        if out.hidden is not None and drafter is not None and drafter.name == "mtp":  # only mtp reads them
            rows = call.get("gate_on", list(range(n_real)))  # its mask slots, where its LoRA is on
            call["hidden_rows"] = rows
            call["hidden"] = base64.b64encode(np.asarray(out.hidden[rows], "<f4").tobytes()).decode()
        calls.append(call)
        return out

    def commit(new_keys, new_values, slots, rows_in_cache=0):
        commits.append({"call": len(calls) - 1, "slots": [int(s) for s in slots]})
        return original_commit(new_keys, new_values, slots, rows_in_cache)

    def verify(tree, logits, choose, trusted=None):
        path, token = original_verify(tree, logits, choose, trusted)
        trees.append({"call": len(calls) - 1, "tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(),
                      "trusted": trusted, "path": path, "next_token": token})
        return path, token

    def observe(tree, out, path):  # the steps the drafter is told about (not a plain step at the last position)
        # what it is told: its own tree (a block led by carried drafts holds more), its rows' trusted count and the
        # path through it (the accepted one, extended by the untrusted rows' greedy path where the walk stopped
        # at an untrusted match)
        trees[-1]["observed"] = {"tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(),
                                 "plain_rows": min(int(out.plain_rows), len(tree)), "path": list(path)}
        return original_observe(tree, out, path)

    engine.graphs.run = run
    engine.cache.commit_accepted_kv = commit
    generate_module.verify_tree = verify
    if drafter is not None:
        original_observe = drafter.observe
        drafter.observe = observe
    try:
        yield calls, commits, trees
    finally:
        del engine.graphs.run
        del engine.cache.commit_accepted_kv
        generate_module.verify_tree = original_verify
        if drafter is not None:
            del drafter.observe


def record(engine: Engine, name: str, drafter_key: str | None, options: dict, max_new: int, model: str = "smollm2",
           text: str = PROMPT, on_overflow: str = "error", costs: dict[int, float] | None = None) -> dict:
    from mtpedge.runtime.drafters import make_drafter
    prompt = engine.tokenizer.encode_chat([{"role": "user", "content": text}])
    m = engine.manifest
    table = None if costs is None else CostTable(costs, m.model_name, m.source_sha256, m.context, "golden", "golden")
    engine.cost_table = table
    try:
        drafter = make_drafter(drafter_key, engine, **options) if drafter_key else None
    finally:
        engine.cost_table = None
    if table is not None:
        ticks = itertools.count()
        drafter.sizer.clock = lambda: next(ticks) * CLOCK_STEP
    with recording(engine, drafter) as (calls, commits, trees):
        result = generate(engine, prompt, max_new_tokens=max_new, drafter=drafter, on_overflow=on_overflow)
    committed = sorted(set(prompt) | set(result.token_ids) | {t["tokens"][0] for t in trees})
    for t in trees:  # fingerprints of rows whose token the replay's sparse table lacks cannot be compared
        call = calls[t["call"]]
        call["check_rows"] = [tok == SLOT or tok in committed for tok in t["tokens"]]
    log.info("%s: %d new tokens, %d calls, tau %.2f", name, len(result.token_ids), len(calls),
             result.stats.tokens_per_call)
    return {"name": name, "model": model, "on_overflow": on_overflow, "drafter": drafter_key, "options": options,
            "prompt": text, "prompt_ids": prompt,
            "max_new_tokens": max_new, "top_k": TOP_K, "token_ids": result.token_ids,
            "finish_reason": result.stats.finish_reason, "decode_calls": result.stats.decode_calls,
            "accepted_per_call": {str(k): v for k, v in sorted(result.stats.accepted_histogram.items())},
            "calls": calls, "commits": commits, "trees": trees, "embedding_ids": committed,
            **({} if table is None else {"cost_table": table.to_json(), "clock_step": CLOCK_STEP,
                                         "sizing": result.stats.sizing})}


@contextlib.contextmanager
def consulted_ngrams():
    """Spy on static n-gram tables: every n-gram a drafter found, with its successor (and the table's orders and
    tokenizer fingerprint)."""
    from mtpedge.runtime.static_ngrams import StaticNgrams, ngram_key
    found: dict = {"entries": {}}
    original = StaticNgrams.next_token

    def next_token(self, context):
        n, token = original(self, context)
        if n:
            found["entries"][ngram_key(context[-n:])] = token
            found["orders"], found["vocab"] = self.orders, self.vocab
        return n, token

    StaticNgrams.next_token = next_token
    try:
        yield found
    finally:
        StaticNgrams.next_token = original


def write_consulted_table(found: dict, model: str, manifest: dict) -> None:
    """The n-grams the recordings found, as a static table in bundle_<model>/, named by the manifest's extras (as an
    export names its copy of a shipped table): n-grams no recording found are left out, so the file stays small
    and the replay misses where the recording missed."""
    from mtpedge.runtime.static_ngrams import BUNDLE_FILE, EXTRAS_KEY, StaticNgrams
    keys = sorted(found["entries"])
    table = StaticNgrams(np.array(keys, dtype=np.uint64), np.array([found["entries"][k] for k in keys], np.int32),
                         found["orders"], found["vocab"])
    table.save(output() / f"bundle_{model}" / BUNDLE_FILE)
    manifest["extras"][EXTRAS_KEY] = BUNDLE_FILE
    log.info("wrote bundle_%s/%s (%d n-grams the recordings found)", model, BUNDLE_FILE, len(keys))


def write_model(engine: Engine, model: str, recordings: list, sparse: bool, **record_options) -> list[str]:
    """The manifest, the recordings and the embedding rows they need (all rows of a tiny table)."""
    data = json.loads(engine.manifest.to_json())
    for g in data["graphs"]:  # the per-layer I/O shapes are checked by the Python loader; the app needs none
        g["inputs"], g["outputs"] = {}, {}
    needed: set[int] = set()
    names = []
    with consulted_ngrams() as found:
        for name, key, options, max_new, *costs in recordings:
            recording = record(engine, name, key, options, max_new, model=model, costs=costs[0] if costs else None,
                               **record_options)
            needed |= set(recording["embedding_ids"])
            write(f"decode_{name}.json", recording)
            names.append(f"decode_{name}.json")
    if found["entries"]:
        write_consulted_table(found, model, data)
    write(f"manifest_{model}.json", data)
    # one table per model for all its recordings, including those kept from an earlier run (e.g. of drafters this
    # runtime lacks): the rows of prompt and committed tokens (base64 float32), and the mean row of the full
    # table (ESP's "mean" mask init)
    for kept in output().glob("decode_*.json"):
        kept_recording = json.loads(kept.read_text())
        if kept_recording.get("model", "smollm2") == model:
            needed |= set(kept_recording["embedding_ids"])
    table = np.asarray(engine.embeddings, dtype=np.float32)
    ids = sorted(needed) if sparse else list(range(table.shape[0]))
    rows = base64.b64encode(table[ids].astype("<f4").tobytes()).decode()
    mean = table.astype(np.float64).mean(axis=0).tolist()
    write(f"embeddings_{model}.json", {"ids": ids, "rows": rows, "mean": mean})
    copy_adapter_files(engine, model)
    return names


def copy_adapter_files(engine: Engine, model: str) -> None:
    """The files the manifest's extras["mtp"] names (learned masks, sampler head, unembedding), byte for byte, into
    bundle_<model>/: the Java engine reads them with its own .npy / .npz reader, as the app does."""
    extras = engine.manifest.extras.get("mtp") or {}
    names = [extras.get(key) for key in ("masks_file", "sampler_file", "unembedding")]
    names = [n for n in names if n and n != "embeddings"]
    if not names:
        return
    folder = output() / f"bundle_{model}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(engine.folder / name, folder / name)
        log.info("copied %s (%d KB)", f"bundle_{model}/{name}", (folder / name).stat().st_size // 1024)


def tiny_engine(folder: Path, sampler_form: str | None = None) -> Engine:
    """The seeded tiny LLaMA exported for a 64-position context; with a `sampler_form`, with a random multi-token
    adapter whose sampler head has that form."""
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.models.tiny import make_tiny_model
    model = make_tiny_model("llama", folder / "model", seed=0)
    checkpoint = random_adapter(model, folder / "adapter.pt", sampler_form) if sampler_form else None
    config = ExportConfig(context=64, prefill_width=16, decode_widths=(1, 8, 16), check_parity=False,
                          mtp_adapter=checkpoint)
    return Engine.load(export_bundle(model, folder / "bundle", config), threads=1)


def random_adapter(model: Path, path: Path, sampler_form: str) -> str:
    """A seeded adapter (k = 3, LoRA rank 4, sampler head) with every part moved away from its initial value (the
    sampler's norms too, so that a port that drops a norm's weight shows)."""
    import torch
    from mtpedge.models.loading import load_model
    from mtpedge.models.mtp_adapter import MtpAdapter, MtpConfig
    from mtpedge.models.mtp_training import MtpTrainer, TrainConfig, save_checkpoint

    torch.manual_seed(0)
    adapter = MtpAdapter(load_model(model).decoder, MtpConfig(k=3, rank=4, sampler=True, sampler_form=sampler_form))
    with torch.no_grad():
        adapter.masks.normal_()
        for module in adapter.lora.values():
            module.lora_B.normal_(std=0.05)
        adapter.sampler.fc2.weight.normal_(std=0.05)
        for name, param in adapter.sampler.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    save_checkpoint(path, MtpTrainer(adapter, TrainConfig()), {"name": "tiny"}, {})
    return str(path)


def write_all(bundle: str) -> None:
    """Record every decode; the SmolLM2 ones only where its bundle exists (else the committed ones stay)."""
    index_path = output() / "decodes.json"
    names = set(json.loads(index_path.read_text())["files"]) if index_path.is_file() else set()
    if (Path(bundle) / "manifest.json").is_file():
        engine = Engine.load(Path(bundle), threads=2)
        names |= set(write_model(engine, "smollm2", RECORDINGS + drafter_recordings(), sparse=True))
    else:
        log.warning("no SmolLM2 bundle at %s: its recorded decodes are kept as they are", bundle)
    for model, sampler_form, recordings in (("tiny", None, TINY_RECORDINGS + TINY_SIZED_RECORDINGS),
                                            ("tiny_mtp", "residual", TINY_MTP_RECORDINGS),
                                            ("tiny_mtp_paper", "paper", TINY_MTP_PAPER_RECORDINGS)):
        with tempfile.TemporaryDirectory(prefix="mtpedge-golden-tiny-") as tmp:
            try:
                engine = tiny_engine(Path(tmp), sampler_form)
            except ImportError as err:  # exporting needs torch (the export extras)
                log.warning("cannot export the tiny model (%s missing): its recorded decodes are kept", err.name)
                continue
            wanted = [r for r in recordings if r[1] is None or r[1] in _drafters()]
            names |= set(write_model(engine, model, wanted, sparse=False, text=TINY_PROMPT, on_overflow="stop"))
    write("decodes.json", {"files": sorted(names)})


def _drafters() -> set[str]:
    from mtpedge.runtime.drafters import DRAFTERS
    return set(DRAFTERS)
