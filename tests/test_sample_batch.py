"""Tests of ``rlgear.SampleBatch``: a columnar dict of equal-length numpy arrays."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlgear import SampleBatch


def make_batch(n: int) -> SampleBatch:
    """Columns tied to each other row by row, so misalignment is detectable."""
    a = np.arange(n)
    return SampleBatch(
        a=a,
        b=10 * a,
        obs=np.stack([a, a + 1000], axis=1).astype(np.float32),  # [n, 2]
    )


def assert_rows_aligned(batch: SampleBatch) -> None:
    a = batch["a"]
    np.testing.assert_array_equal(batch["b"], 10 * a)
    np.testing.assert_array_equal(batch["obs"][:, 0], a)
    np.testing.assert_array_equal(batch["obs"][:, 1], a + 1000)


# ------------------------------------------------------------------ construction


def test_len_counts_rows_not_columns():
    batch = SampleBatch(a=np.arange(7), b=np.zeros((7, 3)), c=np.ones(7))
    assert len(batch) == 7
    assert batch.count == 7
    assert len(batch.columns) == 3


def test_empty_batch_has_no_rows():
    assert len(SampleBatch()) == 0
    assert len(SampleBatch(a=np.zeros(0))) == 0


def test_constructor_accepts_mapping_and_keywords_and_converts_to_numpy():
    batch = SampleBatch({"a": [1, 2, 3]}, b=(4, 5, 6))
    assert set(batch) == {"a", "b"}
    assert all(isinstance(v, np.ndarray) for v in batch.values())
    np.testing.assert_array_equal(batch["b"], [4, 5, 6])


def test_columns_of_different_lengths_raise_value_error():
    with pytest.raises(ValueError):
        SampleBatch(a=np.arange(3), b=np.arange(4))


def test_column_names_match_rllib_names():
    assert SampleBatch.OBS == "obs"
    assert SampleBatch.ACTIONS == "actions"
    assert SampleBatch.ADVANTAGES == "advantages"
    assert SampleBatch.VALUE_TARGETS == "value_targets"


# ------------------------------------------------------------------------ concat


def test_concat_appends_rows_in_order():
    first, second = make_batch(3), make_batch(5).slice(2, 5)
    out = SampleBatch.concat([first, second])
    assert isinstance(out, SampleBatch)
    assert len(out) == 6
    np.testing.assert_array_equal(out["a"], [0, 1, 2, 2, 3, 4])
    assert out["obs"].shape == (6, 2)
    assert_rows_aligned(out)


def test_concat_skips_empty_batches():
    out = SampleBatch.concat([SampleBatch(), make_batch(2), SampleBatch(), make_batch(3)])
    np.testing.assert_array_equal(out["a"], [0, 1, 0, 1, 2])


def test_concat_of_nothing_is_empty():
    assert len(SampleBatch.concat([])) == 0


def test_concat_with_mismatched_columns_raises_value_error():
    with pytest.raises(ValueError):
        SampleBatch.concat([SampleBatch(a=np.arange(2)), SampleBatch(b=np.arange(2))])
    with pytest.raises(ValueError):
        SampleBatch.concat([make_batch(2), SampleBatch(a=np.arange(2))])


# -------------------------------------------------------------- slice and select


def test_slice_takes_rows_start_to_end_of_every_column():
    out = make_batch(10).slice(3, 7)
    assert isinstance(out, SampleBatch)
    assert len(out) == 4
    np.testing.assert_array_equal(out["a"], [3, 4, 5, 6])
    assert_rows_aligned(out)


def test_select_with_boolean_mask():
    batch = make_batch(6)
    out = batch.select(batch["a"] % 2 == 0)
    np.testing.assert_array_equal(out["a"], [0, 2, 4])
    assert_rows_aligned(out)


def test_select_with_index_array_keeps_given_order_and_repeats():
    out = make_batch(6).select(np.array([5, 0, 0, 3]))
    np.testing.assert_array_equal(out["a"], [5, 0, 0, 3])
    assert len(out) == 4
    assert_rows_aligned(out)


# ----------------------------------------------------------------------- shuffle


def test_shuffle_keeps_rows_aligned_across_columns():
    batch = make_batch(50)
    out = batch.shuffle(np.random.default_rng(0))
    assert_rows_aligned(out)
    assert sorted(out["a"].tolist()) == list(range(50))  # a permutation of the rows
    assert not np.array_equal(out["a"], np.arange(50))  # ... and not the identity


def test_shuffle_is_deterministic_for_a_seed():
    batch = make_batch(50)
    one = batch.shuffle(np.random.default_rng(123))
    two = batch.shuffle(np.random.default_rng(123))
    other = batch.shuffle(np.random.default_rng(124))
    np.testing.assert_array_equal(one["a"], two["a"])
    assert not np.array_equal(one["a"], other["a"])


def test_shuffle_leaves_the_original_untouched():
    batch = make_batch(20)
    batch.shuffle(np.random.default_rng(0))
    np.testing.assert_array_equal(batch["a"], np.arange(20))


# ------------------------------------------------------------------- minibatches


@pytest.mark.parametrize(("n", "size"), [(10, 3), (12, 4), (7, 7), (5, 8)])
def test_shuffled_minibatches_cover_every_row_exactly_once(n, size):
    batch = make_batch(n)
    mbs = list(batch.minibatches(size, rng=np.random.default_rng(0)))
    for mb in mbs:
        assert isinstance(mb, SampleBatch)
        assert_rows_aligned(mb)
    seen = np.concatenate([mb["a"] for mb in mbs])
    assert sorted(seen.tolist()) == list(range(n))


def test_minibatches_are_shuffled_when_given_an_rng():
    mbs = list(make_batch(40).minibatches(10, rng=np.random.default_rng(1)))
    seen = np.concatenate([mb["a"] for mb in mbs])
    assert not np.array_equal(seen, np.arange(40))


def test_minibatches_without_rng_are_consecutive():
    mbs = list(make_batch(7).minibatches(3))
    assert [mb["a"].tolist() for mb in mbs] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize(("n", "size", "expected"), [(10, 3, [3, 3, 3, 1]), (12, 4, [4, 4, 4]), (2, 5, [2])])
def test_minibatch_sizes_include_a_smaller_last_one(n, size, expected):
    mbs = make_batch(n).minibatches(size, rng=np.random.default_rng(0))
    assert [len(mb) for mb in mbs] == expected


@pytest.mark.parametrize(("n", "size", "expected"), [(10, 3, [3, 3, 3]), (12, 4, [4, 4, 4]), (2, 5, [])])
def test_minibatches_drop_last_drops_the_short_one(n, size, expected):
    mbs = list(make_batch(n).minibatches(size, rng=np.random.default_rng(0), drop_last=True))
    assert [len(mb) for mb in mbs] == expected
    seen = np.concatenate([mb["a"] for mb in mbs]) if mbs else np.array([], dtype=int)
    assert len(set(seen.tolist())) == len(seen)  # still no row twice


@pytest.mark.parametrize("size", [0, -1])
def test_minibatches_with_non_positive_size_raise_value_error(size):
    with pytest.raises(ValueError):
        list(make_batch(4).minibatches(size))


# ------------------------------------------------------------------ copy, pickle


def test_copy_is_independent_of_the_original():
    batch = make_batch(5)
    dup = batch.copy()
    assert isinstance(dup, SampleBatch)
    dup["a"][0] = 99
    dup["obs"][1, 1] = -1.0
    assert batch["a"][0] == 0
    assert batch["obs"][1, 1] == 1001.0
    batch["b"][2] = -5
    assert dup["b"][2] == 20


def test_pickle_round_trip_preserves_type_and_content():
    batch = make_batch(4)
    out = pickle.loads(pickle.dumps(batch))
    assert isinstance(out, SampleBatch)
    assert set(out) == set(batch)
    for key in batch:
        np.testing.assert_array_equal(out[key], batch[key])
        assert out[key].dtype == batch[key].dtype
