"""PQN's Q(lambda) targets against an independent float64 reference (the forward view).

The reference builds every row's target as the lambda-weighted average of its n-step returns
(Sutton & Barto 2018, eq. 12.3, truncated at the horizon: the episode's LAST row or the
fragment's bootstrap row), each n-step return bootstrapping from ``max_a Q`` of the
observation it stops at, so no recursion is shared with :func:`rlgear.value_ops.lambda_return`.
A terminal (LAST, discount 0) adds no value after it, a truncation (LAST, discount 1) bootstraps
from the final observation's ``max_a Q``; LAST rows are not trained on.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import value_ops
from rlgear.plugins.algorithms.pqn.pqn import PQN, add_q_lambda_returns
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType
from tests.numpy_reference import resolve

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
GAMMA = 0.9

# Three envs over 10 rows (row 9 is the bootstrap row):
#   env 0: an episode terminated at row 3, the next runs past the fragment's end;
#   env 1: an episode truncated at row 5 (time limit), then a short terminated one (rows 6-8);
#   env 2: one episode through the whole fragment.
STEP_TYPES = np.array(
    [
        [MID, MID, MID],
        [MID, MID, MID],
        [MID, MID, MID],
        [LAST, MID, MID],
        [FIRST, MID, MID],
        [MID, LAST, MID],
        [MID, FIRST, MID],
        [MID, MID, MID],
        [MID, LAST, MID],
        [MID, FIRST, MID],
    ]
)
DISCOUNTS = np.ones(STEP_TYPES.shape)
DISCOUNTS[3, 0] = 0.0  # terminated
DISCOUNTS[8, 1] = 0.0  # terminated (row 5 of env 1 is a truncation: discount 1)


def fragment(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=STEP_TYPES.shape)
    rewards[STEP_TYPES == FIRST] = 0.0
    max_q = rng.normal(loc=2.0, size=STEP_TYPES.shape)
    return rewards, max_q


def forward_view(rewards, max_q, step_types, discounts, gamma, lam):
    """``[T-1, B]`` targets: ``(1 - lam) sum_{n<k} lam^(n-1) G_n + lam^(k-1) G_k`` per row, in float64."""
    horizon, envs = rewards.shape
    out = np.zeros((horizon - 1, envs))
    for b in range(envs):
        for t in range(horizon - 1):
            if step_types[t, b] == LAST:
                out[t, b] = max_q[t, b]  # not trained on; the ALF convention
                continue
            k = 1  # steps until the episode's LAST row or the fragment's bootstrap row
            while t + k < horizon - 1 and step_types[t + k, b] != LAST:
                k += 1
            n_step = []
            for n in range(1, k + 1):
                total, scale = 0.0, 1.0
                for i in range(1, n + 1):
                    total += scale * rewards[t + i, b]
                    scale *= gamma * discounts[t + i, b]
                n_step.append(total + scale * max_q[t + n, b])
            weights = [(1 - lam) * lam ** (n - 1) for n in range(1, k)] + [lam ** (k - 1)]
            out[t, b] = float(np.dot(weights, n_step))
    return out


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.65, 1.0])
def test_lambda_return_matches_the_forward_view_of_n_step_returns(lam):
    rewards, max_q = fragment()
    expected = forward_view(rewards, max_q, STEP_TYPES, DISCOUNTS, GAMMA, lam)
    got = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=lam)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    got_batch_major = value_ops.lambda_return(
        rewards.T, max_q.T, STEP_TYPES.T, DISCOUNTS.T * GAMMA, td_lambda=lam, time_major=False
    )
    np.testing.assert_allclose(got_batch_major, expected.T, rtol=1e-12, atol=1e-12)


def test_lambda_zero_is_the_one_step_q_learning_target():
    rewards, max_q = fragment(1)
    got = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=0.0)
    one_step = rewards[1:] + GAMMA * DISCOUNTS[1:] * max_q[1:]
    trained = STEP_TYPES[:-1] != LAST
    np.testing.assert_allclose(got[trained], one_step[trained], rtol=1e-12)
    # the terminated rows' predecessors take the reward only; the truncated one bootstraps
    assert got[2, 0] == pytest.approx(rewards[3, 0])
    assert got[4, 1] == pytest.approx(rewards[5, 1] + GAMMA * max_q[5, 1])


def test_lambda_one_is_the_monte_carlo_return_bootstrapped_at_truncations_and_the_fragment_end():
    rewards, max_q = fragment(2)
    got = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=1.0)
    np.testing.assert_allclose(
        got, value_ops.discounted_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA), rtol=1e-12
    )
    # env 2 never ends: its first row's return is the discounted rewards plus gamma^9 max Q at row 9
    mc = sum(GAMMA**i * rewards[1 + i, 2] for i in range(9)) + GAMMA**9 * max_q[9, 2]
    assert got[0, 2] == pytest.approx(mc, rel=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.65, 1.0])
def test_lambda_return_minus_values_is_gae_of_the_same_inputs(lam):
    rewards, max_q = fragment(3)
    returns = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=lam)
    gae = value_ops.generalized_advantage_estimation(
        rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=lam
    )
    np.testing.assert_allclose(returns - max_q[:-1], gae, rtol=1e-10, atol=1e-12)


def test_nothing_leaks_across_an_episode_boundary():
    """Changing the next episode's rewards and values leaves the earlier episode's targets alone."""
    rewards, max_q = fragment(4)
    before = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=0.65)
    rewards[4:, 0] += 100.0
    max_q[4:, 0] -= 50.0
    after = value_ops.lambda_return(rewards, max_q, STEP_TYPES, DISCOUNTS * GAMMA, td_lambda=0.65)
    np.testing.assert_array_equal(after[:3, 0], before[:3, 0])
    assert not np.allclose(after[4:, 0], before[4:, 0])


def test_shapes_are_checked():
    rewards, max_q = fragment()
    with pytest.raises(ValueError, match="values has shape"):
        value_ops.lambda_return(rewards, max_q[:, :2], STEP_TYPES, DISCOUNTS)


def test_postprocess_trains_on_the_non_last_rows_with_their_q_lambda_targets(tmp_path):
    config = resolve(tmp_path, "pqn", {"gamma": GAMMA, "q_lambda": 0.65}, {"hidden_sizes": [8]})
    rewards, max_q = fragment(5)
    horizon, envs = rewards.shape
    frag = SB(
        {
            SB.OBS: np.arange(horizon * envs * 4, dtype=np.float32).reshape(horizon, envs, 4),
            SB.ACTIONS: np.zeros((horizon, envs), np.int64),
            SB.REWARDS: rewards.astype(np.float32),
            SB.DISCOUNTS: DISCOUNTS.astype(np.float32),
            SB.STEP_TYPES: STEP_TYPES.astype(np.int32),
            SB.VF_PREDS: max_q.astype(np.float32),
        }
    )
    rows = PQN.postprocess(frag, None, config)
    expected = forward_view(
        rewards.astype(np.float32), max_q.astype(np.float32), STEP_TYPES, DISCOUNTS, GAMMA, 0.65
    )
    trained = STEP_TYPES[:-1] != LAST
    assert len(rows) == trained.sum() == 9 * 3 - 3
    np.testing.assert_allclose(rows[SB.VALUE_TARGETS], expected[trained], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(rows[SB.OBS], frag[SB.OBS][:-1][trained])
    padded = add_q_lambda_returns(frag, GAMMA, 0.65)[SB.VALUE_TARGETS]
    assert padded.shape == (horizon, envs) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[-1], 0.0)  # the bootstrap row is never trained on
