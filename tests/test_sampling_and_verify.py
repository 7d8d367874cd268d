"""Choosing tokens (greedy, temperature, top-k, top-p, min-p) and verifying a tree against those choices."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.runtime.sampling import (
    DEFAULT_MIN_P,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    NonFiniteLogitsError,
    Sampler,
    SamplingConfig,
    probabilities,
)
from mtpedge.runtime.tree import SLOT, DraftTree
from mtpedge.runtime.verify import accepted_tokens, untrusted_extension, verify_tree


def test_greedy_is_argmax_and_the_first_of_equal_maxima():
    sampler = Sampler(SamplingConfig())
    assert sampler.choose(np.array([0.1, 3.0, 3.0, -1.0])) == 1


def test_top_k_keeps_only_the_k_best():
    probs = probabilities(np.array([1.0, 4.0, 3.0, 2.0]), SamplingConfig(temperature=1.0, top_k=2))
    assert (probs > 0).tolist() == [False, True, True, False]
    assert probs.sum() == pytest.approx(1.0)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    probs = probabilities(logits, SamplingConfig(temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(probs, [0.5 / 0.8, 0.3 / 0.8, 0, 0])
    probs = probabilities(logits, SamplingConfig(temperature=1.0, top_p=0.5))
    np.testing.assert_allclose(probs, [1, 0, 0, 0])


def test_temperature_sharpens_and_flattens():
    logits = np.array([2.0, 1.0, 0.0])
    cold = probabilities(logits, SamplingConfig(temperature=0.5))
    hot = probabilities(logits, SamplingConfig(temperature=2.0))
    assert cold[0] > probabilities(logits, SamplingConfig(temperature=1.0))[0] > hot[0]


def test_seeded_sampling_repeats_and_follows_the_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1]))
    draws = [Sampler(SamplingConfig(temperature=1.0, seed=7)).choose(logits) for _ in range(3)]
    assert len(set(draws)) == 1
    sampler = Sampler(SamplingConfig(temperature=1.0, seed=1))
    counts = np.bincount([sampler.choose(logits) for _ in range(6000)], minlength=3) / 6000
    np.testing.assert_allclose(counts, [0.6, 0.3, 0.1], atol=0.03)


def test_min_p_keeps_tokens_at_least_min_p_times_as_likely_as_the_best():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    probs = probabilities(logits, SamplingConfig(temperature=1.0, min_p=0.2))  # threshold 0.1
    np.testing.assert_allclose(probs, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])
    probs = probabilities(logits, SamplingConfig(temperature=1.0, min_p=0.7))
    np.testing.assert_allclose(probs, [1, 0, 0, 0])


def test_unset_truncation_gets_the_llama_cpp_defaults_when_sampling():
    sampled = SamplingConfig.with_defaults(0.8, seed=3)
    assert (sampled.top_k, sampled.top_p, sampled.min_p, sampled.seed) == (DEFAULT_TOP_K, DEFAULT_TOP_P,
                                                                            DEFAULT_MIN_P, 3)
    assert (DEFAULT_TOP_K, DEFAULT_TOP_P, DEFAULT_MIN_P) == (40, 0.95, 0.05)
    # a setting that is given is kept, 0 / 1.0 included (they switch that truncation off)
    given = SamplingConfig.with_defaults(0.8, top_k=0, top_p=1.0, min_p=0.0)
    assert (given.top_k, given.top_p, given.min_p) == (0, 1.0, 0.0)
    assert SamplingConfig.with_defaults(0.0) == SamplingConfig()  # greedy: truncation means nothing


def test_a_long_tail_is_cut_by_the_defaults():
    # one likely token and 49k unlikely ones, as a chat model's logits look: without truncation the tail
    # together outweighs the answer; with the defaults only the head can be drawn
    logits = np.full(49152, -2.0)
    logits[[7, 8]] = [8.0, 6.5]
    plain = probabilities(logits, SamplingConfig(temperature=1.0))
    assert plain[[7, 8]].sum() < 0.5
    default = probabilities(logits, SamplingConfig.with_defaults(1.0))
    assert set(np.flatnonzero(default)) == {7, 8}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logits_that_are_not_numbers_stop_with_a_clear_error(bad, temperature):
    logits = np.array([0.5, 2.0, bad, 1.0], dtype=np.float32)
    with pytest.raises(NonFiniteLogitsError, match="not numbers.*mtpedge verify"):
        Sampler(SamplingConfig(temperature=temperature, seed=0)).choose(logits)
    with pytest.raises(NonFiniteLogitsError):
        Sampler(SamplingConfig()).choose(np.full(4, -np.inf, dtype=np.float32))


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"temperature": float("nan")}, {"top_k": -2},
                                    {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": -0.1}, {"min_p": 1.0}])
def test_bad_sampling_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def one_hot_logits(choices, vocab=10):
    logits = np.zeros((len(choices), vocab), dtype=np.float32)
    logits[np.arange(len(choices)), choices] = 1.0
    return logits


def greedy(row):
    return int(np.argmax(row))


def test_verify_walks_the_matching_branch_and_returns_the_bonus_token():
    #        root(5)
    #       /       \
    #     a(6)      b(7)
    #     |          |
    #     c(8)      d(9)
    tree = DraftTree([5, 6, 7, 8, 9], [-1, 0, 0, 1, 2])
    # the model picks 7 after root, 9 after b, then 3
    logits = one_hot_logits([7, 0, 9, 0, 3])
    path, bonus = verify_tree(tree, logits, greedy)
    assert path == [0, 2, 4] and bonus == 3
    assert accepted_tokens(tree, path).tolist() == [7, 9]


def test_verify_rejects_at_the_first_mismatch():
    tree = DraftTree([5, 6, 8], [-1, 0, 1])
    path, bonus = verify_tree(tree, one_hot_logits([4, 8, 1]), greedy)
    assert path == [0] and bonus == 4


def test_verify_never_accepts_a_slot_node():
    tree = DraftTree([5, SLOT, 6], [-1, 0, 0])
    logits = one_hot_logits([0, 0, 2])  # argmax 0 after the root; SLOT is -1, never chosen, so no match
    path, bonus = verify_tree(tree, logits, greedy)
    assert path == [0] and bonus == 0


def test_only_trusted_rows_accept_and_the_untrusted_path_beyond_becomes_the_next_drafts():
    #   root(5) -- a(6)            the leading chain: rows 0-1 trusted
    #       \---- b(7) -- d(9)     a sibling: rows 2-3 are not plain decoding's
    tree = DraftTree([5, 6, 7, 9], [-1, 0, 0, 2])
    logits = one_hot_logits([7, 0, 9, 4])  # the model picks b, then d, then 4
    path, bonus = verify_tree(tree, logits, greedy, trusted=2)
    assert path == [0] and bonus == 7  # b is not accepted: its token is the next root
    nodes, drafts = untrusted_extension(tree, logits, path, bonus, trusted=2)
    assert nodes == [2, 3] and drafts == [9, 4]  # what b's and d's rows say follows: drafts, not output
    assert untrusted_extension(tree, logits, *verify_tree(tree, logits, greedy), trusted=4) == ([], [])
    mismatch = one_hot_logits([3, 0, 9, 4])  # the walk stopped at a mismatch, not at an untrusted match
    assert untrusted_extension(tree, mismatch, *verify_tree(tree, mismatch, greedy, trusted=2), trusted=2) == ([], [])


def test_plain_decoding_is_verification_of_a_one_node_tree():
    path, bonus = verify_tree(DraftTree.single(5), one_hot_logits([2]), greedy)
    assert path == [0] and bonus == 2


def test_generate_and_chat_flags_leave_truncation_to_the_defaults():
    import argparse

    from mtpedge.generate_cmd import add_arguments, sampling_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert sampling_from(parser.parse_args(["hi", "--temperature", "0.7", "--seed", "2"])) == \
        SamplingConfig(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=2)
    given = parser.parse_args(["hi", "--temperature", "0.7", "--top-k", "0", "--top-p", "0.5", "--min-p", "0.1"])
    assert sampling_from(given) == SamplingConfig(temperature=0.7, top_k=0, top_p=0.5, min_p=0.1)
    assert sampling_from(parser.parse_args(["hi"])) == SamplingConfig()
