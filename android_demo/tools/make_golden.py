"""Write the golden vectors that pin the Android engine (Java) to the Python runtime.

    python android_demo/tools/make_golden.py                 # all cases but the real-model decode
    python android_demo/tools/make_golden.py --decode        # also record decodes: a tiny random model, and
                                                             # SmolLM2 where its bundle exists (~1 min)
    python android_demo/tools/make_golden.py --out DIR       # elsewhere (run_tests.sh --fresh does this)

Every case is computed by running the Python runtime's own code (tree_layout, the bundle's tree templates,
Engine.run_block's input building, verify_tree, KVCache.commit_accepted_kv, probabilities, the tokenizers library, the chat template,
the drafters, a real decode), so a change of behaviour there makes the Java golden tests fail until the files
are regenerated and the Java port follows. Files go to android_demo/engine/src/test/resources/golden/.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import mtpedge.runtime.engine as engine_module
import numpy as np
from mtpedge.runtime.bundle import GraphEntry, Manifest, TokenizerInfo
from mtpedge.runtime.engine import Engine, leading_chain
from mtpedge.runtime.graphs import GraphOutput, GraphSet
from mtpedge.runtime.kv_cache import ContextOverflowError, KVCache
from mtpedge.runtime.model_config import DecoderConfig, RopeConfig
from mtpedge.runtime.rope import inverse_frequencies, rope_tables
from mtpedge.runtime.sampling import SamplingConfig, probabilities
from mtpedge.runtime.tree import SLOT, DraftTree, tree_layout
from mtpedge.runtime.verify import accepted_tokens, verify_tree
from tokenizers import Tokenizer, models

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_decode  # noqa: E402  (the real-model recording, kept in its own module)
import golden_tokenizer  # noqa: E402
from golden_common import COMMITTED, RopePositions, f32, log, output, set_output, write, zero_runs  # noqa: E402


def random_parents(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)], dtype=np.int64)


def capture_engine(widths: list[int], context: int, mask_value: float) -> tuple[Engine, list[dict]]:
    """A real Engine (built by its own constructor) over a throw-away bundle folder, whose graph calls are
    captured instead of run: pins the engine's input building, whatever caching it does inside."""
    folder = Path(tempfile.mkdtemp(prefix="mtpedge-golden-"))
    hidden, vocab = 3, 8
    Tokenizer(models.BPE(vocab={"a": 0}, merges=[])).save(str(folder / "tokenizer.json"))
    np.save(folder / "embeddings.npy", np.zeros((vocab, hidden), dtype=np.float32))
    config = DecoderConfig(architecture="llama", vocab_size=vocab, hidden_size=hidden, intermediate_size=4,
                           num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8)
    manifest = Manifest(model_name="capture", config=config, context=context,
                        tokenizer=TokenizerInfo(file="tokenizer.json", bos_token_id=None, eos_token_ids=[0],
                                                chat_template=None),
                        embeddings_file="embeddings.npy",
                        graphs=[GraphEntry(f"decode_ar{w}", f"g{w}.onnx", "decode", w, context) for w in widths],
                        mask_value=mask_value, source_sha256="", producer={})
    captured: list[dict] = []

    class CapturingGraphs(GraphSet):
        def load_all(self) -> None:  # no sessions: nothing is run
            pass

        def run(self, entry, feeds, n_real):
            captured.append({"entry": entry, "feeds": {k: np.array(v) for k, v in feeds.items()}, "n_real": n_real})
            w = entry.width
            kv = [np.zeros((1, 1, w, config.head_dim), np.float32)]
            return GraphOutput(np.zeros((n_real, vocab), np.float32), kv, kv, 0.0)

    original = engine_module.GraphSet
    engine_module.GraphSet = CapturingGraphs
    try:
        engine = Engine(folder, manifest)
    finally:
        engine_module.GraphSet = original
        shutil.rmtree(folder)
    return engine, captured


def layout_cases(rng: np.random.Generator) -> dict:
    """Trees -> visible rows, depths, paths; and the block inputs (positions, cache slots, attention bias) of one
    call, or the engine's ContextOverflowError ("overflow": true) for a block that does not fit the context.

    One engine runs all cases in turn, every tree at two n_past values, so that an engine reusing buffers or
    layouts between calls is pinned as well; then blocks at the end of the context (filling it, reaching past it,
    at its last position, and a full cache), with plain_rows: the rows the decode loop trusts."""
    trees = [[-1], [-1, 0, 1, 2], [-1, 0, 0, 1], [-1, 0, 0, 0, 1, 1, 4, 2]]
    trees += [random_parents(rng, int(n)).tolist() for n in rng.integers(2, 16, size=12)]
    context, widths, mask_value = 40, [1, 4, 8, 16], -1e9
    engine, captured = capture_engine(widths, context, mask_value)
    positions_of = RopePositions(engine.inv_freq, context + max(widths))
    runs = [(parents, int(rng.integers(0, context - 16))) for parents in trees * 2]
    for parents in ([-1], [-1, 0, 1, 2], [-1, 0, 0], [-1, 0, 0, 0, 1, 1, 4, 2], trees[-1]):
        n = len(parents)
        runs += [(parents, n_past) for n_past in sorted({context - n - 1, context - n, context - n + 1, context - 1})]
    runs.append(([-1], context))  # a full cache
    cases = []
    for parents, n_past in runs:
        layout = tree_layout(np.array(parents))
        case = {"parents": parents, "visible": layout.visible.astype(int).tolist(), "depth": layout.depth.tolist(),
                "paths": [list(p) for p in layout.paths],
                "n_past": n_past, "context": context, "widths": widths, "mask_value": mask_value}
        engine.cache.n_past = n_past
        calls = len(captured)
        try:
            out = engine.run_block(np.zeros((len(parents), 3), np.float32), np.array(parents))
        except ContextOverflowError:
            assert len(captured) == calls, "a refused block was run"
            cases.append({**case, "overflow": True})
            continue
        call = captured[-1]
        bias = call["feeds"]["attention_bias"][0, 0]
        cases.append({
            **case,
            "width": call["entry"].width, "plain_rows": out.plain_rows,
            "positions": positions_of(call["feeds"]),
            "cache_slots": call["feeds"]["cache_slots"][0].tolist(),
            "bias_zero_runs": [zero_runs(r) for r in bias],
            "bias_values": sorted({float(v) for v in np.unique(bias)}),
        })
    bad = [[0], [-1, 1], [-1, 0, 2], [-1, -1]]
    return {"cases": cases, "invalid_parents": bad}


def rope_cases() -> dict:
    cases = []
    configs = [RopeConfig(theta=100000.0), RopeConfig(theta=10000.0, rope_type="linear", factor=4.0),
               RopeConfig(theta=500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position=8192)]
    positions = np.array([0, 1, 2, 7, 100, 1023, 4095, 30000])
    for rope in configs:
        head_dim = 64
        inv = inverse_frequencies(rope, head_dim)
        cos, sin = rope_tables(positions, inv)
        cases.append({"rope": {"theta": rope.theta, "rope_type": rope.rope_type, "factor": rope.factor,
                               "low_freq_factor": rope.low_freq_factor, "high_freq_factor": rope.high_freq_factor,
                               "original_max_position": rope.original_max_position},
                      "head_dim": head_dim, "positions": positions.tolist(), "inv_freq": inv.tolist(),
                      "cos": f32(cos), "sin": f32(sin)})
    return {"cases": cases}


def tree_with_logits(rng: np.random.Generator, vocab: int) -> tuple[DraftTree, np.ndarray]:
    """A random tree (with some slot nodes) and logits whose argmax often follows a child, so paths go deep."""
    n = int(rng.integers(1, 14))
    parents = random_parents(rng, n)
    tokens = rng.integers(0, vocab, size=n)
    tokens[0] = rng.integers(0, vocab)
    for i in range(1, n):
        if rng.random() < 0.15:
            tokens[i] = SLOT
    tree = DraftTree(tokens, parents)
    logits = rng.normal(size=(n, vocab)).astype(np.float32)
    for i in range(n):
        kids = [c for c in tree.children(i) if tree.tokens[c] != SLOT]
        if kids and rng.random() < 0.7:
            logits[i, tree.tokens[kids[int(rng.integers(len(kids)))]]] += 5.0
    return tree, logits


def verify_cases(rng: np.random.Generator) -> dict:
    """Model outputs -> accepted path, bonus token, and the cache rows a commit writes (greedy); and the path and
    token when only the tree's leading chain is trusted (what the decode loop reads: Engine.run_block's plain_rows)."""
    vocab, layers, heads, head_dim, context = 12, 2, 2, 3, 24
    cases = []
    for _ in range(40):
        tree, logits = tree_with_logits(rng, vocab)
        path, bonus = verify_tree(tree, logits, lambda row: int(np.argmax(row)))
        trusted = leading_chain(tree.parents)
        trusted_path, trusted_bonus = verify_tree(tree, logits, lambda row: int(np.argmax(row)), trusted)
        width = int(len(tree) + rng.integers(0, 3))
        cache = KVCache(layers, heads, context, head_dim)
        cache.n_past = int(rng.integers(0, context - width))
        new_keys = [rng.normal(size=(1, heads, width, head_dim)).astype(np.float32) for _ in range(layers)]
        new_values = [rng.normal(size=(1, heads, width, head_dim)).astype(np.float32) for _ in range(layers)]
        start = cache.n_past
        cache.commit_accepted_kv(new_keys, new_values, path)
        cases.append({
            "tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(), "vocab": vocab,
            "logits": f32(logits), "path": path, "next_token": bonus,
            "accepted_tokens": accepted_tokens(tree, path).tolist(),
            "trusted": trusted, "trusted_path": trusted_path, "trusted_next_token": trusted_bonus,
            "kv": {"layers": layers, "heads": heads, "head_dim": head_dim, "context": context, "width": width,
                   "n_past": start, "n_past_after": cache.n_past,
                   "new_keys": [f32(k) for k in new_keys], "new_values": [f32(v) for v in new_values],
                   "keys_after": [f32(k[:, :, : cache.n_past]) for k in cache.keys],
                   "values_after": [f32(v[:, :, : cache.n_past]) for v in cache.values]},
        })
    return {"cases": cases}


def sampling_cases(rng: np.random.Generator) -> dict:
    cases = []
    for temperature, top_k, top_p in [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 10, 0.9), (2.0, 3, 0.5)]:
        logits = (rng.normal(size=32) * 3).astype(np.float32)
        config = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        cases.append({"logits": f32(logits), "temperature": temperature, "top_k": top_k, "top_p": top_p,
                      "probs": probabilities(logits, config).tolist()})
    return {"cases": cases}


def template_cases() -> dict:
    """The tree templates an export writes for these decode widths (the manifest's JSON form)."""
    from mtpedge.runtime.tree_templates import default_templates

    return {"templates": [t.to_json() for t in default_templates([4, 8, 16, 32])]}


def default_drafter_cases() -> dict:
    """runtime.drafters.default_drafter on variants of the real SmolLM2 manifest: float32, the fast recipe, a 4-bit
    recipe with float activations, QDQ / QNN with several decode graphs and with one."""
    from mtpedge.export.quant_config import FAST
    from mtpedge.runtime.drafters import default_drafter

    base = json.loads((COMMITTED / "manifest_smollm2.json").read_text())
    fast = json.loads(json.dumps(asdict(FAST)))
    graphs = base["graphs"]
    one_decode = [g for g in graphs if g["kind"] == "prefill" or g["width"] == 16]
    variants = {
        "float32": ({}, graphs),
        "fast": ({"quantization": {"config": fast}}, graphs),
        "int4_float_activations": ({"quantization": {"config": {**fast, "accuracy_level": 0}}}, graphs),
        "float_activation_roles": ({"quantization": {"config": {**fast, "float_activation_roles": ["down_proj"]}}},
                                   graphs),
        "int8": ({"quantization": {"config": {**fast, "weights": "int8", "output_layer": "int8"}}}, graphs),
        "qdq_several_decode_graphs": ({"qdq": {"recipe": "a16w8"}}, graphs),
        "qdq_one_decode_graph": ({"qdq": {"recipe": "a16w8"}}, one_decode),
        "qnn_one_decode_graph": ({"qdq": {"recipe": "a16w8"}, "qnn": {"soc": "sm8750"}}, one_decode),
    }
    cases = []
    for name, (extras, chosen) in variants.items():
        manifest = {**base, "graphs": chosen, "extras": {**base["extras"], **extras}}
        cases.append({"name": name, "manifest_json": json.dumps(manifest),
                      "default": default_drafter(Manifest.from_dict(manifest))})
    return {"cases": cases}


def drafters_available() -> bool:
    try:
        import mtpedge.runtime.tree_build  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode", action="store_true",
                        help="also record decodes (a tiny model; SmolLM2 where --bundle exists)")
    parser.add_argument("--out", help="folder to write to (default: the committed golden folder of the engine tests)")
    parser.add_argument("--bundle", default=str(Path.home() / ".cache/mtpedge/bundles/SmolLM2-135M-Instruct-cl1024"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.out:
        set_output(Path(args.out))
    rng = np.random.default_rng(20261129)
    write("layout.json", layout_cases(rng))
    write("rope.json", rope_cases())
    write("verify.json", verify_cases(rng))
    write("sampling.json", sampling_cases(rng))
    write("templates.json", template_cases())
    write("default_drafters.json", default_drafter_cases())
    golden_tokenizer.write_all(args.bundle)
    if drafters_available():
        import golden_drafters
        golden_drafters.write_all()
    else:
        log.warning("this mtpedge has no drafters (runtime/tree_build.py): drafter golden cases not written")
    if args.decode:
        golden_decode.write_all(args.bundle)
    if drafters_available():  # after the decodes: the cost tables are checked against the tiny model's manifest
        import golden_sizing
        manifest = output() / "manifest_tiny.json"
        golden_sizing.write_all(json.loads((manifest if manifest.is_file() else COMMITTED / manifest.name).read_text()))


if __name__ == "__main__":
    main()
