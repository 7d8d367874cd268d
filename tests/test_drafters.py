"""Every drafter is lossless: greedy output == plain decoding, token for token, on tiny random models.

Also: sampled output with the same seed equals plain sampling (each emitted token is one draw from the
model's own conditional, in the same order), and its distribution matches plain sampling statistically.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mtpedge.runtime.drafters import drafter_names, make_drafter
from mtpedge.runtime.drafters.base import Drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.sampling import SamplingConfig
from mtpedge.runtime.tree import DraftTree

ARCHS = ("llama", "qwen2", "qwen3")

DRAFTER_SETTINGS = [
    ("esp", {}),
    ("esp", {"mask_init": "soft", "masks": 2, "tree": "static:4,2", "width": 32}),
    ("esp", {"mask_init": "hard", "masks": 3, "tree": "dynamic", "width": 32}),
    ("esp", {"mask_init": "sample", "masks": 1, "tree": "dynamic", "width": 8, "mask_update": 0.0}),
    ("lookup", {}),
    ("lookup", {"width": 32, "branches": 3, "max_ngram": 2}),
    ("hybrid", {}),
    ("hybrid", {"masks": 2, "width": 32, "branches": 3, "mask_init": "soft"}),
    ("hybrid", {"width": 8}),
    ("hybrid", {"masks": 3, "width": 32, "max_ngram": 2, "mask_init": "hard"}),
]


@pytest.fixture(scope="module")
def engines(tiny_bundle):
    return {arch: Engine.load(tiny_bundle(arch)) for arch in ARCHS}


def fuzzed_prompts(engine: Engine, count: int, seed: int) -> list[list[int]]:
    """Random token prompts, some with repeated spans (so that n-gram lookup finds matches)."""
    rng = np.random.default_rng(seed)
    vocab = engine.config.vocab_size
    prompts = []
    for i in range(count):
        base = rng.integers(0, vocab, size=int(rng.integers(1, 24))).tolist()
        if i % 2:
            base = base + base[: int(rng.integers(1, len(base) + 1))]
        prompts.append(base)
    return prompts


def assert_quantized_bundle_drafts_losslessly(folder, seed: int) -> None:
    """A quantized bundle's rows are alike at every width (the row probe), and lookup, esp and hybrid equal plain
    decoding on fuzzed prompts."""
    from mtpedge.runtime.row_probe import probe_rows

    engine = Engine.load(folder, threads=1)
    assert probe_rows(engine).invariant
    for spec in ("lookup", "esp", "hybrid"):
        drafter = make_drafter(spec, engine)
        for prompt in fuzzed_prompts(engine, 6, seed=seed):
            plain = generate(engine, prompt, 40, stop_token_ids=set())
            drafted = generate(engine, prompt, 40, stop_token_ids=set(), drafter=drafter)
            assert drafted.token_ids == plain.token_ids, (spec, prompt)


def bundle_ops_and_quality(folder) -> tuple[dict[str, set[str]], dict]:
    """(operator types of each graph by name, the quality report) of a bundle, after checking the report keeps
    top-1 >= 90% and perplexity within 5% of float32 (what a tiny random model's int8 bundle keeps)."""
    import onnx

    from mtpedge.runtime.bundle import read_manifest

    manifest = read_manifest(folder)
    ops = {entry.name: {n.op_type for n in onnx.load(str(folder / entry.file), load_external_data=False).graph.node}
           for entry in manifest.graphs}
    quality = manifest.extras["quality"]
    assert quality["top1_agreement"] >= 0.9, quality
    assert quality["perplexity"]["quantized"] == pytest.approx(quality["perplexity"]["float32"], rel=0.05)
    return ops, manifest


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name,options", DRAFTER_SETTINGS)
def test_greedy_output_equals_plain_decoding(engines, arch, name, options):
    engine = engines[arch]
    drafter = make_drafter(name, engine, **options)
    # a seed of its own per case, the same in every run (str hashes change with PYTHONHASHSEED)
    for prompt in fuzzed_prompts(engine, 6, seed=zlib.crc32(repr((arch, name, options)).encode())):
        plain = generate(engine, prompt, 40, stop_token_ids=set())
        drafted = generate(engine, prompt, 40, stop_token_ids=set(), drafter=drafter)
        assert drafted.token_ids == plain.token_ids
        assert drafted.stats.decode_calls <= plain.stats.decode_calls


def test_drafters_save_calls(engines):
    """Over fuzzed prompts (half with repeated spans) every drafter needs fewer calls than plain decoding."""
    engine = engines["llama"]
    prompts = fuzzed_prompts(engine, 8, seed=3)
    plain_calls = sum(generate(engine, p, 60, stop_token_ids=set()).stats.decode_calls for p in prompts)
    for name in ("esp", "lookup", "hybrid"):
        drafter = make_drafter(name, engine)
        calls = sum(generate(engine, p, 60, stop_token_ids=set(), drafter=drafter).stats.decode_calls
                    for p in prompts)
        assert calls < plain_calls, (name, calls, plain_calls)


@pytest.mark.parametrize("name", ["esp", "lookup", "hybrid"])
def test_sampling_with_the_same_seed_equals_plain_sampling(engines, name):
    engine = engines["qwen2"]
    for seed, prompt in enumerate(fuzzed_prompts(engine, 4, seed=11)):
        config = SamplingConfig(temperature=0.8, top_k=50, seed=seed)
        plain = generate(engine, prompt, 30, config, stop_token_ids=set())
        drafted = generate(engine, prompt, 30, config, stop_token_ids=set(), drafter=make_drafter(name, engine))
        assert drafted.token_ids == plain.token_ids


def test_sampled_distribution_matches_plain_sampling(engines):
    """Chi-square test on the (first, second, third) token triples: drafted vs plain, independent seeds."""
    engine = engines["llama"]
    prompt = [5, 9, 5, 9, 5]
    runs = 400
    counts = {}
    for label, name in (("plain", "none"), ("hybrid", "hybrid")):
        drafter = make_drafter(name, engine, width=8) if name != "none" else None
        outcomes = []
        for seed in range(runs):
            offset = 0 if label == "plain" else 10_000  # independent draws for the two samples
            config = SamplingConfig(temperature=1.5, top_k=4, seed=seed + offset)
            out = generate(engine, prompt, 3, config, stop_token_ids=set(), drafter=drafter)
            outcomes.append(out.token_ids[0] * 1_000 + out.token_ids[1])
        counts[label] = outcomes
    keys = sorted(set(counts["plain"]) | set(counts["hybrid"]))
    a = np.array([counts["plain"].count(k) for k in keys], dtype=float)
    b = np.array([counts["hybrid"].count(k) for k in keys], dtype=float)
    keep = (a + b) >= 10  # pool rare cells so the chi-square approximation holds
    a = np.append(a[keep], a[~keep].sum())
    b = np.append(b[keep], b[~keep].sum())
    total = a + b
    mask = total > 0
    expected_a, expected_b = total[mask] / 2, total[mask] / 2
    chi2 = (((a[mask] - expected_a) ** 2) / expected_a + ((b[mask] - expected_b) ** 2) / expected_b).sum()
    dof = int(mask.sum()) - 1
    # 99.9% quantile of chi-square via Wilson-Hilferty: a false alarm once in a thousand runs at most
    z = 3.09
    limit = dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < limit, (chi2, limit, dof)


def test_registry_and_option_errors(engines):
    engine = engines["llama"]
    assert drafter_names() == ["none", "dmtd", "dmtd-spec", "esp", "hybrid", "lookup", "mtp"]
    assert make_drafter("none", engine) is None
    with pytest.raises(ValueError, match="unknown drafter"):
        make_drafter("medusa", engine)
    with pytest.raises(ValueError, match="takes no option masks"):
        make_drafter("lookup", engine, masks=2)
    with pytest.raises(ValueError, match="mask init"):
        make_drafter("esp", engine, mask_init="zeros")
    with pytest.raises(ValueError, match="need 40 slots"):
        make_drafter("esp", engine, masks=1, tree="static:19")
    with pytest.raises(ValueError, match="depths"):
        make_drafter("esp", engine, masks=1, tree="static:3,1")
    assert make_drafter("lookup", engine, masks=None).name == "lookup"  # None options are dropped (CLI)


def test_cli_generate_with_drafter_settings(tiny_bundle, capsys):
    import json

    from mtpedge.main import main

    bundle = str(tiny_bundle("llama"))
    assert main(["generate", "hello hello", "--bundle", bundle, "--raw", "--json", "--max-new-tokens", "12",
                 "--drafter", "none"]) == 0
    plain = json.loads(capsys.readouterr().out)
    argv = ["generate", "hello hello", "--bundle", bundle, "--raw", "--json", "--max-new-tokens", "12",
            "--drafter", "esp:masks=2:mask_init=soft:tree=static:3,1:width=16"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == plain["token_ids"]
    assert out["drafter_settings"] == {"drafter": "esp", "masks": 2, "mask_init": "soft", "mask_update": 0.1,
                                       "tree": "static", "widths": [3, 1], "width": 16}
    assert set(out) >= {"accepted_per_depth", "accepted_per_call", "tokens_per_call"}
    argv[-1] = "hybrid:branches=3:width=32"
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == plain["token_ids"]
    assert out["drafter_settings"]["branches"] == 3 and out["drafter_settings"]["width"] == 32
    with pytest.raises(SystemExit, match="2"):
        main(["generate", "x", "--bundle", bundle, "--drafter", "lookup:masks=2"])
    assert "takes no option masks" in capsys.readouterr().err


def test_bundle_templates_are_what_the_engine_reads(tiny_bundle, engines):
    """The export wrote the static ESP layouts; the engine reads a static tree's layout from its template (not
    a layout computed from the tree), and output equals an engine whose bundle has no templates."""
    import json
    import shutil

    engine = engines["qwen3"]
    assert {(t.width, t.masks) for t in engine.templates} >= {(8, 1), (32, 1), (32, 2), (32, 3)}
    prompt = fuzzed_prompts(engine, 1, seed=5)[0]
    drafter = make_drafter("esp:width=32", engine)  # the default static tree that fills a 32-wide graph
    generate(engine, prompt, 5, stop_token_ids=set(), drafter=drafter)  # so that it has a forecast to draft from
    tree, _ = drafter.propose(prompt, prompt[-1])
    template = next(t for t in engine.templates if t.parents == tuple(tree.parents.tolist()))
    visible, depth, _ = engine.block_layout(tree.parents)
    assert np.array_equal(visible, template.visible_matrix()) and depth.tolist() == list(template.depth)
    assert engine.block_layout(tree.parents)[0] is visible  # read, not rebuilt, on every step
    folder = engine.folder.parent / "bundle-without-templates"
    if not folder.exists():
        shutil.copytree(engine.folder, folder)
        manifest = json.loads((folder / "manifest.json").read_text())
        del manifest["extras"]["tree_templates"]
        (folder / "manifest.json").write_text(json.dumps(manifest))
    plain = Engine.load(folder)
    assert plain.templates == []
    for name in ("esp:width=32", "esp", "hybrid"):
        a = generate(engine, prompt, 30, stop_token_ids=set(), drafter=make_drafter(name, engine))
        b = generate(plain, prompt, 30, stop_token_ids=set(), drafter=make_drafter(name, plain))
        assert a.token_ids == b.token_ids and a.stats.accepted_histogram == b.stats.accepted_histogram


def test_corrupt_template_is_refused(tiny_bundle, tmp_path):
    import json
    import shutil

    from mtpedge.runtime.bundle import BundleError

    folder = tmp_path / "bundle"
    shutil.copytree(tiny_bundle("llama"), folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["extras"]["tree_templates"][0]["depth"][1] += 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="position offsets differ"):
        Engine.load(folder)


@pytest.mark.parametrize("name", ["lookup", "hybrid"])
def test_drafting_up_to_the_last_context_position_equals_plain_decoding(engines, name):
    """Near the end of the context a tree's rows run out of cache columns: rows past the end share the padding
    column and are not read, the last free position is a plain step, and the run stops where plain decoding does."""
    engine = engines["llama"]
    context = engine.context
    for seed, prompt in enumerate(fuzzed_prompts(engine, 4, seed=21)):
        long_prompt = (prompt * (context // len(prompt) + 1))[: context - 30 + seed]  # repeats: lookup matches
        plain = generate(engine, long_prompt, 64, stop_token_ids=set(), on_overflow="stop")
        drafted = generate(engine, long_prompt, 64, stop_token_ids=set(), on_overflow="stop",
                           drafter=make_drafter(name, engine))
        assert drafted.token_ids == plain.token_ids
        assert drafted.stats.finish_reason == plain.stats.finish_reason == "length"
        assert engine.cache.n_past == context


class SiblingOracle(Drafter):
    """Drafts the true continuation (from a plain run) only as a SIBLING of a wrong leading chain, so that every
    match lands on rows the verifier does not trust: what the loop's carried drafts are for."""

    name, lossy, lora_on_slots, sizer, settings = "sibling-oracle", False, False, None, {}

    def __init__(self, prompt, reference):
        self.sequence, self.seen = list(prompt) + list(reference), []

    def start(self, engine, prompt_ids):
        pass

    def observe_prefill(self, out):
        pass

    def propose(self, context_ids, root, lead=0):
        truth = self.sequence[len(context_ids): len(context_ids) + 2]
        wrong = (truth[0] + 1) % 64 if truth else 0
        tokens, parents = [root, wrong], [-1, 0]
        for depth, token in enumerate(truth):
            tokens.append(token)
            parents.append(0 if depth == 0 else len(tokens) - 2)
        tree = DraftTree(np.array(tokens), np.array(parents))
        return tree, None

    def observe(self, tree, out, path):
        assert out.logits.shape[0] >= len(tree) and max(path) < len(tree)  # its own tree's rows, its own indices
        self.seen.append(tree.tokens[path].tolist())


def test_drafts_matched_on_untrusted_rows_lead_the_next_block_and_output_equals_plain_decoding(engines):
    """A sibling that matches is not accepted; its rows' greedy path leads the next call as a chain that trusted
    rows verify. Output stays plain decoding's, and the carried drafts save calls."""
    engine = engines["qwen3"]
    for prompt in fuzzed_prompts(engine, 4, seed=31):
        plain = generate(engine, prompt, 30, stop_token_ids=set())
        oracle = SiblingOracle(prompt, plain.token_ids)
        drafted = generate(engine, prompt, 30, stop_token_ids=set(), drafter=oracle)
        assert drafted.token_ids == plain.token_ids
        assert drafted.stats.carried_blocks > 0
        assert drafted.stats.decode_calls < plain.stats.decode_calls
        assert all(seen[0] in plain.token_ids for seen in oracle.seen)


@pytest.mark.parametrize("spec", ["lookup:width=32", "hybrid:width=32", "esp:width=32:tree=dynamic"])
def test_a_drafter_leaves_room_for_the_carried_drafts_that_lead_its_block(engines, spec):
    """Beside carried drafts: trees that can shrink do (ESP's static trees, mtp's fixed layouts cannot)."""
    engine = engines["llama"]
    drafter = make_drafter(spec, engine)
    prompt = fuzzed_prompts(engine, 2, seed=7)[1]
    generate(engine, prompt, 5, stop_token_ids=set(), drafter=drafter)  # a forecast to draft from
    for lead in (28, 23, 16):
        tree, _ = drafter.propose(prompt, prompt[-1], lead=lead)
        assert lead + len(tree) <= engine.graphs.max_width == 32


@pytest.mark.parametrize("spec", ["lookup", "hybrid", "esp:tree=dynamic"])
def test_drafted_blocks_run_only_the_decode_graphs(tiny_one_width_bundle, spec):
    """A bundle whose prefill graph (16) is wider than its one decode graph (4): every decode step, carried drafts
    included, runs the decode graph, which plain decoding runs too (GraphSet.max_decode_width); the prefill graph
    is for prompts. Output equals plain decoding's."""
    engine = Engine.load(tiny_one_width_bundle)
    widths: list[int] = []
    run = engine.graphs.run

    def recording_run(entry, feeds, n_real):
        widths.append(entry.width)
        return run(entry, feeds, n_real)

    engine.graphs.run = recording_run
    drafter = make_drafter(spec, engine)
    assert drafter.settings["width"] == 4
    for prompt in fuzzed_prompts(engine, 4, seed=5):
        plain = generate(engine, prompt, 30, stop_token_ids=set())
        widths.clear()
        drafted = generate(engine, prompt, 30, stop_token_ids=set(), drafter=drafter)
        assert drafted.token_ids == plain.token_ids
        prefill_calls = -(-len(prompt) // engine.graphs.prefill_width)
        assert set(widths[prefill_calls:]) == {4}  # (a prompt's chunk takes the narrowest graph that holds it)
