"""``value_ops.vtrace`` against an independent reference written from the IMPALA paper.

The reference evaluates eq. (1) of Espeholt et al. 2018 (arXiv:1802.01561)
directly, one step ``s`` at a time, as an explicit truncated sum::

    v_s = V(x_s) + sum_{t=s}^{end-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V

and eq. (4) for the policy-gradient advantage, with the episode boundaries of
the truth table of docs/architecture.md ("TimeStep semantics"): the sum stops
at the episode's LAST step (a terminated LAST has discount 0, so nothing after
it counts; a truncated one bootstraps from its value) or at the fragment's
bootstrap row. It shares no code with the recursive implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlgear import value_ops
from rlgear.timestep import StepType

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def reference_vtrace(log_rhos, rewards, values, step_types, discounts, rho_bar, pg_rho_bar, c_bar, lam):
    """One column ``[T]``: the paper's definitions, one explicit sum per step."""
    T = len(values)

    def clip(x, bar):
        return x if bar is None else min(bar, x)

    rho = [clip(math.exp(float(log_rhos[t])), rho_bar) for t in range(T)]
    c = [lam * clip(math.exp(float(log_rhos[t])), c_bar) for t in range(T)]

    def v_target(s):
        if s == T - 1 or step_types[s] == LAST:
            return float(values[s])
        total, weight = float(values[s]), 1.0
        for t in range(s, T - 1):
            delta = rho[t] * (rewards[t + 1] + discounts[t + 1] * values[t + 1] - values[t])
            total += weight * delta
            if step_types[t + 1] == LAST:  # the episode ends: no later step belongs to it
                break
            weight *= discounts[t + 1] * c[t]
        return total

    vs = [v_target(s) for s in range(T - 1)]
    pg = []
    for s in range(T - 1):
        if step_types[s] == LAST:
            pg.append(0.0)
            continue
        pg_rho = clip(math.exp(float(log_rhos[s])), pg_rho_bar)
        pg.append(pg_rho * (rewards[s + 1] + discounts[s + 1] * v_target(s + 1) - values[s]))
    return np.array(vs), np.array(pg)


def random_episodes(rng, T, B, gamma=0.9):
    """Columns of valid ALF step types with terminated and truncated LASTs inside the unroll."""
    step_types = np.empty((T, B), dtype=np.int32)
    discounts = np.ones((T, B), dtype=np.float64)
    for b in range(B):
        state = int(rng.integers(0, 2))  # start at FIRST or mid-episode
        for t in range(T):
            if state == LAST:
                state = FIRST
            elif state == FIRST:
                state = MID
            elif rng.random() < 0.25:
                state = LAST
            step_types[t, b] = state
            if state == LAST and rng.random() < 0.5:
                discounts[t, b] = 0.0  # terminated; otherwise truncated (time limit)
    rewards = rng.normal(size=(T, B))
    rewards[step_types == FIRST] = 0.0
    values = rng.normal(size=(T, B))
    log_rhos = rng.normal(scale=0.8, size=(T, B))
    return log_rhos, rewards, values, step_types, discounts * gamma


def reference_columns(log_rhos, rewards, values, step_types, discounts, **clips):
    outs = [
        reference_vtrace(
            log_rhos[:, b],
            rewards[:, b],
            values[:, b],
            step_types[:, b],
            discounts[:, b],
            clips["clip_rho_threshold"],
            clips["clip_pg_rho_threshold"],
            clips["clip_c_threshold"],
            clips["lambda_"],
        )
        for b in range(values.shape[1])
    ]
    return np.stack([o[0] for o in outs], axis=1), np.stack([o[1] for o in outs], axis=1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "clips",
    [
        {"clip_rho_threshold": 1.0, "clip_pg_rho_threshold": 1.0, "clip_c_threshold": 1.0, "lambda_": 1.0},
        {"clip_rho_threshold": 2.0, "clip_pg_rho_threshold": 0.5, "clip_c_threshold": 0.9, "lambda_": 0.95},
        {"clip_rho_threshold": None, "clip_pg_rho_threshold": None, "clip_c_threshold": None, "lambda_": 0.8},
    ],
)
def test_vtrace_matches_the_papers_definition_with_episode_ends_inside_the_unroll(seed, clips):
    rng = np.random.default_rng(seed)
    inputs = random_episodes(rng, T=12, B=5)
    assert (inputs[3] == LAST).any() and (inputs[4][inputs[3] == LAST] == 0).any()
    vs, pg = value_ops.vtrace(*inputs, **clips)
    ref_vs, ref_pg = reference_columns(*inputs, **clips)
    assert vs.shape == pg.shape == (11, 5)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pg, ref_pg, rtol=1e-10, atol=1e-10)


def test_terminated_and_truncated_ends_by_hand():
    """Column 0 terminates at t=2, column 1 is truncated at t=2; both restart at t=3 (gamma 0.5, on-policy)."""
    step_types = np.array([[FIRST, FIRST], [MID, MID], [LAST, LAST], [FIRST, FIRST], [MID, MID]])
    rewards = np.array([[0, 0], [1, 1], [2, 2], [0, 0], [4, 4]], dtype=np.float64)
    discounts = 0.5 * np.array([[1, 1], [1, 1], [0, 1], [1, 1], [1, 1]], dtype=np.float64)
    values = np.array([[10, 10], [20, 20], [30, 30], [40, 40], [50, 50]], dtype=np.float64)
    vs, pg = value_ops.vtrace(np.zeros_like(values), rewards, values, step_types, discounts)
    # terminated: G1 = 2, G0 = 1 + 0.5 * 2; truncated: G1 = 2 + 0.5 * 30 = 17, G0 = 1 + 0.5 * 17.
    # LAST rows keep their own value; G3 = 4 + 0.5 * 50 bootstraps from the last row.
    np.testing.assert_allclose(vs, [[2, 9.5], [2, 17], [30, 30], [29, 29]])
    np.testing.assert_allclose(pg, [[2 - 10, 9.5 - 10], [2 - 20, 17 - 20], [0, 0], [29 - 40, 29 - 40]])


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.5, 0.0])
def test_on_policy_vtrace_is_gae_plus_values(lam):
    rng = np.random.default_rng(1)
    _, rewards, values, step_types, discounts = random_episodes(rng, T=15, B=4)
    vs, pg = value_ops.vtrace(np.zeros_like(values), rewards, values, step_types, discounts, lambda_=lam)
    gae = value_ops.generalized_advantage_estimation(rewards, values, step_types, discounts, td_lambda=lam)
    np.testing.assert_allclose(vs, gae + values[:-1], rtol=1e-10, atol=1e-10)
    if lam == 1.0:
        returns = value_ops.discounted_return(rewards, values, step_types, discounts)
        np.testing.assert_allclose(vs, returns, rtol=1e-10, atol=1e-10)
        learned = step_types[:-1] != LAST
        np.testing.assert_allclose(pg[learned], (returns - values[:-1])[learned], rtol=1e-10, atol=1e-10)


def test_clipping_caps_the_importance_weights():
    rng = np.random.default_rng(2)
    _, rewards, values, step_types, discounts = random_episodes(rng, T=10, B=3)
    big = np.full_like(values, 3.0)  # rho = e^3 ~ 20
    on_policy = value_ops.vtrace(np.zeros_like(values), rewards, values, step_types, discounts)
    clipped = value_ops.vtrace(big, rewards, values, step_types, discounts)
    # every threshold at 1: a weight above 1 acts exactly like the on-policy weight 1
    np.testing.assert_allclose(clipped[0], on_policy[0])
    np.testing.assert_allclose(clipped[1], on_policy[1])
    unclipped = value_ops.vtrace(
        big, rewards, values, step_types, discounts,
        clip_rho_threshold=None, clip_pg_rho_threshold=None, clip_c_threshold=None,
    )  # fmt: skip
    assert not np.allclose(unclipped[0], on_policy[0])
    # clip_pg_rho_threshold scales only the advantages, never the value targets
    pg_only = value_ops.vtrace(big, rewards, values, step_types, discounts, clip_pg_rho_threshold=0.5)
    np.testing.assert_allclose(pg_only[0], on_policy[0])
    np.testing.assert_allclose(pg_only[1], 0.5 * on_policy[1])
    # small weights (behaviour far more likely than target) are never clipped up
    small = np.full_like(values, -1.0)
    vs_small, pg_small = value_ops.vtrace(small, rewards, values, step_types, discounts)
    ref = reference_columns(
        small, rewards, values, step_types, discounts,
        clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, clip_c_threshold=1.0, lambda_=1.0,
    )  # fmt: skip
    np.testing.assert_allclose(vs_small, ref[0], rtol=1e-10)
    np.testing.assert_allclose(pg_small, ref[1], rtol=1e-10, atol=1e-12)


def test_nothing_leaks_back_across_a_terminated_episode_end():
    rng = np.random.default_rng(3)
    log_rhos, rewards, values, step_types, discounts = random_episodes(rng, T=8, B=1)
    step_types[:, 0] = [FIRST, MID, MID, LAST, FIRST, MID, MID, MID]
    discounts[3, 0] = 0.0
    vs, pg = value_ops.vtrace(log_rhos, rewards, values, step_types, discounts)
    changed_rewards, changed_values, changed_rhos = rewards.copy(), values.copy(), log_rhos.copy()
    changed_rewards[4:] += 100.0
    changed_values[3:] += 100.0  # the terminal step's own value is never bootstrapped from either
    changed_rhos[3:] += 2.0
    vs2, pg2 = value_ops.vtrace(changed_rhos, changed_rewards, changed_values, step_types, discounts)
    np.testing.assert_allclose(vs2[:3], vs[:3])
    np.testing.assert_allclose(pg2[:3], pg[:3])


def test_truncated_episode_bootstraps_from_its_last_value():
    step_types = np.array([FIRST, MID, LAST, FIRST, MID])
    rewards = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    discounts = np.full(5, 0.9)
    values = np.array([0.0, 0.0, 7.0, 0.0, 0.0])
    vs, _ = value_ops.vtrace(np.zeros(5), rewards, values, step_types, discounts)
    assert vs[1] == pytest.approx(1.0 + 0.9 * 7.0)
    discounts[2] = 0.0  # the same end as a true terminal: no bootstrap
    vs, _ = value_ops.vtrace(np.zeros(5), rewards, values, step_types, discounts)
    assert vs[1] == pytest.approx(1.0)


def test_single_column_and_batch_major_layouts_agree_with_time_major():
    rng = np.random.default_rng(4)
    inputs = random_episodes(rng, T=9, B=3)
    vs, pg = value_ops.vtrace(*inputs, clip_rho_threshold=1.5, lambda_=0.9)
    for b in range(3):
        vs_b, pg_b = value_ops.vtrace(*(x[:, b] for x in inputs), clip_rho_threshold=1.5, lambda_=0.9)
        assert vs_b.shape == (8,)
        np.testing.assert_allclose(vs_b, vs[:, b])
        np.testing.assert_allclose(pg_b, pg[:, b])
    vs_bm, pg_bm = value_ops.vtrace(
        *(x.T for x in inputs), clip_rho_threshold=1.5, lambda_=0.9, time_major=False
    )
    assert vs_bm.shape == (3, 8)
    np.testing.assert_allclose(vs_bm, vs.T)
    np.testing.assert_allclose(pg_bm, pg.T)


def test_float32_inputs_give_float32_outputs():
    rng = np.random.default_rng(5)
    inputs = [x.astype(np.float32) for x in random_episodes(rng, T=6, B=2)]
    inputs[3] = inputs[3].astype(np.int32)
    vs, pg = value_ops.vtrace(*inputs)
    assert vs.dtype == pg.dtype == np.float32


def test_shape_mismatch_is_a_clear_error():
    ones = np.ones((5, 2))
    with pytest.raises(ValueError, match="log_rhos has shape"):
        value_ops.vtrace(np.ones((4, 2)), ones, ones, ones.astype(int), ones)
    with pytest.raises(ValueError, match="at least 2 time steps"):
        value_ops.vtrace(np.ones(1), np.ones(1), np.ones(1), np.ones(1, dtype=int), np.ones(1))
