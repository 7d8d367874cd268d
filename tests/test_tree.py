"""tree_layout is the one place that turns a draft tree into attention rows, positions and paths.

Checked against a direct oracle (walk each node's parent chain) on every tree of up to 7 nodes, and on
random larger trees with hypothesis.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtpedge.runtime.tree import SLOT, DraftTree, tree_layout


def ancestors_or_self(parents, i):
    chain = []
    while i != -1:
        chain.append(i)
        i = parents[i]
    return chain


def oracle(parents):
    n = len(parents)
    visible = np.zeros((n, n), dtype=bool)
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        chain = ancestors_or_self(parents, i)
        visible[i, chain] = True
        depth[i] = len(chain) - 1
    leaves = [i for i in range(n) if i not in parents[1:]]
    paths = tuple(tuple(reversed(ancestors_or_self(parents, leaf))) for leaf in leaves)
    return visible, depth, paths


def all_trees(max_nodes):
    """Every topologically ordered parent array with up to max_nodes nodes."""
    for n in range(1, max_nodes + 1):
        for choice in itertools.product(*[range(i) for i in range(1, n)]):
            yield [-1, *choice]


def test_every_small_tree_matches_the_oracle():
    count = 0
    for parents in all_trees(7):
        layout = tree_layout(np.array(parents))
        visible, depth, paths = oracle(parents)
        np.testing.assert_array_equal(layout.visible, visible)
        np.testing.assert_array_equal(layout.depth, depth)
        assert layout.paths == paths
        count += 1
    assert count == 1 + 1 + 2 + 6 + 24 + 120 + 720


@st.composite
def parent_arrays(draw):
    n = draw(st.integers(1, 60))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


@settings(max_examples=300, deadline=None)
@given(parent_arrays())
def test_random_trees_match_the_oracle(parents):
    layout = tree_layout(np.array(parents))
    visible, depth, paths = oracle(parents)
    np.testing.assert_array_equal(layout.visible, visible)
    np.testing.assert_array_equal(layout.depth, depth)
    assert layout.paths == paths


@settings(max_examples=200, deadline=None)
@given(parent_arrays())
def test_layout_invariants(parents):
    layout = tree_layout(np.array(parents))
    n = len(parents)
    assert layout.visible.diagonal().all()  # every node sees itself
    assert layout.visible[:, 0].all()  # and the root
    assert not np.triu(layout.visible, 1).any()  # never a later node
    np.testing.assert_array_equal(layout.visible.sum(1), layout.depth + 1)
    covered = sorted({i for path in layout.paths for i in path})
    assert covered == list(range(n))  # every node lies on some root-to-leaf path


def test_plain_decoding_is_a_tree_of_one_node():
    layout = tree_layout(np.array([-1]))
    assert layout.visible.tolist() == [[True]]
    assert layout.depth.tolist() == [0]
    assert layout.paths == ((0,),)


def test_a_chain_is_causal_attention():
    layout = tree_layout(np.arange(-1, 9))
    np.testing.assert_array_equal(layout.visible, np.tril(np.ones((10, 10), dtype=bool)))
    np.testing.assert_array_equal(layout.depth, np.arange(10))


@pytest.mark.parametrize(
    "parents, message",
    [
        ([], "at least a root"),
        ([0], "parents\\[0\\] must be -1"),
        ([-1, 1], "earlier node"),
        ([-1, 0, 3, 1], "earlier node"),
        ([-1, -1], "earlier node"),
    ],
)
def test_malformed_parents_are_refused(parents, message):
    with pytest.raises(ValueError, match=message):
        tree_layout(np.array(parents, dtype=np.int64))


def test_draft_tree_checks_its_arrays():
    with pytest.raises(ValueError, match="equal 1-D shapes"):
        DraftTree([1, 2], [-1])
    with pytest.raises(ValueError, match="root of a draft tree must be a real token"):
        DraftTree([SLOT], [-1])
    tree = DraftTree([5, 6, 7, SLOT], [-1, 0, 0, 1])
    assert tree.children(0).tolist() == [1, 2]
    assert len(tree) == 4
