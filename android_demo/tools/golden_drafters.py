"""Golden cases for the Java drafter port: the pure tree builders (ESP's, and the mtp drafter's expansion pools and
mask owners), n-gram lookup, acceptance rates and mask embeddings of the Python runtime, on small random inputs
with deliberate ties and repeats."""

from __future__ import annotations

import numpy as np
from golden_common import f32, write
from mtpedge.runtime.acceptance import DepthRates
from mtpedge.runtime.drafters.mask_embeddings import MaskConfig, MaskEmbeddings
from mtpedge.runtime.ngram import ngram_continuations
from mtpedge.runtime.tree_build import (
    attach_mask_slots,
    chain_pool,
    concat_pools,
    expansion_pool,
    mask_owners_by_value,
    mask_pool,
    mask_slot_index,
    select_tree,
    select_tree_scored,
    select_tree_with_owners,
    softmax_rows,
    static_tree,
    top_tokens,
)

try:  # moved between modules while the drafters were being written
    from mtpedge.runtime.tree_build import default_static_widths
except ImportError:
    from mtpedge.runtime.drafters.esp import default_static_widths


def pool_json(pool) -> dict:
    tokens, parents, scores = pool
    return {"tokens": tokens.tolist(), "parents": parents.tolist(), "scores": [float(s) for s in scores]}


def tied_logits(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """Logits on a coarse grid, so that equal values (ties) are common."""
    return (rng.integers(-6, 7, size=(rows, vocab)) * 0.5).astype(np.float32)


def tree_cases(rng: np.random.Generator) -> dict:
    top, static, pools, selects, slots = [], [], [], [], []
    for _ in range(30):
        vocab = int(rng.integers(5, 30))
        values = tied_logits(rng, 1, vocab)[0].astype(np.float64)
        count = int(rng.integers(1, vocab))
        exclude = int(rng.integers(0, vocab)) if rng.random() < 0.6 else None
        top.append({"values": values.tolist(), "count": count, "exclude": -1 if exclude is None else exclude,
                    "result": top_tokens(values, count, exclude).tolist()})
    for _ in range(20):
        vocab, k = int(rng.integers(12, 40)), int(rng.integers(1, 4))
        logits = tied_logits(rng, k, vocab)
        widths = [int(w) for w in rng.integers(1, 6, size=int(rng.integers(1, k + 1)))]
        root = int(rng.integers(0, vocab))
        tokens, parents = static_tree(root, logits, widths)
        static.append({"root": root, "logits": [f32(r) for r in logits], "widths": widths,
                       "tokens": tokens.tolist(), "parents": parents.tolist()})
    for _ in range(30):
        vocab, k = int(rng.integers(8, 30)), int(rng.integers(1, 4))
        root = int(rng.integers(0, vocab))
        logits = tied_logits(rng, k, vocab)
        probs = softmax_rows(logits)
        offer = int(rng.integers(1, 8))
        mask = mask_pool(probs, offer, root)
        chains = [rng.integers(0, vocab, size=int(rng.integers(1, 6))) for _ in range(int(rng.integers(0, 3)))]
        chain_scores = [np.cumprod(rng.uniform(0.2, 0.9, size=c.size)) / (r + 1) for r, c in enumerate(chains)]
        chain = chain_pool(root, chains, chain_scores)
        merged = concat_pools(chain, mask)
        budget = int(rng.integers(1, 10))
        tokens, parents, chosen = select_tree(*merged, budget)
        pools.append({"logits": [f32(r) for r in logits], "probs": probs.tolist(), "offer": offer, "root": root,
                      "mask_pool": pool_json(mask),
                      "chains": [c.tolist() for c in chains], "chain_scores": [s.tolist() for s in chain_scores],
                      "chain_pool": pool_json(chain), "merged": pool_json(merged)})
        selects.append({"pool": pool_json(merged), "budget": budget, "tokens": tokens.tolist(),
                        "parents": parents.tolist(), "chosen": chosen.tolist(),
                        "scores": select_tree_scored(*merged, budget)[3].tolist()})
    for _ in range(10):
        n = int(rng.integers(1, 6))
        parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
        tokens = rng.integers(0, 50, size=n)
        k = int(rng.integers(0, 4))
        tree = attach_mask_slots(tokens, parents, k)
        slots.append({"tokens": tokens.tolist(), "parents": parents.tolist(), "k": k,
                      "tree_tokens": tree.tokens.tolist(), "tree_parents": tree.parents.tolist()})
    widths = [{"nodes": n, "k": k, "widths": list(default_static_widths(n, k))}
              for n in range(0, 22) for k in (1, 2, 3)]
    return {"top_tokens": top, "static_tree": static, "pools": pools, "select_tree": selects, "mask_slots": slots,
            "default_widths": widths}


def ngram_cases(rng: np.random.Generator) -> dict:
    cases = []
    for _ in range(40):
        vocab = int(rng.integers(2, 8))
        context = rng.integers(0, vocab, size=int(rng.integers(1, 40)))
        max_ngram = int(rng.integers(1, 5))
        min_ngram = int(rng.integers(1, max_ngram + 1))
        length, matches = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        found = ngram_continuations(context, max_ngram, min_ngram, length, matches)
        cases.append({"context": context.tolist(), "max_ngram": max_ngram, "min_ngram": min_ngram, "length": length,
                      "max_matches": matches, "found": [f.tolist() for f in found]})
    rates = DepthRates(5)
    steps = []
    for _ in range(12):
        m = int(rng.integers(1, 8))
        depths = rng.integers(1, 7, size=m)
        parent = rng.random(m) < 0.6
        accepted = parent & (rng.random(m) < 0.5)
        rates.record(depths, parent, accepted)
        steps.append({"depths": depths.tolist(), "parent_accepted": parent.tolist(), "accepted": accepted.tolist(),
                      "rates": rates.rates().tolist(), "chain_scores_4_half": rates.chain_scores(4, 0.5).tolist()})
    return {"continuations": cases, "depth_rates": {"max_depth": 5, "steps": steps}}


def mask_cases(rng: np.random.Generator) -> dict:
    table = rng.normal(size=(30, 6)).astype(np.float32)
    cases = []
    for init in ("soft", "hard", "mean"):
        for slots, rate in ((1, 0.1), (2, 0.0), (3, 0.5)):
            masks = MaskEmbeddings(MaskConfig(init=init, slots=slots, update_rate=rate), table)
            prompt = rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist()
            masks.start(prompt)
            history = [f32(masks.for_owners(2))]
            observed = []
            for _ in range(3):
                tokens = rng.integers(0, 30, size=int(rng.integers(1, 4))).tolist()
                masks.observe_tokens(tokens)
                observed.append(tokens)
                history.append(f32(masks.for_owners(2)))
            cases.append({"init": init, "slots": slots, "rate": rate, "prompt": prompt, "observed": observed,
                          "for_two_owners": history})
    return {"table": f32(table), "rows": 30, "dim": 6, "cases": cases}


def write_all() -> None:
    rng = np.random.default_rng(7)
    write("drafters.json", {"trees": tree_cases(rng), "ngram": ngram_cases(rng), "masks": mask_cases(rng),
                            "owners": owner_cases(np.random.default_rng(8))})


def expansion_table(rng: np.random.Generator, vocab: int, depths: int, branch: int) -> list:
    """next[depth][token] = (the `branch` best next tokens, their probabilities): a drafter's expand step as a table."""
    table = []
    for _ in range(depths):
        rows = []
        for _ in range(vocab):
            probs = softmax_rows(tied_logits(rng, 1, vocab))[0]
            best = top_tokens(probs, branch)
            rows.append({"tokens": best.tolist(), "probs": probs[best].tolist()})
        table.append(rows)
    return table


def owner_cases(rng: np.random.Generator) -> dict:
    """The mtp drafter's tree builders: expansion pools, mask owners by value, trees with owners, owned slots."""
    expansions, owners, owned, slots = [], [], [], []
    for _ in range(20):
        vocab, depths, branch = int(rng.integers(4, 12)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
        table = expansion_table(rng, vocab, depths, branch)

        def expand(depth, parents, table=table):
            rows = [table[depth][int(t)] for t in parents]
            return np.array([r["tokens"] for r in rows]), np.array([r["probs"] for r in rows])

        root, keep = int(rng.integers(0, vocab)), int(rng.integers(1, 10))
        pool = expansion_pool(root, expand, depths, keep)
        expansions.append({"vocab": vocab, "next": table, "root": root, "depths": depths, "keep": keep,
                           "pool": pool_json(pool)})
        width, k, gain = int(rng.integers(4, 20)), int(rng.integers(1, 4)), float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        if width - k < 1:
            continue
        chains = [rng.integers(0, vocab, size=int(rng.integers(1, 5))) for _ in range(int(rng.integers(0, 3)))]
        chain_scores = [np.cumprod(rng.uniform(0.2, 0.9, size=c.size)) / (r + 1) for r, c in enumerate(chains)]
        merged = concat_pools(chain_pool(root, chains, chain_scores), pool)
        tokens, parents, chosen, scores = select_tree_scored(*merged, width - k)
        kept, mask_owners = mask_owners_by_value(parents, scores, width, k, gain)
        owners.append({"parents": parents.tolist(), "scores": scores.tolist(), "width": width, "k": k, "gain": gain,
                       "kept": kept.tolist(), "owners": mask_owners.tolist()})
        t, p, c, o = select_tree_with_owners(merged, width, k, gain)
        owned.append({"pool": pool_json(merged), "width": width, "k": k, "gain": gain, "tokens": t.tolist(),
                      "parents": p.tolist(), "chosen": c.tolist(), "owners": o.tolist()})
        tree = attach_mask_slots(t, p, k, o)
        slots.append({"tokens": t.tolist(), "parents": p.tolist(), "k": k, "owners": o.tolist(),
                      "tree_tokens": tree.tokens.tolist(), "tree_parents": tree.parents.tolist(),
                      "slot_index": [None if (s := mask_slot_index(t.size, node, k, o)) is None else int(s[0])
                                     for node in range(t.size)]})
    return {"expansion_pools": expansions, "owners_by_value": owners, "trees_with_owners": owned,
            "owned_slots": slots}
