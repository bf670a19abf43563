"""Tests of ``rlgear.value_ops`` against an independent, per-episode reference.

The functions under test use ALF's vectorised backward recursion over the whole
time axis. The reference below works the other way round: it cuts each env's
time series into episodes at LAST steps and, for every step of every episode,
sums the discounted rewards (or TD errors) forward with plain Python loops,
deciding explicitly whether the episode bootstraps (truncated, or still running
at the end of the fragment) or not (terminated).

Layout reminder (docs/architecture.md, "value_ops"): ``rewards[t]`` and
``discounts[t]`` arrive *with* step ``t``; ``discounts`` is already multiplied
by gamma, so FIRST/MID/truncated-LAST rows carry ``gamma`` and a terminated LAST
carries ``0``. The final row only supplies the bootstrap value.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.timestep import StepType
from rlgear.value_ops import discounted_return, generalized_advantage_estimation

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)

SEEDS = [0, 1, 2, 3, 7, 42]
LAMBDAS = [0.0, 0.5, 0.95, 1.0]


# --------------------------------------------------------------------------- data


def random_series(rng: np.random.Generator, T: int, gamma: float, p_end: float = 0.2):
    """One env's fragment of ``T`` rows: (rewards, values, step_types, discounts).

    The fragment may start at a FIRST, in the middle of an episode (MID) or on
    the LAST step of an episode that began in an earlier fragment; it usually
    ends mid-episode. Each episode ends terminated (LAST, discount 0) or
    truncated (LAST, discount gamma), chosen at random; the step after a LAST
    is a FIRST with reward 0.
    """
    step_types = np.empty(T, dtype=np.int32)
    rewards = np.empty(T)
    discounts = np.empty(T)
    for t in range(T):
        if t == 0:
            st = int(rng.choice([FIRST, MID, MID, LAST]))
        elif step_types[t - 1] == LAST:
            st = FIRST
        elif rng.random() < p_end:
            st = LAST
        else:
            st = MID
        step_types[t] = st
        if st == FIRST:
            rewards[t], discounts[t] = 0.0, gamma
        elif st == MID:
            rewards[t], discounts[t] = rng.normal(), gamma
        else:
            terminated = rng.random() < 0.5
            rewards[t], discounts[t] = rng.normal(), 0.0 if terminated else gamma
    values = rng.normal(size=T)
    return rewards, values, step_types, discounts


def random_batch(rng: np.random.Generator, T: int, B: int, gamma: float):
    """Time-major ``[T, B]`` arrays built from ``B`` independent fragments."""
    cols = [random_series(rng, T, gamma) for _ in range(B)]
    return tuple(np.stack([c[i] for c in cols], axis=1) for i in range(4))


# ---------------------------------------------------------------------- reference


def episodes(step_types: np.ndarray):
    """Inclusive ``(start, end)`` row ranges: each ends at a LAST step or at the final row."""
    start = 0
    n = len(step_types)
    for t in range(n):
        if step_types[t] == LAST or t == n - 1:
            yield start, t
            start = t + 1


def is_terminated(step_types, discounts, row) -> bool:
    return step_types[row] == LAST and discounts[row] == 0


def reference_returns_1d(rewards, values, step_types, discounts) -> np.ndarray:
    T = len(rewards)
    out = np.full(T - 1, np.nan)
    for start, end in episodes(step_types):
        # a terminated episode has nothing to bootstrap from; a truncated one, or
        # one still running at the end of the fragment, bootstraps from values[end]
        bootstrap = 0.0 if is_terminated(step_types, discounts, end) else values[end]
        for t in range(start, min(end, T - 2) + 1):
            if step_types[t] == LAST:
                out[t] = values[t]
                continue
            total, scale = 0.0, 1.0
            for k in range(t + 1, end + 1):
                total += scale * rewards[k]
                scale *= discounts[k]
            out[t] = total + scale * bootstrap
    assert not np.isnan(out).any()
    return out


def reference_gae_1d(rewards, values, step_types, discounts, lam) -> np.ndarray:
    T = len(rewards)
    out = np.full(T - 1, np.nan)
    for start, end in episodes(step_types):
        terminated = is_terminated(step_types, discounts, end)
        for t in range(start, min(end, T - 2) + 1):
            if step_types[t] == LAST:
                out[t] = 0.0
                continue
            total, weight = 0.0, 1.0
            for k in range(t, end):
                next_value = 0.0 if (k + 1 == end and terminated) else values[k + 1]
                delta = rewards[k + 1] + discounts[k + 1] * next_value - values[k]
                total += weight * delta
                weight *= lam * discounts[k + 1]
            out[t] = total
    assert not np.isnan(out).any()
    return out


def reference_2d(fn, rewards, values, step_types, discounts, *extra) -> np.ndarray:
    """Apply a 1-D reference column by column to time-major ``[T, B]`` inputs."""
    cols = [
        fn(rewards[:, b], values[:, b], step_types[:, b], discounts[:, b], *extra)
        for b in range(rewards.shape[1])
    ]
    return np.stack(cols, axis=1)


def test_generated_data_has_both_episode_endings_and_all_starts():
    # guards the generator itself: the comparisons below only mean something if
    # the data contains terminated and truncated LASTs and every kind of start
    rng = np.random.default_rng(0)
    _, _, st, d = random_batch(rng, T=40, B=16, gamma=0.9)
    assert ((st == LAST) & (d == 0)).any()
    assert ((st == LAST) & (d > 0)).any()
    assert set(st[0].tolist()) >= {FIRST, MID, LAST}
    assert (st[-1] != LAST).any()  # some fragments end mid-episode
    after_last = np.roll(st, -1, axis=0)[:-1][st[:-1] == LAST]
    assert (after_last == FIRST).all()


# ------------------------------------------------------------ hand-computed example

# gamma = 0.5; three episodes in one 8-row fragment:
#   rows 0-1: started before the fragment (MID), terminated at row 1 (discount 0)
#   rows 2-4: FIRST..LAST, truncated at row 4 (discount = gamma)
#   rows 5-7: FIRST, MID, MID -- still running; row 7 is only the bootstrap
HAND_INPUTS = (
    np.array([1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 5.0, 6.0]),  # rewards
    np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]),  # values
    np.array([MID, LAST, FIRST, MID, LAST, FIRST, MID, MID]),  # step types
    np.array([0.5, 0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),  # discounts (already * gamma)
)
# returns:
#   G0 = r1 + 0 * (terminated: no bootstrap)          = 2
#   G1 = V1 (LAST)                                    = 20
#   G2 = r3 + .5 r4 + .25 V4 = 3 + 2 + 12.5           = 17.5
#   G3 = r4 + .5 V4          = 4 + 25                 = 29
#   G4 = V4 (LAST)                                    = 50
#   G5 = r6 + .5 r7 + .25 V7 = 5 + 3 + 20             = 28
#   G6 = r7 + .5 V7          = 6 + 40                 = 46
HAND_RETURNS = np.array([2.0, 20.0, 17.5, 29.0, 50.0, 28.0, 46.0])
# TD errors delta_t = r[t+1] + d[t+1] V[t+1] - V[t] (non-LAST rows):
#   d0 = 2 + 0*20 - 10 = -8;   d2 = 3 + .5*40 - 30 = -7;   d3 = 4 + .5*50 - 40 = -11
#   d5 = 5 + .5*70 - 60 = -20; d6 = 6 + .5*80 - 70 = -24
# GAE with lambda = 0.5 (weight d[t+1] * lambda = .25 inside an episode):
#   A6 = -24;  A5 = -20 + .25 * -24 = -26;  A4 = 0 (LAST)
#   A3 = -11 + .25 * A4 = -11;  A2 = -7 + .25 * -11 = -9.75;  A1 = 0 (LAST);  A0 = -8
HAND_GAE_HALF = np.array([-8.0, 0.0, -9.75, -11.0, 0.0, -26.0, -24.0])
# GAE with lambda = 1 is G - V[:-1] at non-LAST rows, 0 at LAST rows:
HAND_GAE_ONE = np.array([-8.0, 0.0, -12.5, -11.0, 0.0, -32.0, -24.0])


def test_reference_on_hand_example():
    # the reference must itself agree with the hand-computed numbers above
    r, v, st, d = HAND_INPUTS
    np.testing.assert_allclose(reference_returns_1d(r, v, st, d), HAND_RETURNS)
    np.testing.assert_allclose(reference_gae_1d(r, v, st, d, 0.5), HAND_GAE_HALF)


def test_hand_computed_returns():
    np.testing.assert_allclose(discounted_return(*HAND_INPUTS), HAND_RETURNS)


@pytest.mark.parametrize(("lam", "expected"), [(0.5, HAND_GAE_HALF), (1.0, HAND_GAE_ONE)])
def test_hand_computed_advantages(lam, expected):
    got = generalized_advantage_estimation(*HAND_INPUTS, td_lambda=lam)
    np.testing.assert_allclose(got, expected)


# ------------------------------------------------------- agreement with reference


@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_return_matches_per_episode_reference_1d(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_series(rng, T=60, gamma=0.9)
    np.testing.assert_allclose(
        discounted_return(r, v, st, d), reference_returns_1d(r, v, st, d), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_return_matches_per_episode_reference_time_major_2d(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=8, gamma=0.95)
    expected = reference_2d(reference_returns_1d, r, v, st, d)
    got = discounted_return(r, v, st, d)
    assert got.shape == (29, 8)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_return_matches_per_episode_reference_batch_major(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=5, gamma=0.8)
    expected = reference_2d(reference_returns_1d, r, v, st, d).T
    got = discounted_return(r.T, v.T, st.T, d.T, time_major=False)
    assert got.shape == (5, 29)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_per_episode_reference_1d(seed, lam):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_series(rng, T=60, gamma=0.9)
    np.testing.assert_allclose(
        generalized_advantage_estimation(r, v, st, d, td_lambda=lam),
        reference_gae_1d(r, v, st, d, lam),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_per_episode_reference_time_major_2d(seed, lam):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=8, gamma=0.95)
    expected = reference_2d(reference_gae_1d, r, v, st, d, lam)
    got = generalized_advantage_estimation(r, v, st, d, td_lambda=lam)
    assert got.shape == (29, 8)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_gae_matches_per_episode_reference_batch_major(seed, lam):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=5, gamma=0.8)
    expected = reference_2d(reference_gae_1d, r, v, st, d, lam).T
    got = generalized_advantage_estimation(r.T, v.T, st.T, d.T, td_lambda=lam, time_major=False)
    assert got.shape == (5, 29)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ properties


@pytest.mark.parametrize(
    ("shape", "time_major", "expected"),
    [((9,), True, (8,)), ((9, 3), True, (8, 3)), ((3, 9), False, (3, 8))],
)
def test_outputs_have_one_row_fewer_than_inputs(shape, time_major, expected):
    rng = np.random.default_rng(0)
    r = rng.normal(size=shape)
    v = rng.normal(size=shape)
    st = np.full(shape, MID)
    d = np.full(shape, 0.9)
    ret = discounted_return(r, v, st, d, time_major=time_major)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=0.9, time_major=time_major)
    assert ret.shape == expected
    assert adv.shape == expected
    assert np.issubdtype(ret.dtype, np.floating)
    assert np.issubdtype(adv.dtype, np.floating)


@pytest.mark.parametrize("seed", SEEDS)
def test_last_rows_return_own_value_and_have_zero_advantage(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=8, gamma=0.9)
    is_last = st[:-1] == LAST
    assert is_last.any()
    ret = discounted_return(r, v, st, d)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=0.9)
    np.testing.assert_array_equal(ret[is_last], v[:-1][is_last])
    np.testing.assert_array_equal(adv[is_last], 0.0)


def _single_episode(ending_discount: float, gamma: float = 0.9):
    """FIRST MID MID LAST FIRST MID: an episode of 4 steps then the start of the next."""
    st = np.array([FIRST, MID, MID, LAST, FIRST, MID])
    r = np.array([0.0, 1.0, -2.0, 3.0, 0.0, 5.0])
    v = np.array([0.5, 1.5, -0.5, 2.0, 7.0, -3.0])
    d = np.array([gamma, gamma, gamma, ending_discount, gamma, gamma])
    return r, v, st, d


@pytest.mark.parametrize("lam", [0.7, 1.0])
def test_truncated_episode_bootstraps_from_last_value(lam):
    gamma, bump = 0.9, 10.0
    r, v, st, d = _single_episode(ending_discount=gamma, gamma=gamma)
    v2 = v.copy()
    v2[3] += bump  # the value of the LAST (final) observation
    # G[t] contains gamma^(3-t) * V[3]
    ret_delta = discounted_return(r, v2, st, d) - discounted_return(r, v, st, d)
    np.testing.assert_allclose(ret_delta[:3], bump * gamma ** np.array([3.0, 2.0, 1.0]))
    # A[t] contains gamma * (gamma * lambda)^(2-t) * V[3]
    adv_delta = generalized_advantage_estimation(
        r, v2, st, d, td_lambda=lam
    ) - generalized_advantage_estimation(r, v, st, d, td_lambda=lam)
    expected = bump * gamma * (gamma * lam) ** np.array([2.0, 1.0, 0.0])
    np.testing.assert_allclose(adv_delta[:3], expected)
    # explicit value: G[2] = r[3] + gamma * V[3]
    assert discounted_return(r, v, st, d)[2] == pytest.approx(3.0 + gamma * 2.0)


@pytest.mark.parametrize("lam", [0.7, 1.0])
def test_terminated_episode_does_not_bootstrap(lam):
    r, v, st, d = _single_episode(ending_discount=0.0)
    v2 = v.copy()
    v2[3] += 10.0
    ret, ret2 = discounted_return(r, v, st, d), discounted_return(r, v2, st, d)
    np.testing.assert_array_equal(ret[:3], ret2[:3])
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=lam)
    adv2 = generalized_advantage_estimation(r, v2, st, d, td_lambda=lam)
    np.testing.assert_array_equal(adv[:3], adv2[:3])
    # explicit values: G[2] = r[3], G[1] = r[2] + gamma r[3], G[0] = r[1] + ...
    np.testing.assert_allclose(ret[:3], [1.0 + 0.9 * -2.0 + 0.81 * 3.0, -2.0 + 0.9 * 3.0, 3.0])
    # the LAST row's own return is still its value (not learned, but well defined)
    assert ret2[3] == v2[3]


def test_unfinished_episode_bootstraps_from_final_row():
    gamma = 0.9
    st = np.array([MID, MID, MID, MID])
    r = np.array([9.0, 1.0, 2.0, 3.0])
    v = np.array([0.0, 0.0, 0.0, 100.0])
    d = np.full(4, gamma)
    ret = discounted_return(r, v, st, d)
    expected_0 = 1.0 + gamma * 2.0 + gamma**2 * 3.0 + gamma**3 * 100.0
    expected = [
        expected_0,
        2.0 + gamma * 3.0 + gamma**2 * 100.0,
        3.0 + gamma * 100.0,
    ]  # r[0] = 9 arrived with row 0 and belongs to an earlier action: never counted
    np.testing.assert_allclose(ret, expected)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=1.0)
    np.testing.assert_allclose(adv, np.array(expected) - v[:-1])


@pytest.mark.parametrize("seed", SEEDS)
def test_later_episode_does_not_leak_into_earlier_one(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_series(rng, T=40, gamma=0.9)
    boundaries = [t for t in range(len(st) - 2) if st[t] == LAST]
    assert boundaries
    ret = discounted_return(r, v, st, d)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=0.8)
    for L in boundaries:
        r2, v2, d2 = r.copy(), v.copy(), d.copy()
        # everything after the LAST step belongs to later episodes
        r2[L + 1 :] += rng.normal(size=len(r) - L - 1) * 100
        v2[L + 1 :] += rng.normal(size=len(r) - L - 1) * 100
        d2[L + 1 :] = np.where(d2[L + 1 :] > 0, 0.5, 0.0)
        ret2 = discounted_return(r2, v2, st, d2)
        adv2 = generalized_advantage_estimation(r2, v2, st, d2, td_lambda=0.8)
        np.testing.assert_array_equal(ret2[: L + 1], ret[: L + 1])
        np.testing.assert_array_equal(adv2[: L + 1], adv[: L + 1])
        assert not np.array_equal(ret2[L + 1 :], ret[L + 1 :])  # the perturbation did bite


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_earlier_episode_does_not_leak_into_later_one(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_series(rng, T=40, gamma=0.9)
    boundaries = [t for t in range(len(st) - 2) if st[t] == LAST]
    assert boundaries
    ret = discounted_return(r, v, st, d)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=0.8)
    for L in boundaries:
        r2, v2 = r.copy(), v.copy()
        r2[: L + 1] += 100.0
        v2[: L + 1] += 100.0
        ret2 = discounted_return(r2, v2, st, d)
        adv2 = generalized_advantage_estimation(r2, v2, st, d, td_lambda=0.8)
        np.testing.assert_array_equal(ret2[L + 1 :], ret[L + 1 :])
        np.testing.assert_array_equal(adv2[L + 1 :], adv[L + 1 :])


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_reward_at_first_step_is_ignored(seed):
    # the reward that arrives with a FIRST step belongs to no action of any episode
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=6, gamma=0.9)
    is_first = st == FIRST
    assert is_first[1:].any()
    r2 = np.where(is_first, 1e6, r)
    np.testing.assert_array_equal(discounted_return(r2, v, st, d), discounted_return(r, v, st, d))
    np.testing.assert_array_equal(
        generalized_advantage_estimation(r2, v, st, d, td_lambda=0.9),
        generalized_advantage_estimation(r, v, st, d, td_lambda=0.9),
    )


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_gae_with_lambda_one_equals_return_minus_values(seed, time_major):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=6, gamma=0.97)
    if not time_major:
        r, v, st, d = r.T, v.T, st.T, d.T
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=1.0, time_major=time_major)
    ret = discounted_return(r, v, st, d, time_major=time_major)
    values = v[:-1] if time_major else v[:, :-1]
    np.testing.assert_allclose(adv, ret - values, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_with_lambda_zero_equals_one_step_td_error_except_at_last(seed):
    rng = np.random.default_rng(seed)
    r, v, st, d = random_batch(rng, T=30, B=6, gamma=0.9)
    adv = generalized_advantage_estimation(r, v, st, d, td_lambda=0.0)
    td_error = r[1:] + d[1:] * v[1:] - v[:-1]
    is_last = st[:-1] == LAST
    assert is_last.any() and (~is_last).any()
    np.testing.assert_allclose(adv[~is_last], td_error[~is_last], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(adv[is_last], 0.0)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(5)
    arrays = random_batch(rng, T=20, B=4, gamma=0.9)
    copies = [a.copy() for a in arrays]
    discounted_return(*arrays)
    generalized_advantage_estimation(*arrays, td_lambda=0.5)
    for a, c in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(a, c)


# ---------------------------------------------------------------------- errors

FUNCS = [discounted_return, generalized_advantage_estimation]


@pytest.mark.parametrize("fn", FUNCS)
@pytest.mark.parametrize("bad", ["values", "step_types", "discounts"])
def test_mismatched_shapes_raise_value_error(fn, bad):
    inputs = {
        "rewards": np.zeros((5, 3)),
        "values": np.zeros((5, 3)),
        "step_types": np.full((5, 3), MID),
        "discounts": np.full((5, 3), 0.9),
    }
    inputs[bad] = inputs[bad][:, :2]
    with pytest.raises(ValueError):
        fn(**inputs)


@pytest.mark.parametrize("fn", FUNCS)
def test_mismatched_time_length_raises_value_error(fn):
    with pytest.raises(ValueError):
        fn(np.zeros(5), np.zeros(6), np.full(5, MID), np.full(5, 0.9))


@pytest.mark.parametrize("fn", FUNCS)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (1, 4), (0, 4)])
def test_fewer_than_two_time_steps_raise_value_error(fn, shape):
    with pytest.raises(ValueError):
        fn(np.zeros(shape), np.zeros(shape), np.full(shape, MID), np.full(shape, 0.9))


@pytest.mark.parametrize("fn", FUNCS)
def test_fewer_than_two_time_steps_raise_value_error_batch_major(fn):
    shape = (4, 1)  # B=4 envs, T=1 step
    with pytest.raises(ValueError):
        fn(
            np.zeros(shape),
            np.zeros(shape),
            np.full(shape, MID),
            np.full(shape, 0.9),
            time_major=False,
        )


@pytest.mark.parametrize("fn", FUNCS)
def test_single_env_batch_major_is_accepted(fn):
    shape = (1, 6)  # B=1 env, T=6 steps: a valid input
    out = fn(np.ones(shape), np.zeros(shape), np.full(shape, MID), np.full(shape, 0.5), time_major=False)
    assert out.shape == (1, 5)
