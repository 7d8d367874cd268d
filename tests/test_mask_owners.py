"""Mask slots under some token nodes only: the layout, and the hybrid's split of the width by expected value."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mtpedge.runtime.tree import SLOT, tree_layout
from mtpedge.runtime.tree_build import (
    attach_mask_slots,
    mask_owners_by_value,
    mask_slot_index,
    select_tree_scored,
    subtree,
)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_slots_under_chosen_owners_see_their_owner_path_only(data):
    size = data.draw(st.integers(1, 9))
    parents = np.array([-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, size)])
    k = data.draw(st.integers(1, 3))
    owners = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1)))), dtype=np.int64)
    tree = attach_mask_slots(np.arange(size), parents, k, owners)
    layout = tree_layout(tree.parents)
    assert len(tree) == size + owners.size * k and (tree.tokens[size:] == SLOT).all()
    assert not layout.visible[:size, size:].any()
    for owner in range(size):
        slots = mask_slot_index(size, owner, k, owners)
        if owner not in owners:
            assert slots is None
            continue
        for j, slot in enumerate(slots):
            expected = set(np.flatnonzero(layout.visible[owner])) | set(slots[: j + 1].tolist())
            assert set(np.flatnonzero(layout.visible[slot])) == expected
            assert layout.depth[slot] == layout.depth[owner] + j + 1


def brute_split(parents, scores, width, k, gain):
    """Reference: for every n, keep the n best nodes, masks on the owners most likely to end the path."""
    size = len(parents)
    depth = [0] * size
    for i in range(1, size):
        depth[i] = depth[parents[i]] + 1
    ranked = sorted(range(size), key=lambda i: (-scores[i], depth[i], i))
    best = None
    for n in range(1, min(size, width) + 1):
        kept = ranked[:n]
        deepest = {i: scores[i] - sum(scores[c] for c in kept if c and parents[c] == i) for i in kept}
        room = min(n, (width - n) // k)
        owners = sorted(kept, key=lambda i: (-float(np.round(deepest[i], 12)), i))[:room]
        value = sum(scores[i] for i in kept) + gain * sum(max(deepest[i], 0.0) for i in owners)
        if best is None or value > best[0] + 1e-12:
            best = (value, sorted(kept), sorted(owners))
    return best


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_width_split_is_the_best_by_expected_value(data):
    size = data.draw(st.integers(1, 12))
    pool_parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, size)]
    pool_tokens = np.arange(size)  # distinct: no merging
    pool_scores = [1.0] + [data.draw(st.sampled_from([0.05, 0.2, 0.4, 0.7, 0.95])) for _ in range(1, size)]
    width = data.draw(st.integers(2, 16))
    k = data.draw(st.integers(1, 3))
    gain = data.draw(st.sampled_from([0.0, 0.3, 1.0, 4.0]))
    tokens, parents, _, scores = select_tree_scored(pool_tokens, np.array(pool_parents), np.array(pool_scores),
                                                    width)
    kept, owners = mask_owners_by_value(parents, scores, width, k, gain)
    value, want_kept, want_owners = brute_split(parents.tolist(), scores.tolist(), width, k, gain)
    assert kept.tolist() == want_kept and kept[owners].tolist() == want_owners
    assert kept.size + owners.size * k <= width
    sub_tokens, sub_parents = subtree(tokens, parents, kept)
    tree_layout(sub_parents)  # parents come first: the kept nodes are closed under parents
    for i in range(1, kept.size):
        assert parents[kept[i]] == kept[sub_parents[i]]
    assert sub_tokens.tolist() == tokens[kept].tolist()


def test_confident_chain_takes_the_width_and_masks_go_where_it_ends():
    parents = np.array([-1, 0, 1, 2, 3, 4, 5, 0])
    scores = np.array([1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.05])
    kept, owners = mask_owners_by_value(parents, scores, width=8, k=1, gain=0.4)
    assert kept.tolist() == [0, 1, 2, 3, 4, 5, 6] and kept[owners].tolist() == [6]
    kept, owners = mask_owners_by_value(parents, scores, width=8, k=1, gain=5.0)  # forecasts worth more
    assert kept.tolist() == [0, 1, 2, 3] and owners.tolist() == [0, 1, 2, 3]
