"""The pure tree builders, mask embeddings, n-gram lookup, templates and attention-bias builders."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtpedge.runtime.acceptance import DepthRates
from mtpedge.runtime.attention_bias import CachedAttentionBias, block_inputs
from mtpedge.runtime.drafters.mask_embeddings import MaskConfig, initial_masks, updated_masks
from mtpedge.runtime.engine import leading_chain
from mtpedge.runtime.ngram import ngram_continuations, ngram_match
from mtpedge.runtime.tree import SLOT, tree_layout
from mtpedge.runtime.tree_build import (
    attach_mask_slots,
    chain_pool,
    concat_pools,
    default_static_widths,
    mask_pool,
    mask_slot_index,
    select_tree,
    select_tree_scored,
    static_tree,
    static_tree_parents,
    top_tokens,
)
from mtpedge.runtime.tree_templates import check_template, default_templates, make_template


def brute_top(probs, count, exclude=None):
    ranked = sorted(range(len(probs)), key=lambda t: (-probs[t], t))
    return [t for t in ranked if t != exclude][:count]


@given(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5]), min_size=1, max_size=9), st.integers(0, 10),
       st.one_of(st.none(), st.integers(0, 8)))
def test_top_tokens_is_a_stable_sort_with_pruning(values, count, exclude):
    probs = np.array(values)
    assert top_tokens(probs, count, exclude).tolist() == brute_top(values, count, exclude)


def test_static_tree_top1_expansion_and_pruning():
    mask_probs = np.array([[0.1, 0.5, 0.3, 0.1, 0.0],   # depth 1: 1, 2, (0, 3 tie -> 0)
                           [0.0, 0.6, 0.3, 0.05, 0.05]])  # depth 2 under node "1": 1 is pruned -> 2, then 3
    tokens, parents = static_tree(4, mask_probs, [3, 2])
    assert tokens.tolist() == [4, 1, 2, 0, 2, 3]
    assert parents.tolist() == [-1, 0, 0, 0, 1, 1]
    assert parents.tolist() == static_tree_parents([3, 2]).tolist()
    # the root's own token is pruned at depth 1
    tokens, _ = static_tree(1, mask_probs, [2])
    assert tokens.tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="mask distributions"):
        static_tree(0, mask_probs[:1], [2, 1])


@pytest.mark.parametrize("widths", [w for n in range(1, 4) for w in itertools.product(range(1, 4), repeat=n)])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_attach_mask_slots_is_esp_block_layout(widths, k):
    """Exhaustive on small static trees: slot j of owner b sees b's ancestors, slots < j of b, itself;
    its position is pos(b) + j + 1; no token node sees any slot."""
    token_parents = static_tree_parents(widths)
    n = token_parents.shape[0]
    tree = attach_mask_slots(np.arange(n), token_parents, k)
    layout = tree_layout(tree.parents)
    assert len(tree) == (k + 1) * (1 + sum(widths))
    assert (tree.tokens[n:] == SLOT).all() and (tree.tokens[:n] >= 0).all()
    assert not layout.visible[:n, n:].any()
    for owner in range(n):
        slots = mask_slot_index(n, owner, k)
        for j, slot in enumerate(slots):
            expected = set(np.flatnonzero(layout.visible[owner])) | set(slots[: j + 1].tolist())
            assert set(np.flatnonzero(layout.visible[slot])) == expected
            assert layout.depth[slot] == layout.depth[owner] + j + 1


def brute_select(tokens, parents, scores, budget):
    """Reference: merge duplicate siblings, cap scores by ancestors, take the best by (score, depth, index)."""
    rep, depth, score = {}, {0: 0}, {0: 1.0}
    canon = {0: 0}
    for i in range(1, len(tokens)):
        p = canon[parents[i]]
        key = (p, tokens[i])
        s = min(scores[i], score[p])
        if key in rep:
            canon[i] = rep[key]
            score[rep[key]] = max(score[rep[key]], s)
        else:
            rep[key] = canon[i] = i
            depth[i], score[i] = depth[p] + 1, s
    nodes = sorted(rep.values(), key=lambda i: (-score[i], depth[i], i))[: budget - 1]
    return {(tokens[i], depth[i]) for i in nodes}, nodes


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_chain_pool_takes_a_shortcut_to_the_same_tree(data):
    """lookup's pool is one chain; its best tree is its first `budget` nodes, as the general selection finds."""
    from mtpedge.runtime.tree_build import _best_tree

    size = data.draw(st.integers(1, 12))
    tokens = np.array([7] + [data.draw(st.integers(0, 3)) for _ in range(1, size)])
    scores = np.array([1.0] + [data.draw(st.sampled_from([0.0, 0.1, 0.4, 0.8, 1.0])) for _ in range(1, size)])
    parents, budget = np.arange(-1, size - 1), data.draw(st.integers(1, 14))
    for fast, general in zip(select_tree_scored(tokens, parents, scores, budget),
                             _best_tree(tokens, parents, scores, budget), strict=True):
        assert fast.dtype == general.dtype and np.array_equal(fast, general)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_select_tree_is_connected_best_and_chain_first(data):
    size = data.draw(st.integers(1, 10))
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, size)]
    tokens = [7] + [data.draw(st.integers(0, 3)) for _ in range(1, size)]
    scores = [1.0] + [data.draw(st.sampled_from([0.1, 0.2, 0.4, 0.8])) for _ in range(1, size)]
    budget = data.draw(st.integers(1, 12))
    out_tokens, out_parents, chosen, out_scores = select_tree_scored(np.array(tokens), np.array(parents),
                                                                      np.array(scores), budget)
    layout = tree_layout(out_parents)  # validates: parents come first
    assert out_tokens[0] == 7 and chosen[0] == 0 and len(out_tokens) <= budget
    chain = leading_chain(out_parents)  # the best chain first: each node's best-scored child follows it ...
    for i in range(chain):
        children = np.flatnonzero(out_parents == i)
        if i < chain - 1:
            assert out_scores[i + 1] == out_scores[children].max()
        else:
            assert children.size == 0
    assert (np.diff(layout.depth[chain:]) >= 0).all()  # ... then the others in BFS order
    for i in range(1, len(out_tokens)):  # siblings never repeat a token
        sib = np.flatnonzero(out_parents == out_parents[i])
        assert (out_tokens[sib] == out_tokens[i]).sum() == 1
    expected, nodes = brute_select(tokens, parents, scores, budget)
    assert {(int(t), int(d)) for t, d in zip(out_tokens[1:], layout.depth[1:], strict=True)} == expected
    assert sorted(chosen[1:].tolist()) == sorted(nodes)


def test_dynamic_tree_from_mask_pool():
    mask_probs = np.array([[0.6, 0.3, 0.1, 0.0], [0.1, 0.0, 0.8, 0.1]])
    pool = mask_pool(mask_probs, offer=3, root=3)
    assert pool[0].tolist() == [3, 0, 1, 2, 2, 3]  # depth 2 offers 2 tokens under the top-1 of depth 1 (0 pruned)
    assert np.allclose(pool[2], [1, 0.6, 0.3, 0.1, 0.48, 0.06])
    tokens, parents, _ = select_tree(*pool, budget=4)
    assert tokens.tolist() == [3, 0, 2, 1] and parents.tolist() == [-1, 0, 1, 0]  # the best chain first


def test_hybrid_pool_merges_shared_candidates():
    lookup = chain_pool(9, [np.array([1, 2, 3])], [np.array([0.5, 0.25, 0.125])])
    masks = mask_pool(np.array([[0.2, 0.7, 0.1, 0.0], [0.0, 0.0, 0.9, 0.1]]), offer=2, root=9)
    tokens, parents, scores = concat_pools(lookup, masks)
    assert tokens.tolist() == [9, 1, 2, 3, 1, 0, 2]
    assert parents.tolist() == [-1, 0, 1, 2, 0, 0, 4]
    out_tokens, out_parents, chosen = select_tree(tokens, parents, scores, budget=5)
    # token 1 offered by both sources is one node (score 0.7); its child 2 likewise (0.63); the chain 9 1 2 3 first
    assert out_tokens.tolist() == [9, 1, 2, 3, 0] and out_parents.tolist() == [-1, 0, 1, 2, 0]
    assert chosen.tolist() == [0, 1, 2, 3, 5]


def test_default_static_widths():
    assert default_static_widths(8, 1) == (7,)
    assert default_static_widths(5, 2) == (3, 1)
    assert default_static_widths(8, 3) == (3, 2, 2) or sum(default_static_widths(8, 3)) == 7
    assert default_static_widths(1, 1) == ()
    for nodes in range(1, 20):
        for k in (1, 2, 3):
            widths = default_static_widths(nodes, k)
            assert sum(widths) == nodes - 1 and len(widths) <= k and all(w > 0 for w in widths)


def test_ngram_continuations():
    ctx = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3]
    assert [c.tolist() for c in ngram_continuations(ctx, 3, 1, 4, max_matches=3)] == [[5, 1, 2, 3], [4, 1, 2, 3]]
    assert [c.tolist() for c in ngram_continuations(ctx, 3, 1, 2, max_matches=1)] == [[5, 1]]
    assert [c.tolist() for c in ngram_continuations([7, 8, 9, 8], 3, 1, 3)] == [[9, 8]]  # falls back to n = 1
    assert ngram_continuations([1, 2, 3], 3, 1, 3) == []
    assert ngram_continuations([4], 3, 1, 3) == []
    with pytest.raises(ValueError, match="n-gram"):
        ngram_continuations(ctx, 1, 2)


def test_ngram_match_says_which_n_matched():
    ctx = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3]
    assert ngram_match(ctx, 3, 1, 2)[0] == 3 and ngram_match(ctx, 2, 1, 2)[0] == 2
    assert ngram_match([7, 8, 9, 8], 3, 1, 3)[0] == 1 and ngram_match([1, 2, 3], 3, 1, 3) == (0, [])


def test_lookup_learns_acceptance_per_match_class():
    """A long match inside a copied passage and a lone 1-gram match are accepted at very different rates, so each
    class (n matched, previous step accepted a lookup draft) keeps its own; reset forgets them all."""
    from mtpedge.runtime.drafters.lookup import MATCH_CLASS_PRIORS, NgramSource
    from mtpedge.runtime.tree import DraftTree

    source = NgramSource(3, 1, 3, 1)
    copied = [9, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3]  # "1 2 3" seen before: a 3-gram match, continuation 4 5 6
    tokens, parents, _ = select_tree(*source.pool(copied, root=3), 4)
    assert tokens.tolist() == [3, 4, 5, 6]
    source.record(DraftTree(tokens, parents), np.ones(4, dtype=bool), path=[0, 1, 2, 3])  # all accepted
    assert source.streak and source.classes[(3, False)].rates()[1] > MATCH_CLASS_PRIORS[(3, False)][0]
    source.pool([7, 8, 9, 8], root=8)  # a 1-gram match, after an accepted draft: a class with no evidence yet
    prior = MATCH_CLASS_PRIORS[(1, True)]
    assert source.rates is source.classes[(1, True)] and source.rates.rates()[1:4].tolist() == pytest.approx(prior)
    source.record(DraftTree(np.array([8, 9]), np.array([-1, 0])), np.ones(2, dtype=bool), path=[0])  # rejected
    assert not source.streak and source.classes[(1, True)].rates()[1] < prior[0]
    source.reset()
    assert source.classes == {} and not source.streak


def test_lookup_starts_each_match_class_from_its_measured_prior():
    """Before any evidence a lone 1-gram match is scored far below a 3-gram match in a copied run (held-out
    figures: results/fast section 25); evidence moves a rate at the prior's weight of PRIOR_WEIGHT tries."""
    from mtpedge.runtime.drafters.lookup import PRIOR_WEIGHT, NgramSource

    source = NgramSource(3, 1, 5, 1)
    lone, copied = source.new_rates((1, False)), source.new_rates((3, True))
    assert lone.chain_scores(5)[0] < 0.3 < 0.7 < copied.chain_scores(5)[0]
    assert lone.rates()[3:].tolist() == [lone.rates()[3]] * 3  # the last prior depth repeats deeper
    lone.record(np.array([1]), np.array([True]), np.array([True]))
    assert lone.rates()[1] == pytest.approx((1 + 0.23 * PRIOR_WEIGHT) / (1 + PRIOR_WEIGHT))
    assert source.new_rates((0, False)).rates()[1] == 0.5  # no match: no candidates, Laplace's prior
    assert source.new_rates((5, True)).rates()[1] == copied.rates()[1]  # past 3 counts as 3


def test_depth_rates_default_to_laplace():
    rates = DepthRates(3)
    rates.record(np.array([1, 2]), np.array([True, True]), np.array([True, False]))
    assert rates.rates().tolist() == [1.0, 2 / 3, 1 / 3, 0.5]


@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.integers(1, 3), st.integers(1, 5))
def test_ngram_continuations_match_brute_force(ctx, max_ngram, length):
    found = ngram_continuations(ctx, max_ngram, 1, length, max_matches=1)
    expected = []
    for n in range(min(max_ngram, len(ctx) - 1), 0, -1):
        starts = [i for i in range(len(ctx) - n) if ctx[i: i + n] == ctx[-n:]]
        if starts:
            expected = [ctx[starts[-1] + n: starts[-1] + n + length]]
            break
    assert [c.tolist() for c in found] == expected


def test_mask_inits_and_online_update():
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    prompt = [0, 2, 4]
    soft = initial_masks(MaskConfig("soft", 2), table, prompt)
    assert np.allclose(soft, [table[prompt].mean(0)] * 2)
    hard = initial_masks(MaskConfig("hard", 2), table, prompt)
    assert np.array_equal(hard, table[[2, 4]])
    assert np.array_equal(initial_masks(MaskConfig("hard", 3), table, [1])[:, 0], [4, 4, 4])
    mean = initial_masks(MaskConfig("mean", 1), table, prompt)
    assert np.allclose(mean, table.mean(0))
    a = initial_masks(MaskConfig("sample", 2, seed=5), table, prompt)
    assert np.array_equal(a, initial_masks(MaskConfig("sample", 2, seed=5), table, prompt))
    assert not np.array_equal(a, initial_masks(MaskConfig("sample", 2, seed=6), table, prompt))
    # closed-form update == the loop m <- m + lam (e - m)
    m = soft.astype(np.float64)
    for row in table[[1, 3, 3]]:
        m = m + 0.1 * (row - m)
    assert np.allclose(updated_masks(soft, table[[1, 3, 3]], 0.1), m, atol=1e-5)
    assert np.array_equal(updated_masks(soft, table[[1]], 0.0), soft)
    for bad in (dict(init="zero"), dict(slots=4), dict(update_rate=1.5)):
        with pytest.raises(ValueError):
            MaskConfig(**bad)


def test_templates_are_the_runtime_layouts():
    templates = default_templates([1, 4, 8, 16, 32])
    assert {(t.width, t.masks) for t in templates} >= {(16, 1), (16, 2), (16, 3), (32, 1), (4, 1)}
    assert all(t.width != 1 for t in templates)  # width 1 holds no draft
    for t in templates:
        assert check_template(t) is None
        assert len(t.parents) <= t.width
        layout = tree_layout(np.array(t.parents))
        assert np.array_equal(t.visible_matrix(), layout.visible) and t.depth == tuple(layout.depth.tolist())
        assert type(t).from_json(t.to_json()) == t
    t16 = make_template(16, 1, [7])
    assert t16.name == "esp_w16_k1" and len(t16.parents) == 16
    broken = type(t16)(**{**t16.__dict__, "visible": ("1" * 16,) * 16})
    assert "attention rows" in check_template(broken)
    with pytest.raises(ValueError, match="needs 18 slots"):
        make_template(16, 1, [8])


def naive_block_inputs(n_past: int, visible: np.ndarray, width: int, context: int, mask_value: float):
    """The test oracle, element by element (runtime/contract.py): real row i takes column n_past + i and sees
    the committed columns and the columns of the nodes it sees; padding rows share column n_past + n and see it only."""
    n = visible.shape[0]
    slots = np.array([[n_past + i if i < n else n_past + n for i in range(width)]], dtype=np.int64)
    bias = np.full((1, 1, width, context), mask_value, dtype=np.float32)
    for row in range(width):
        for column in range(context):
            if row < n:
                seen = column < n_past or (n_past <= column < n_past + n and visible[row, column - n_past])
            else:
                seen = column == n_past + n
            if seen:
                bias[0, 0, row, column] = 0.0
    return bias, slots


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8), st.integers(0, 3)), min_size=1, max_size=12))
def test_cached_bias_equals_naive_bias(steps):
    """Any sequence of (n_past, tree size, shape) gives the bias and slots of the element-by-element oracle."""
    width, context = 8, 48
    cached = CachedAttentionBias(width, context, -1e9)
    for n_past, n, shape in steps:
        parents = np.array([-1] + [max(0, i - 1 - shape) for i in range(1, n)])
        visible = tree_layout(parents).visible
        bias, slots = cached.fill(n_past, visible, (parents.tobytes()))
        want_bias, want_slots = naive_block_inputs(n_past, visible, width, context, -1e9)
        assert np.array_equal(slots, want_slots)
        assert np.array_equal(block_inputs(n_past, visible, width, context, -1e9)[0], want_bias)
        assert np.array_equal(bias, want_bias)
