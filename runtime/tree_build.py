"""Pure functions that build draft trees: ESP's static and dynamic trees, candidate pools, mask-slot chains.

Every function here is pure (arrays in, arrays out; `expansion_pool` also takes the drafter's next-token
step as a function) so that it can be tested exhaustively and ported
line by line (the Android demo re-implements them in Java). Token nodes are returned as
`(tokens, parents)` with the root at index 0 and parents before children (BFS order);
`attach_mask_slots` then appends ESP's k mask slots after every token node:

    [root | tree nodes (BFS) | k masks after root | k masks after node 1 | ...]

Ties are broken deterministically everywhere: higher probability first, then the lower token id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .tree import SLOT, DraftTree, node_depths

MAX_MASK_SLOTS = 3  # k: mask slots a token node may carry (ESP's k = 1..3; static trees are templated for each)


def top_tokens(probs: np.ndarray, count: int, exclude: int | None = None) -> np.ndarray:
    """The `count` most probable token ids of `probs` (vocab,), best first, ties by lower id.

    `exclude` (the parent's token: ESP's pruning) is skipped, so the next-best token takes its place.
    """
    vocab = probs.shape[0]
    take = min(count + 1, vocab)
    if take <= 0 or count <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-probs, take - 1)[:take] if take < vocab else np.arange(vocab)
    # a tie at the partition boundary could leave out a lower id of equal probability: widen to all equal ones
    cutoff = probs[part].min()
    part = np.union1d(part, np.flatnonzero(probs == cutoff)) if take < vocab else part
    order = part[np.lexsort((part, -probs[part]))]
    if exclude is not None:
        order = order[order != exclude]
    return order[:count].astype(np.int64)


def static_tree(root: int, mask_probs: np.ndarray, widths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """ESP's static tree with "top-1 expansion": depth i holds the top widths[i-1] tokens of mask i, all
    children of the most probable node of depth i-1 (the root for depth 1). The shape depends only on
    `widths`, so its layout can be precomputed (see tree_templates)."""
    if len(widths) > mask_probs.shape[0]:
        raise ValueError(f"{len(widths)} tree depths need as many mask distributions, got {mask_probs.shape[0]}")
    tokens, parents = [np.array([root], dtype=np.int64)], [np.array([-1], dtype=np.int64)]
    anchor, anchor_token, size = 0, root, 1
    for depth, width in enumerate(widths):
        chosen = top_tokens(mask_probs[depth], width, exclude=anchor_token)
        if chosen.size < width:
            raise ValueError(f"the vocabulary is too small for a tree width of {width}")
        tokens.append(chosen)
        parents.append(np.full(width, anchor, dtype=np.int64))
        anchor, anchor_token, size = size, int(chosen[0]), size + width
    return np.concatenate(tokens), np.concatenate(parents)


def static_tree_parents(widths: Sequence[int]) -> np.ndarray:
    """The parents array of every static tree of `widths` (what a template is keyed by)."""
    parents, anchor, size = [-1], 0, 1
    for width in widths:
        parents.extend([anchor] * width)
        anchor, size = size, size + width
    return np.asarray(parents, dtype=np.int64)


def default_static_widths(nodes: int, k: int) -> tuple[int, ...]:
    """Per-depth widths filling `nodes` token nodes (root included): most at depth 1, as ESP's [15, 4]."""
    drafts = nodes - 1
    if drafts < 1:
        return ()
    deeper = max(1, drafts // 4) if drafts >= k else 0
    widths = [drafts - deeper * (k - 1)] + [deeper] * (k - 1)
    return tuple(w for w in widths if w > 0)


def mask_pool(mask_probs: np.ndarray, offer: int, root: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of ESP's dynamic tree as a pool: depth i offers the top (offer - i + 1) tokens of mask i
    under the top-1 candidate of depth i-1, each scored P(parent) * p_i(token).

    Returns pool arrays (tokens, parents, scores) with the root at index 0 (score 1).
    """
    tokens, parents, scores = [root], [-1], [1.0]
    anchor, anchor_token, anchor_score = 0, root, 1.0
    for depth in range(mask_probs.shape[0]):
        count = offer - depth
        if count <= 0:
            break
        chosen = top_tokens(mask_probs[depth], count, exclude=anchor_token)
        first = len(tokens)
        tokens.extend(int(t) for t in chosen)
        parents.extend([anchor] * chosen.size)
        scores.extend((anchor_score * mask_probs[depth][chosen]).tolist())
        anchor, anchor_token, anchor_score = first, int(chosen[0]), scores[first]
    return np.asarray(tokens, np.int64), np.asarray(parents, np.int64), np.asarray(scores, np.float64)


def expansion_pool(root: int, expand: Callable[[int, np.ndarray], tuple[np.ndarray, np.ndarray]], depths: int,
                   keep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A candidate pool grown depth by depth from the root: `expand(depth, parent_tokens (m,))` gives each
    parent's best next tokens and their probabilities, (m, b) each; a child scores its parent's score times
    its probability, and the `keep` best children of a depth (ties: earlier parent, then better rank) become
    the next depth's parents.

    Returns pool arrays (tokens, parents, scores) with the root at index 0 (score 1), for select_tree_scored.
    """
    tokens, parents, scores = [np.array([root], np.int64)], [np.array([-1], np.int64)], [np.ones(1)]
    frontier, size = np.zeros(1, dtype=np.int64), 1
    for depth in range(depths):
        child_tokens, probs = expand(depth, np.concatenate(tokens)[frontier])
        child_scores = np.concatenate(scores)[frontier][:, None] * probs
        order = np.argsort(-child_scores, axis=None, kind="stable")[:keep]
        rows, cols = np.unravel_index(order, child_scores.shape)
        tokens.append(child_tokens[rows, cols].astype(np.int64))
        parents.append(frontier[rows])
        scores.append(child_scores[rows, cols])
        frontier = size + np.arange(order.size)
        size += order.size
    return np.concatenate(tokens), np.concatenate(parents), np.concatenate(scores)


def chain_pool(root: int, continuations: Sequence[np.ndarray], scores: Sequence[np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A pool of token chains hanging under the root (e.g. n-gram continuations), with per-node scores."""
    tokens, parents, pool_scores = [root], [-1], [1.0]
    for chain, chain_scores in zip(continuations, scores, strict=True):
        parent = 0
        for token, score in zip(chain, chain_scores, strict=True):
            tokens.append(int(token))
            parents.append(parent)
            pool_scores.append(float(score))
            parent = len(tokens) - 1
    return np.asarray(tokens, np.int64), np.asarray(parents, np.int64), np.asarray(pool_scores, np.float64)


def concat_pools(*pools: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pool from several pools sharing the root (index 0 of each); later roots are dropped."""
    tokens, parents, scores = [pools[0][0][:1]], [pools[0][1][:1]], [pools[0][2][:1]]
    size = 1
    for pool_tokens, pool_parents, pool_scores in pools:
        shifted = np.where(pool_parents[1:] == 0, 0, pool_parents[1:] + size - 1)
        tokens.append(pool_tokens[1:])
        parents.append(shifted)
        scores.append(pool_scores[1:])
        size += pool_tokens.shape[0] - 1
    return np.concatenate(tokens), np.concatenate(parents), np.concatenate(scores)


def select_tree(tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray, budget: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`select_tree_scored` without the scores: (tokens, parents, pool index of each chosen node)."""
    return select_tree_scored(tokens, parents, scores, budget)[:3]


def select_tree_scored(tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray, budget: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The best tree of at most `budget` nodes (root included) from a candidate pool.

    Pool nodes that repeat a sibling's token (same parent after merging, same token) are merged, keeping the
    higher score, and a node's score is capped by its parent's, so that choosing the `budget` best scores
    always yields a connected tree. Ties go to the shallower node, then to the earlier pool entry. The
    result holds the best chain first (the root, then each node's best-scored child), then the other nodes in
    BFS order (depth, then score rank): a graph call computes a block's leading chain bit for bit as plain
    decoding does (runtime/contract.py), so the likeliest path is the one verified exactly.

    Returns (tokens, parents, pool index of each chosen node, its score after merging and capping).
    """
    n = tokens.shape[0]
    if budget < 1:
        raise ValueError(f"a tree budget must be >= 1, got {budget}")
    if (parents[1:] == np.arange(n - 1)).all():  # one chain (lookup's pool): its first `budget` nodes
        keep = min(budget, n)
        capped = np.minimum.accumulate(np.asarray(scores, dtype=np.float64))
        return (tokens[:keep].astype(np.int64), np.arange(-1, keep - 1, dtype=np.int64),
                np.arange(keep, dtype=np.int64), capped[:keep])
    return _best_tree(tokens, parents, scores, budget)


def _best_tree(tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray, budget: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """select_tree_scored for any pool (a chain takes a shortcut there: the same tree, ~0.1 ms less a step)."""
    n = tokens.shape[0]
    merged = np.arange(n)  # pool index -> representative pool index
    depth = node_depths(parents)  # a merged node has its representative's depth (they are siblings)
    score = np.asarray(scores, dtype=np.float64).copy()
    seen: dict[tuple[int, int], int] = {}
    for i in range(1, n):  # small pools (tens of nodes): a plain loop reads best
        parent = int(merged[parents[i]])
        score[i] = min(score[i], score[parent])
        key = (parent, int(tokens[i]))
        if key in seen:
            keep = seen[key]
            score[keep] = max(score[keep], score[i])
            merged[i] = keep
        else:
            seen[key] = i
            merged[i] = i
    reps = np.flatnonzero(merged == np.arange(n))
    reps = reps[reps != 0]
    order = reps[np.lexsort((reps, depth[reps], -score[reps]))][: budget - 1]
    bfs = order[np.lexsort((np.arange(order.size), depth[order]))]
    chain = [0]
    while True:  # bfs lists each node's children best first
        child = next((int(c) for c in bfs if merged[parents[c]] == chain[-1]), None)
        if child is None:
            break
        chain.append(child)
    chosen = np.concatenate([chain, [c for c in bfs if c not in chain[1:]]]).astype(np.int64)
    new_index = {int(p): i for i, p in enumerate(chosen)}
    new_parents = np.array([-1] + [new_index[int(merged[parents[p]])] for p in chosen[1:]], dtype=np.int64)
    return tokens[chosen].astype(np.int64), new_parents, chosen.astype(np.int64), score[chosen]


def attach_mask_slots(tokens: np.ndarray, parents: np.ndarray, k: int, owners: np.ndarray | None = None
                      ) -> DraftTree:
    """The tree plus a chain of k SLOT nodes under every token node in `owners` (default: all of them; ESP's
    block layout). Slot j (0-based) of the r-th owner sits at index n + r * k + j; see `mask_slot_index`.
    """
    n = tokens.shape[0]
    owners = np.arange(n) if owners is None else np.asarray(owners, dtype=np.int64)
    if k == 0 or owners.size == 0:
        return DraftTree(tokens, parents)
    owner_of_slot = np.repeat(owners, k)
    j = np.tile(np.arange(k), owners.size)
    slot_index = n + np.arange(owners.size * k)
    slot_parents = np.where(j == 0, owner_of_slot, slot_index - 1)
    return DraftTree(np.concatenate([tokens, np.full(owners.size * k, SLOT)]),
                     np.concatenate([parents, slot_parents]))


def mask_slot_index(n_tokens: int, owner: int, k: int, owners: np.ndarray | None = None) -> np.ndarray | None:
    """Indices of the k mask slots of token node `owner` in a tree made by `attach_mask_slots` (None if
    `owner` is not one of `owners`)."""
    if owners is None:
        rank = owner
    else:
        hits = np.flatnonzero(np.asarray(owners) == owner)
        if hits.size == 0:
            return None
        rank = int(hits[0])
    start = n_tokens + rank * k
    return np.arange(start, start + k)


def mask_owners_by_value(parents: np.ndarray, scores: np.ndarray, width: int, k: int, gain: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Split a slot budget between draft tokens and mask slots by expected value (the hybrid's layout).

    `parents`/`scores`: a tree from `select_tree_scored` (BFS order, a child's score never above its
    parent's; score = estimated probability that the node is accepted, 1 at the root). Keeping the n best
    nodes is worth the sum of their scores in expected accepted tokens; k mask slots under node i are worth
    `gain` * P(i is the deepest accepted node) ~ gain * (s_i - sum of its kept children's s), since the next
    step's mask forecast comes from there (`gain`: tokens a forecast adds to the next step). Every n from 1
    up is tried and the remaining width goes to the owners of highest P(deepest).

    Returns (kept nodes: indices into the tree, ascending, so still BFS; owners: indices into the kept nodes).
    """
    size = parents.shape[0]
    depth = node_depths(parents)
    rank = np.lexsort((np.arange(size), depth, -scores))  # parents before children (scores are capped)
    deepest = np.zeros(size)
    best_value, best_n, best_owners = -1.0, 1, np.zeros(0, dtype=np.int64)
    total = 0.0
    for n, node in enumerate(rank[:width], start=1):  # small trees (<= width nodes): a plain loop reads best
        total += scores[node]
        deepest[node] = scores[node]
        if node:
            deepest[parents[node]] -= scores[node]
        room = min(n, (width - n) // k) if k else 0
        kept = rank[:n]
        # rounded: equal probabilities reached by different sums must tie (then the lower index wins)
        owners = kept[np.lexsort((kept, -np.round(deepest[kept], 12)))][:room]
        value = total + gain * float(np.clip(deepest[owners], 0.0, None).sum())
        if value > best_value + 1e-12:
            best_value, best_n, best_owners = value, n, owners
    kept = np.sort(rank[:best_n])
    return kept, np.searchsorted(kept, np.sort(best_owners))


def select_tree_with_owners(pool: tuple[np.ndarray, np.ndarray, np.ndarray], width: int, k: int, gain: float
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The best tree for `width` slots whose k-mask owners are chosen by value: `select_tree_scored` (at most
    width - k nodes), then `mask_owners_by_value`. Returns (tokens, parents, pool index of each node, owners)."""
    tokens, parents, chosen, scores = select_tree_scored(*pool, width - k)
    kept, owners = mask_owners_by_value(parents, scores, width, k, gain)
    return *subtree(tokens, parents, kept), chosen[kept], owners


def subtree(tokens: np.ndarray, parents: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nodes `kept` (ascending indices, closed under parents) as a tree of their own."""
    new_index = np.full(parents.shape[0], -1, dtype=np.int64)
    new_index[kept] = np.arange(kept.size)
    kept_parents = parents[kept]
    return tokens[kept], np.where(kept_parents < 0, -1, new_index[np.maximum(kept_parents, 0)])


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (mask distributions: a few rows, so precision is cheap)."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    probs = np.exp(shifted)
    return probs / probs.sum(axis=-1, keepdims=True)
