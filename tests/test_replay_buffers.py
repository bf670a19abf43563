"""Tests of ``rlgear.blocks.replay_buffers``: uniform and prioritized replay, n-step transitions.

Statistical checks draw with a fixed seed and compare each item's count with
its binomial expectation ``N p`` within 5 standard deviations
``sqrt(N p (1 - p))``: loose enough never to flake with another seed, tight
enough that the wrong distribution (e.g. ``p`` instead of ``p**alpha``) fails
by dozens of deviations.

n-step layout reminder (docs/architecture.md, "Fragments and rows" and
"TimeStep semantics"): fragments are
time-major ``[T+1, B]``; ``rewards[t]`` and ``discounts[t]`` arrive *with* step
``t``; fragment discounts are raw env discounts (0 at a terminated LAST, 1
otherwise); row ``T`` only supplies the bootstrap observation.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import (
    BATCH_INDEXES,
    NEXT_OBS,
    WEIGHTS,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
    n_step_transitions,
)
from rlgear.sample_batch import SampleBatch
from rlgear.timestep import StepType
from rlgear.value_ops import discounted_return, generalized_advantage_estimation

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def rows(start: int, count: int) -> SampleBatch:
    """Rows numbered ``start ..``: ``a`` (int64), ``b = 10 a`` (float32), ``obs = [a, -a]`` (float32)."""
    a = np.arange(start, start + count, dtype=np.int64)
    return SampleBatch(
        a=a,
        b=(10 * a).astype(np.float32),
        obs=np.stack([a, -a], axis=1).astype(np.float32),
    )


def assert_binomial_counts(samples: np.ndarray, probabilities: np.ndarray) -> None:
    """Each item's count is within 5 binomial standard deviations of ``N p``."""
    n = samples.size
    counts = np.bincount(samples, minlength=probabilities.size)
    expected = n * probabilities
    tolerance = 5 * np.sqrt(n * probabilities * (1 - probabilities))
    assert counts.size == probabilities.size, f"sampled items outside the buffer: {counts}"
    assert np.all(np.abs(counts - expected) <= tolerance), (
        f"counts {counts.tolist()} vs expected {expected.round(1).tolist()} (tolerance {tolerance.round(1).tolist()})"
    )


def stored_a(buffer: ReplayBuffer) -> np.ndarray:
    """Column ``a`` of the filled slots, in slot order."""
    arrays, _ = buffer.get_state()
    return arrays["columns/a"]


# --------------------------------------------------------------------------- uniform replay


def test_ring_overwrite_keeps_the_newest_capacity_rows():
    buffer = ReplayBuffer(capacity=5, seed=0)
    buffer.add(rows(0, 3))
    assert len(buffer) == 3
    for start in range(3, 9):
        buffer.add(rows(start, 1))
    assert len(buffer) == 5
    assert buffer.num_added == 9
    # Row i sits in slot i % capacity: rows 5..8 overwrote rows 0..3 in slots 0..3.
    np.testing.assert_array_equal(stored_a(buffer), [5, 6, 7, 8, 4])
    sampled = buffer.sample(200)
    assert set(sampled["a"].tolist()) == {4, 5, 6, 7, 8}
    np.testing.assert_array_equal(sampled[BATCH_INDEXES], sampled["a"] % 5)


def test_batch_larger_than_capacity_keeps_its_newest_rows_in_the_slots_sequential_adds_give():
    at_once = ReplayBuffer(capacity=4)
    at_once.add(rows(0, 3))
    slots = at_once.add(rows(3, 10))  # rows 3..12: only 9..12 survive
    one_by_one = ReplayBuffer(capacity=4)
    for start in range(13):
        one_by_one.add(rows(start, 1))
    np.testing.assert_array_equal(stored_a(at_once), [12, 9, 10, 11])
    np.testing.assert_array_equal(stored_a(at_once), stored_a(one_by_one))
    np.testing.assert_array_equal(slots, [1, 2, 3, 0])  # where rows 9, 10, 11, 12 went
    assert len(at_once) == 4
    assert at_once.get_state()[1]["next_index"] == one_by_one.get_state()[1]["next_index"] == 1


def test_sample_returns_aligned_rows_with_dtypes_and_shapes_kept():
    buffer = ReplayBuffer(capacity=64, seed=1)
    buffer.add(rows(0, 40))
    buffer.add(rows(40, 40))  # wraps around
    batch = buffer.sample(256)
    assert set(batch) == {"a", "b", "obs", BATCH_INDEXES}
    assert len(batch) == 256
    np.testing.assert_array_equal(batch["b"], 10 * batch["a"])
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["a"])
    np.testing.assert_array_equal(batch["obs"][:, 1], -batch["a"])
    np.testing.assert_array_equal(batch[BATCH_INDEXES], batch["a"] % 64)
    assert batch["a"].min() >= 16  # rows 0..15 were overwritten
    assert batch["b"].dtype == np.float32 and batch["obs"].shape == (256, 2)
    assert batch[BATCH_INDEXES].dtype == np.int64


def test_sampled_rows_are_copies_not_views_of_the_storage():
    buffer = ReplayBuffer(capacity=4, seed=0)
    buffer.add(rows(0, 4))
    batch = buffer.sample(8)
    batch["a"][:] = -1
    assert stored_a(buffer).tolist() == [0, 1, 2, 3]


def test_uniform_sample_frequencies_are_uniform_over_the_filled_slots():
    buffer = ReplayBuffer(capacity=16, seed=3)
    buffer.add(rows(0, 8))  # half full: slots 8..15 must never be drawn
    samples = np.concatenate([buffer.sample(50)[BATCH_INDEXES] for _ in range(800)])
    assert samples.max() < 8
    assert_binomial_counts(samples, np.full(8, 1 / 8))


def test_same_seed_gives_the_same_samples():
    first, second = ReplayBuffer(10, seed=7), ReplayBuffer(10, seed=7)
    for buffer in (first, second):
        buffer.add(rows(0, 10))
    np.testing.assert_array_equal(first.sample(32)["a"], second.sample(32)["a"])


def save_and_load(buffer: ReplayBuffer, tmp_path) -> tuple[dict[str, np.ndarray], dict]:
    """The state as a trainer checkpoints it: arrays through safetensors, meta through JSON."""
    from safetensors.numpy import load_file, save_file

    arrays, meta = buffer.get_state()
    save_file(arrays, str(tmp_path / "replay.safetensors"))
    return load_file(str(tmp_path / "replay.safetensors")), json.loads(json.dumps(meta))


def test_state_round_trip_restores_rows_positions_and_the_sampling_sequence(tmp_path):
    buffer = ReplayBuffer(capacity=6, seed=11)
    buffer.add(rows(0, 9))
    buffer.sample(5)  # advance the generator: the restored one must continue from here
    arrays, meta = save_and_load(buffer, tmp_path)
    restored = ReplayBuffer(capacity=6, seed=999)
    restored.set_state(arrays, meta)
    assert len(restored) == 6 and restored.num_added == 9
    for key in ("a", "b", "obs"):
        np.testing.assert_array_equal(restored.get_state()[0][f"columns/{key}"], arrays[f"columns/{key}"])
    expected, got = buffer.sample(20), restored.sample(20)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
        assert got[key].dtype == expected[key].dtype
    assert restored.add(rows(9, 1)).tolist() == buffer.add(rows(9, 1)).tolist() == [3]


def test_state_of_a_partly_filled_buffer_saves_only_the_filled_rows(tmp_path):
    buffer = ReplayBuffer(capacity=1000, seed=0)
    buffer.add(rows(0, 3))
    arrays, meta = save_and_load(buffer, tmp_path)
    assert arrays["columns/obs"].shape == (3, 2)
    restored = ReplayBuffer(capacity=1000)
    restored.set_state(arrays, meta)
    assert restored.add(rows(3, 1)).tolist() == [3]
    assert stored_a(restored).tolist() == [0, 1, 2, 3]


def test_state_of_an_empty_buffer_round_trips():
    arrays, meta = ReplayBuffer(capacity=3).get_state()
    assert arrays == {}
    restored = ReplayBuffer(capacity=3)
    restored.set_state(arrays, json.loads(json.dumps(meta)))
    assert len(restored) == 0
    restored.add(rows(0, 2))
    assert len(restored) == 2


def test_sampling_an_empty_buffer_raises_a_clear_error():
    with pytest.raises(ValueError, match="empty ReplayBuffer"):
        ReplayBuffer(capacity=4).sample(1)
    with pytest.raises(ValueError, match="empty PrioritizedReplayBuffer"):
        PrioritizedReplayBuffer(capacity=4).sample(1)


def test_adding_a_batch_with_other_columns_names_them():
    buffer = ReplayBuffer(capacity=4)
    buffer.add(rows(0, 2))
    other = rows(2, 2)
    other["extra"] = np.zeros(2)
    del other["b"]
    with pytest.raises(ValueError, match=r"missing: \['b'\], unexpected: \['extra'\]"):
        buffer.add(other)
    assert len(buffer) == 2  # nothing was written


def test_adding_rows_of_another_shape_or_a_lossy_dtype_raises():
    buffer = ReplayBuffer(capacity=4)
    buffer.add(rows(0, 2))
    wide = rows(2, 2)
    wide["obs"] = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="column 'obs' has rows of shape"):
        buffer.add(wide)
    floats = rows(2, 2)
    floats["a"] = np.array([2.5, 3.5])
    with pytest.raises(ValueError, match="column 'a' has dtype float64"):
        buffer.add(floats)


@pytest.mark.parametrize("capacity", [0, -3, 2.5])
def test_capacity_must_be_a_positive_integer(capacity):
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(capacity)


def test_num_items_must_be_positive():
    buffer = ReplayBuffer(capacity=4)
    buffer.add(rows(0, 2))
    with pytest.raises(ValueError, match="num_items"):
        buffer.sample(0)


def test_set_state_rejects_another_capacity_and_leaves_the_buffer_unchanged():
    source = ReplayBuffer(capacity=8)
    source.add(rows(0, 8))
    target = ReplayBuffer(capacity=4)
    target.add(rows(100, 2))
    with pytest.raises(ValueError, match="capacity 8, this buffer 4"):
        target.set_state(*source.get_state())
    assert stored_a(target).tolist() == [100, 101]


# --------------------------------------------------------------------------- sum tree


@pytest.mark.parametrize("seed", range(5))
def test_sum_tree_matches_brute_force_after_random_updates(seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.choice([1, 3, 8, 13, 100]))
    tree = SumTree(capacity)
    reference = np.zeros(capacity)
    touched = np.zeros(capacity, dtype=bool)
    for _ in range(30):
        indexes = rng.integers(0, capacity, size=int(rng.integers(1, 2 * capacity + 2)))  # repeats
        values = rng.integers(0, 20, size=indexes.size).astype(np.float64)
        tree.update(indexes, values)
        for index, value in zip(indexes, values, strict=True):  # sequential: last write wins
            reference[index] = value
            touched[index] = True
        np.testing.assert_array_equal(tree[np.arange(capacity)], reference)
        assert tree.total == reference.sum()
        assert tree.min == reference[touched].min()
    # Every internal node is the sum (and min) of its children.
    internal = np.arange(1, tree._leaf_start)
    np.testing.assert_array_equal(tree._sum[internal], tree._sum[2 * internal] + tree._sum[2 * internal + 1])
    np.testing.assert_array_equal(
        tree._min[internal], np.minimum(tree._min[2 * internal], tree._min[2 * internal + 1])
    )
    # Prefix-sum search agrees with a search over the cumulative sum (integer values: exact).
    if tree.total > 0:
        u = np.concatenate([rng.uniform(0, tree.total, 200), np.arange(int(tree.total))])
        expected = np.searchsorted(np.cumsum(reference), u, side="right")
        np.testing.assert_array_equal(tree.find_prefixsum_index(u), expected)
        assert np.all(reference[tree.find_prefixsum_index(u)] > 0)  # zero leaves are never found


def test_sum_tree_search_at_the_total_returns_the_last_positive_leaf():
    tree = SumTree(6)  # 8 leaves: 6 and 7 are unused padding
    tree.update(np.arange(5), [1.0, 0.1, 0.2, 0.3, 0.7])  # slot 5 stays 0
    assert tree.find_prefixsum_index([tree.total, np.nextafter(tree.total, 0)]).tolist() == [4, 4]


# --------------------------------------------------------------------------- prioritized replay


def filled_per(priorities: list[float], alpha: float = 0.6, beta: float = 0.4, seed: int = 0):
    buffer = PrioritizedReplayBuffer(capacity=len(priorities), alpha=alpha, beta=beta, eps=0.0, seed=seed)
    buffer.add(rows(0, len(priorities)))
    buffer.update_priorities(np.arange(len(priorities)), np.asarray(priorities))
    return buffer


def per_samples(buffer: PrioritizedReplayBuffer, total: int = 50_000, batch: int = 25) -> np.ndarray:
    return np.concatenate([buffer.sample(batch)[BATCH_INDEXES] for _ in range(total // batch)])


def test_prioritized_sampling_frequencies_follow_priorities_to_the_alpha():
    priorities = np.array([0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
    buffer = filled_per(priorities.tolist(), alpha=0.6, seed=0)
    samples = per_samples(buffer)
    assert_binomial_counts(samples, priorities**0.6 / (priorities**0.6).sum())
    batch = buffer.sample(16)
    np.testing.assert_array_equal(batch["b"], 10 * batch["a"])  # columns stay aligned
    np.testing.assert_array_equal(batch["a"], batch[BATCH_INDEXES])


def test_prioritized_sampling_follows_the_priorities_after_an_update():
    priorities = np.array([8.0, 5.0, 3.0, 2.0, 1.0, 0.5])
    buffer = filled_per(priorities[::-1].tolist(), alpha=0.8, seed=1)
    buffer.update_priorities(np.arange(6), priorities)
    assert_binomial_counts(per_samples(buffer), priorities**0.8 / (priorities**0.8).sum())


def test_sampling_is_stratified_one_draw_per_equal_segment_of_priority_mass():
    buffer = filled_per([3.0, 1.0], alpha=1.0, seed=3)
    # Mass 4 cut into 4 segments of 1: the first three lie in slot 0, the last in slot 1.
    for _ in range(20):
        assert buffer.sample(4)[BATCH_INDEXES].tolist() == [0, 0, 0, 1]


def test_alpha_zero_samples_uniformly():
    buffer = filled_per([0.1, 1.0, 10.0, 100.0], alpha=0.0, seed=2)
    assert_binomial_counts(per_samples(buffer, total=20_000), np.full(4, 0.25))


def test_importance_weights_equal_the_formula():
    priorities = np.array([1.0, 2.0, 4.0, 8.0, 3.0])
    alpha, beta = 0.7, 0.5
    buffer = filled_per(priorities.tolist(), alpha=alpha, beta=beta, seed=4)
    batch = buffer.sample(64)
    n = len(priorities)
    probabilities = priorities**alpha / (priorities**alpha).sum()
    raw = (n * probabilities[batch[BATCH_INDEXES]]) ** -beta
    max_weight = ((n * probabilities) ** -beta).max()
    np.testing.assert_allclose(batch[WEIGHTS], raw / max_weight, rtol=1e-6)
    assert batch[WEIGHTS].dtype == np.float32


def test_weights_are_normalised_by_the_max_weight_over_the_buffer_not_the_batch():
    # Slot 0 has a tiny priority: it is the max weight (1.0) but is rarely in a batch.
    alpha, beta = 0.6, 1.0
    buffer = filled_per([1e-3, 10.0, 10.0, 10.0], alpha=alpha, beta=beta, seed=5)
    batch = buffer.sample(8)
    others = batch[BATCH_INDEXES] != 0
    assert others.any()
    expected = (10.0 / 1e-3) ** (-alpha * beta)  # (p_i / p_min) ** (-alpha * beta)
    np.testing.assert_allclose(batch[WEIGHTS][others], expected, rtol=1e-6)
    assert batch[WEIGHTS][others].max() < 0.01  # a batch-wise max would have made these 1


def test_the_lowest_priority_row_has_weight_one():
    buffer = filled_per([2.0, 0.5, 4.0], alpha=1.0, beta=0.9, seed=6)
    batch = buffer.sample(300)
    assert 1 in batch[BATCH_INDEXES]
    np.testing.assert_allclose(batch[WEIGHTS][batch[BATCH_INDEXES] == 1], 1.0)
    assert np.all(batch[WEIGHTS][batch[BATCH_INDEXES] != 1] < 1.0)


def test_beta_passed_per_call_overrides_the_default():
    buffer = filled_per([1.0, 4.0, 9.0], alpha=1.0, beta=0.4, seed=7)
    assert np.all(buffer.sample(30, beta=0.0)[WEIGHTS] == 1.0)  # no correction at all
    batch = buffer.sample(30, beta=1.0)
    np.testing.assert_allclose(
        batch[WEIGHTS], 1.0 / np.array([1.0, 4.0, 9.0])[batch[BATCH_INDEXES]], rtol=1e-6
    )
    default = buffer.sample(30)
    np.testing.assert_allclose(
        default[WEIGHTS], np.array([1.0, 4.0, 9.0])[default[BATCH_INDEXES]] ** -0.4, rtol=1e-6
    )


def test_repeated_indexes_in_update_priorities_last_write_wins():
    buffer = PrioritizedReplayBuffer(capacity=4, alpha=0.5, eps=0.0)
    buffer.add(rows(0, 4))
    buffer.update_priorities([2, 0, 2, 2, 0], [1.0, 9.0, 5.0, 3.0, 2.0])
    np.testing.assert_array_equal(buffer.priorities(), [2.0, 1.0, 3.0, 1.0])
    assert buffer._tree.total == pytest.approx(np.sum(np.array([2.0, 1.0, 3.0, 1.0]) ** 0.5))
    assert buffer.max_priority == 3.0  # the overwritten 9.0 and 5.0 never landed


def test_new_rows_get_the_max_priority_recorded_so_far():
    buffer = PrioritizedReplayBuffer(capacity=5, alpha=0.5, eps=1e-6)
    buffer.add(rows(0, 2))
    np.testing.assert_array_equal(buffer.priorities(), [1.0, 1.0])  # nothing recorded yet
    buffer.update_priorities([0, 1], [0.5, 7.0])
    buffer.update_priorities([1], [0.2])  # lowering a row does not lower the max
    buffer.add(rows(2, 2))
    np.testing.assert_allclose(buffer.priorities(), [0.5 + 1e-6, 0.2 + 1e-6, 7.0 + 1e-6, 7.0 + 1e-6])
    assert buffer._tree[3] == pytest.approx((7.0 + 1e-6) ** 0.5)
    buffer.add(rows(4, 2))  # wraps: slot 0 now holds row 5 at the max priority
    assert buffer.priorities()[0] == pytest.approx(7.0 + 1e-6)
    assert buffer._tree.total == pytest.approx(np.sum(buffer.priorities() ** 0.5))


def test_sum_tree_total_matches_the_brute_force_sum_through_the_buffer_api():
    rng = np.random.default_rng(8)
    buffer = PrioritizedReplayBuffer(capacity=37, alpha=0.6, eps=1e-6, seed=8)
    for step in range(40):
        buffer.add(rows(step * 5, int(rng.integers(1, 9))))
        batch = buffer.sample(16)
        buffer.update_priorities(batch[BATCH_INDEXES], rng.exponential(size=16))
        assert buffer._tree.total == pytest.approx(np.sum(buffer.priorities() ** 0.6), rel=1e-12)
        assert buffer._tree.min == pytest.approx(np.min(buffer.priorities() ** 0.6), rel=1e-12)


@pytest.mark.parametrize(
    ("indexes", "priorities", "message"),
    [
        ([0, 1], [1.0, np.nan], "finite and > 0"),
        ([0, 1], [1.0, np.inf], "finite and > 0"),
        ([0], [-1.0], "finite and > 0"),
        ([0], [0.0], "finite and > 0"),  # eps=0 here
        ([0, 7], [1.0, 1.0], r"indexes \[7\] are not filled slots"),  # slot 7 is empty
        ([-1], [1.0], "not filled slots"),
        ([0, 1], [1.0], "2 indexes but 1 priorities"),
        ([0.0], [1.0], "must be integers"),
    ],
)
def test_update_priorities_rejects_bad_input_and_changes_nothing(indexes, priorities, message):
    buffer = PrioritizedReplayBuffer(capacity=10, eps=0.0)
    buffer.add(rows(0, 5))
    with pytest.raises(ValueError, match=message):
        buffer.update_priorities(np.asarray(indexes), np.asarray(priorities))
    np.testing.assert_array_equal(buffer.priorities(), np.ones(5))
    assert buffer.max_priority == 1.0


def test_eps_makes_a_zero_td_error_a_valid_priority():
    buffer = PrioritizedReplayBuffer(capacity=2, eps=1e-3)
    buffer.add(rows(0, 2))
    buffer.update_priorities([0], [0.0])
    assert buffer.priorities()[0] == pytest.approx(1e-3)


def test_prioritized_state_round_trip_restores_priorities_and_samples(tmp_path):
    buffer = PrioritizedReplayBuffer(capacity=8, alpha=0.6, seed=12)
    buffer.add(rows(0, 11))
    buffer.update_priorities(np.arange(8), np.linspace(0.1, 3.0, 8))
    arrays, meta = save_and_load(buffer, tmp_path)
    restored = PrioritizedReplayBuffer(capacity=8, alpha=0.6, seed=0)
    restored.set_state(arrays, meta)
    np.testing.assert_array_equal(restored.priorities(), buffer.priorities())
    assert restored.max_priority == buffer.max_priority
    expected, got = buffer.sample(10, beta=0.7), restored.sample(10, beta=0.7)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])


def test_a_uniform_buffer_state_cannot_restore_a_prioritized_buffer():
    source = ReplayBuffer(capacity=4)
    source.add(rows(0, 2))
    with pytest.raises(ValueError, match="has no priorities"):
        PrioritizedReplayBuffer(capacity=4).set_state(*source.get_state())


# --------------------------------------------------------------------------- n-step transitions

GAMMA = 0.5  # powers of 1/2 keep every expected sum exact in float32

# Env 0: terminated episode (LAST, discount 0 at t=2), truncated episode (LAST,
# discount 1 at t=5), then an episode cut by the fragment end (bootstrap row 7 is MID).
# Env 1: starts mid-episode, truncated at t=2, then an episode terminated exactly
# at the bootstrap row t=7.
STEP_TYPES = np.array(
    [
        [FIRST, MID],
        [MID, MID],
        [LAST, LAST],
        [FIRST, FIRST],
        [MID, MID],
        [LAST, MID],
        [FIRST, MID],
        [MID, LAST],
    ]
)
REWARDS = np.array(
    [[0, 3], [1, 5], [2, 7], [0, 0], [4, 9], [8, 11], [0, 13], [16, 15]], dtype=np.float32
)  # r[0, 1] = 3 belongs to a step before the fragment and is never used
ENV_DISCOUNTS = np.array([[1, 1], [1, 1], [0, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 0]], dtype=np.float32)

# (t, b, n-step reward, t of next_obs, discount) for every non-LAST row t < 7, time-major;
# worked out by hand from the tables above.
EXPECTED = {
    1: [
        (0, 0, 1.0, 1, 0.5),
        (0, 1, 5.0, 1, 0.5),
        (1, 0, 2.0, 2, 0.0),  # next step is a terminated LAST: no bootstrap
        (1, 1, 7.0, 2, 0.5),  # next step is a truncated LAST: bootstrap
        (3, 0, 4.0, 4, 0.5),
        (3, 1, 9.0, 4, 0.5),
        (4, 0, 8.0, 5, 0.5),
        (4, 1, 11.0, 5, 0.5),
        (5, 1, 13.0, 6, 0.5),
        (6, 0, 16.0, 7, 0.5),  # the bootstrap row supplies the reward and next_obs
        (6, 1, 15.0, 7, 0.0),
    ],
    2: [
        (0, 0, 1.0 + 0.5 * 2.0, 2, 0.0),
        (0, 1, 5.0 + 0.5 * 7.0, 2, 0.25),
        (1, 0, 2.0, 2, 0.0),  # one step to the LAST
        (1, 1, 7.0, 2, 0.5),
        (3, 0, 4.0 + 0.5 * 8.0, 5, 0.25),
        (3, 1, 9.0 + 0.5 * 11.0, 5, 0.25),
        (4, 0, 8.0, 5, 0.5),
        (4, 1, 11.0 + 0.5 * 13.0, 6, 0.25),
        (5, 1, 13.0 + 0.5 * 15.0, 7, 0.0),
        (6, 0, 16.0, 7, 0.5),  # one step to the fragment end
        (6, 1, 15.0, 7, 0.0),
    ],
    3: [
        (0, 0, 1.0 + 0.5 * 2.0, 2, 0.0),  # the episode ends after 2 steps
        (0, 1, 5.0 + 0.5 * 7.0, 2, 0.25),
        (1, 0, 2.0, 2, 0.0),
        (1, 1, 7.0, 2, 0.5),
        (3, 0, 4.0 + 0.5 * 8.0, 5, 0.25),  # never sums env 0's reward at t=6 (next episode)
        (3, 1, 9.0 + 0.5 * 11.0 + 0.25 * 13.0, 6, 0.125),
        (4, 0, 8.0, 5, 0.5),
        (4, 1, 11.0 + 0.5 * 13.0 + 0.25 * 15.0, 7, 0.0),
        (5, 1, 13.0 + 0.5 * 15.0, 7, 0.0),
        (6, 0, 16.0, 7, 0.5),
        (6, 1, 15.0, 7, 0.0),
    ],
}


def hand_fragment() -> SampleBatch:
    """The ``[8, 2]`` fragment above; ``obs[t, b] = [t, b]``, ``actions = 10 t + b``, ``eps_id``, ``t``."""
    time, env = np.meshgrid(np.arange(8), np.arange(2), indexing="ij")
    return SampleBatch(
        obs=np.stack([time, env], axis=-1).astype(np.float32),
        actions=(10 * time + env).astype(np.int64),
        rewards=REWARDS,
        discounts=ENV_DISCOUNTS,
        step_types=STEP_TYPES,
        eps_id=np.array([[0, 9], [0, 9], [0, 9], [1, 10], [1, 10], [1, 10], [2, 10], [2, 10]]),
        t=np.array([[0, 4], [1, 5], [2, 6], [0, 0], [1, 1], [2, 2], [0, 3], [1, 4]]),
    )


@pytest.mark.parametrize("n_step", [1, 2, 3])
def test_n_step_transitions_match_the_hand_computed_reference(n_step):
    fragment = hand_fragment()
    out = n_step_transitions(fragment, n_step=n_step, gamma=GAMMA)
    t, b, rewards, next_t, discounts = (np.array(column) for column in zip(*EXPECTED[n_step], strict=True))
    assert len(out) == 11
    assert set(out) == {*fragment, NEXT_OBS}
    np.testing.assert_array_equal(out["obs"], np.stack([t, b], axis=-1))
    np.testing.assert_array_equal(out["rewards"], rewards)
    np.testing.assert_array_equal(out[NEXT_OBS], np.stack([next_t, b], axis=-1))
    np.testing.assert_array_equal(out["discounts"], discounts)
    # Every other column comes from row t.
    np.testing.assert_array_equal(out["actions"], 10 * t + b)
    for key in ("step_types", "eps_id", "t"):
        np.testing.assert_array_equal(out[key], fragment[key][t, b])
    assert np.all(out["step_types"] != LAST)
    assert out["rewards"].dtype == np.float32 and out["discounts"].dtype == np.float32


def test_n_step_transitions_never_reach_into_the_next_episode():
    fragment = hand_fragment()
    out = n_step_transitions(fragment, n_step=10, gamma=GAMMA)
    next_t, b = out[NEXT_OBS][:, 0].astype(int), out[NEXT_OBS][:, 1].astype(int)
    np.testing.assert_array_equal(fragment["eps_id"][next_t, b], out["eps_id"])


def random_fragment(rng: np.random.Generator, T: int, B: int, p_end: float = 0.25) -> SampleBatch:
    """A ``[T+1, B]`` fragment with random episode ends (terminated or truncated).

    Each env starts at a FIRST, mid-episode or on a LAST (an episode that ended
    in the previous fragment); the step after a LAST is a FIRST with reward 0.
    ``obs[t, b] = [t, b]`` so ``next_obs`` says which row a transition reached.
    """
    step_types = np.empty((T + 1, B), dtype=np.int32)
    discounts = np.ones((T + 1, B), dtype=np.float32)
    rewards = rng.normal(size=(T + 1, B)).astype(np.float32)
    step_types[0] = rng.choice([FIRST, MID, LAST], size=B)
    discounts[0] = np.where((step_types[0] == LAST) & (rng.random(B) < 0.5), 0.0, 1.0)
    for t in range(1, T + 1):
        after_last = step_types[t - 1] == LAST
        ends = rng.random(B) < p_end
        step_types[t] = np.where(after_last, FIRST, np.where(ends, LAST, MID))
        discounts[t] = np.where((step_types[t] == LAST) & (rng.random(B) < 0.5), 0.0, 1.0)
    rewards[step_types == FIRST] = 0.0
    time, env = np.meshgrid(np.arange(T + 1), np.arange(B), indexing="ij")
    return SampleBatch(
        obs=np.stack([time, env], axis=-1).astype(np.float32),
        actions=rng.integers(0, 3, size=(T + 1, B)),
        rewards=rewards,
        discounts=discounts,
        step_types=step_types,
    )


@pytest.mark.parametrize("seed", range(4))
def test_one_step_transitions_are_the_next_reward_obs_and_gamma_times_the_env_discount(seed):
    rng = np.random.default_rng(seed)
    fragment = random_fragment(rng, T=12, B=3)
    gamma = 0.9
    out = n_step_transitions(fragment, n_step=1, gamma=gamma)
    keep = fragment["step_types"][:-1] != LAST
    t, b = np.nonzero(keep)
    assert len(out) == keep.sum()
    np.testing.assert_array_equal(out["rewards"], fragment["rewards"][t + 1, b])
    np.testing.assert_array_equal(out[NEXT_OBS], fragment["obs"][t + 1, b])
    np.testing.assert_allclose(out["discounts"], gamma * fragment["discounts"][t + 1, b], rtol=1e-6)
    # Same target as value_ops' one-step TD: advantages(lambda=0) + values.
    values = rng.normal(size=fragment["rewards"].shape)
    targets = out["rewards"] + out["discounts"] * values[t + 1, b]
    td = generalized_advantage_estimation(
        fragment["rewards"], values, fragment["step_types"], fragment["discounts"] * gamma, td_lambda=0.0
    )
    np.testing.assert_allclose(targets, td[t, b] + values[t, b], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_n_step_at_least_the_fragment_length_gives_value_ops_discounted_return(seed):
    rng = np.random.default_rng(100 + seed)
    T, gamma = 10, 0.95
    fragment = random_fragment(rng, T=T, B=4)
    values = rng.normal(size=fragment["rewards"].shape)
    out = n_step_transitions(fragment, n_step=T + 3, gamma=gamma)
    next_t = out[NEXT_OBS][:, 0].astype(int)
    t, b = out["obs"][:, 0].astype(int), out["obs"][:, 1].astype(int)
    assert np.all(next_t > t)
    targets = out["rewards"] + out["discounts"] * values[next_t, b]
    returns = discounted_return(
        fragment["rewards"], values, fragment["step_types"], fragment["discounts"] * gamma
    )
    np.testing.assert_allclose(targets, returns[t, b], rtol=1e-5, atol=1e-5)


def test_last_rows_and_the_bootstrap_row_are_not_transitions():
    fragment = random_fragment(np.random.default_rng(5), T=20, B=2, p_end=0.4)
    out = n_step_transitions(fragment, n_step=3, gamma=0.99)
    keep = fragment["step_types"][:-1] != LAST
    assert len(out) == keep.sum() > 0
    assert np.all(out["step_types"] != LAST)
    assert np.all(out["obs"][:, 0] < 20)  # row T is never a transition's start


def test_n_step_transitions_fill_a_replay_buffer():
    buffer = ReplayBuffer(capacity=100, seed=0)
    for n in (1, 3):
        buffer.add(n_step_transitions(hand_fragment(), n_step=n, gamma=GAMMA))
    batch = buffer.sample(32)
    assert {"obs", "actions", "rewards", NEXT_OBS, "discounts", BATCH_INDEXES} <= set(batch)


@pytest.mark.parametrize("n_step", [0, -1, 1.5])
def test_n_step_must_be_a_positive_integer(n_step):
    with pytest.raises(ValueError, match="n_step"):
        n_step_transitions(hand_fragment(), n_step=n_step, gamma=0.9)


def test_n_step_transitions_name_missing_columns():
    fragment = hand_fragment()
    del fragment["discounts"]
    with pytest.raises(ValueError, match=r"lacks columns \['discounts'\]"):
        n_step_transitions(fragment, n_step=1, gamma=0.9)


def test_n_step_transitions_reject_a_flat_batch():
    with pytest.raises(ValueError, match=r"time-major \[T\+1, B\]"):
        n_step_transitions(SampleBatch({k: v[:, 0] for k, v in hand_fragment().items()}), n_step=1, gamma=0.9)
