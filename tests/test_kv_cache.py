"""The host KV cache: fixed buffers, commit by gathering accepted slots, a clear overflow error."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.runtime.kv_cache import ContextOverflowError, KVCache


def block(layers, heads, width, dim, offset):
    """Per-layer K/V blocks whose every value encodes (layer, slot) so gathers can be read back."""
    keys, values = [], []
    for layer in range(layers):
        k = np.zeros((1, heads, width, dim), dtype=np.float32)
        k[...] = (offset + layer * 100 + np.arange(width))[None, None, :, None]
        keys.append(k)
        values.append(-k)
    return keys, values


def test_commit_gathers_the_accepted_slots_in_order():
    cache = KVCache(num_layers=2, num_kv_heads=3, context=10, head_dim=4)
    keys, values = block(2, 3, 6, 4, offset=0)
    cache.commit_accepted_kv(keys, values, [0, 2, 5])
    assert cache.n_past == 3
    for layer in range(2):
        np.testing.assert_array_equal(cache.keys[layer][0, :, :3, 0], [[layer * 100 + s for s in (0, 2, 5)]] * 3)
        np.testing.assert_array_equal(cache.values[layer][0, :, :3, 0], -cache.keys[layer][0, :, :3, 0])
    keys, values = block(2, 3, 4, 4, offset=1000)
    cache.commit_accepted_kv(keys, values, [3])
    assert cache.n_past == 4
    assert cache.keys[1][0, 0, 3, 0] == 1000 + 100 + 3


def test_graph_inputs_are_the_buffers_themselves():
    cache = KVCache(num_layers=2, num_kv_heads=1, context=8, head_dim=2)
    inputs = cache.graph_inputs()
    assert list(inputs) == ["past_key_0", "past_value_0", "past_key_1", "past_value_1"]
    assert inputs["past_key_1"] is cache.keys[1]  # no copy per call
    assert inputs["past_key_0"].flags.c_contiguous


def test_overflow_is_an_error_that_says_what_to_do():
    cache = KVCache(num_layers=1, num_kv_heads=1, context=4, head_dim=2)
    keys, values = block(1, 1, 4, 2, 0)
    cache.commit_accepted_kv(keys, values, [0, 1, 2])
    with pytest.raises(ContextOverflowError, match="context is 4.*--context"):
        cache.commit_accepted_kv(keys, values, [0, 1])
    assert cache.n_past == 3  # nothing half-written


def test_reset_and_truncate():
    cache = KVCache(num_layers=1, num_kv_heads=1, context=4, head_dim=2)
    keys, values = block(1, 1, 4, 2, 0)
    cache.commit_accepted_kv(keys, values, [0, 1, 2])
    cache.truncate(1)
    assert cache.n_past == 1 and cache.free == 3
    with pytest.raises(ValueError):
        cache.truncate(2)
    cache.reset()
    assert cache.n_past == 0


def test_buckets_move_up_with_the_filled_rows_and_back_down_on_reset():
    cache = KVCache(num_layers=2, num_kv_heads=1, context=16, head_dim=2, buckets=(4, 8))
    assert cache.buckets == [4, 8, 16] and cache.capacity == 4
    keys, values = block(2, 1, 4, 2, offset=0)
    cache.commit_accepted_kv(keys, values, [0, 1, 2])
    assert cache.capacity == 4 and cache.graph_inputs()["past_key_0"].shape == (1, 1, 4, 2)
    cache.commit_accepted_kv(keys, values, [3, 2])  # 5 positions: the 8 bucket
    assert cache.capacity == 8 and cache.graph_inputs()["past_value_1"].shape == (1, 1, 8, 2)
    np.testing.assert_array_equal(cache.keys[1][0, 0, :5, 0], [100, 101, 102, 103, 102])
    np.testing.assert_array_equal(cache.values[0][0, 0, :5, 0], [0, -1, -2, -3, -2])
    cache.reserve(100)  # more than the context: the largest bucket, no error (commit checks the room)
    assert cache.capacity == 16
    np.testing.assert_array_equal(cache.keys[0][0, 0, :5, 0], [0, 1, 2, 3, 2])
    cache.reset()
    assert cache.capacity == 4 and cache.n_past == 0


def test_buckets_outside_the_context_are_refused():
    with pytest.raises(ValueError, match=r"buckets must lie in \[1, 8\]"):
        KVCache(num_layers=1, num_kv_heads=1, context=8, head_dim=2, buckets=(4, 16))


def test_rows_the_graph_wrote_in_place_are_not_copied_but_the_rest_of_the_path_is():
    cache = KVCache(num_layers=2, num_kv_heads=1, context=10, head_dim=2)
    cache.n_past = 2
    for layer in range(2):  # what an in-place graph leaves: block rows 0..3 at columns 2..5
        cache.keys[layer][0, 0, 2:6] = -7.0
    keys, values = block(2, 1, 4, 2, offset=0)
    cache.commit_accepted_kv(keys, values, [0, 1, 3], rows_in_cache=4)  # slots 0, 1 sit at their columns
    assert cache.n_past == 5
    np.testing.assert_array_equal(cache.keys[1][0, 0, 2:6, 0], [-7, -7, 103, -7])  # only slot 3 moved
    cache.commit_accepted_kv(keys, values, [0, 1], rows_in_cache=0)  # a graph that wrote nothing: all copied
    np.testing.assert_array_equal(cache.keys[0][0, 0, 5:7, 0], [0, 1])


def test_rows_in_place_in_a_smaller_bucket_are_copied_when_the_commit_moves_up():
    cache = KVCache(num_layers=1, num_kv_heads=1, context=16, head_dim=2, buckets=(4,))
    cache.n_past = 2
    keys, values = block(1, 1, 4, 2, offset=10)
    cache.commit_accepted_kv(keys, values, [0, 1, 2], rows_in_cache=3)  # 5 positions: the 16 bucket
    assert cache.capacity == 16
    np.testing.assert_array_equal(cache.keys[0][0, 0, 2:5, 0], [10, 11, 12])
