"""IMPALA's V-trace loss on both backends against an independent numpy reference.

The reference follows Espeholt et al. 2018 (arXiv:1802.01561): V-trace targets
``v_s`` (eq. 1) and policy-gradient advantages ``rho_s (r + gamma v_{s+1} - V(x_s))``
(eq. 4) from ``tests/test_vtrace.py``'s explicit-sum ``reference_vtrace``, which
shares no code with either backend; the loss is the policy-gradient term, half
the squared error ``(V(x_s) - v_s)^2`` and the entropy bonus, averaged over the
learned steps (neither LAST, whose action is ignored, nor the bootstrap row).
Targets and advantages are constants of the loss (computed from the weights
before the step), so the finite-difference gradient holds them fixed.

Each case takes plain-SGD steps (``learn_on_batch``) on sequences ``[N, T+1]``
that hold terminated and truncated episode ends, and compares every statistic
and the update of every weight; ``compute_gradients`` (what an A3C-style
worker sends) is checked too, and the rate (``cur_lr`` and the step size) at
two timesteps of an ``lr_schedule``.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    actor_critic,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_vtrace import random_episodes, reference_vtrace

SEQUENCES, STEPS = 5, 7  # [N, T+1]
LAST = int(StepType.LAST)
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def sequences(policy, continuous: bool, seed: int = 0) -> SB:
    """Sequences whose behaviour log-probabilities are off from the current policy's by
    -1.2..1.2, so importance weights fall on both sides of every clipping threshold tested."""
    rng = np.random.default_rng(seed)
    _, rewards, _, step_types, discounts = random_episodes(rng, T=STEPS, B=SEQUENCES, gamma=1.0)
    obs = rng.normal(size=(SEQUENCES, STEPS, policy.observation_space.size)).astype(np.float32)
    if continuous:
        actions = rng.normal(size=(SEQUENCES, STEPS, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=(SEQUENCES, STEPS)).astype(np.int64)
    dist_inputs, _ = actor_critic(policy.get_weights(), obs.reshape(SEQUENCES * STEPS, -1))
    logp, _ = logp_and_entropy(
        dist_inputs, actions.reshape(SEQUENCES * STEPS, *actions.shape[2:]), continuous
    )
    behaviour = logp.reshape(SEQUENCES, STEPS) + rng.uniform(-1.2, 1.2, size=(SEQUENCES, STEPS))
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.REWARDS: rewards.T.astype(np.float32),
            SB.DISCOUNTS: discounts.T.astype(np.float32),
            SB.STEP_TYPES: step_types.T.astype(np.int32),
            SB.ACTION_LOGP: behaviour.astype(np.float32),
        }
    )


def forward(weights, batch: SB, continuous: bool):
    """Per-step ``logp, entropy, values``, each ``[N, T+1]``."""
    obs, actions = batch[SB.OBS], batch[SB.ACTIONS]
    dist_inputs, values = actor_critic(weights, obs.reshape(SEQUENCES * STEPS, -1))
    mask = batch.get(SB.ACTION_MASK)  # [N, T+1, n]: each step's own mask
    logp, entropy = logp_and_entropy(
        dist_inputs, actions.reshape(SEQUENCES * STEPS, *actions.shape[2:]), continuous, mask
    )
    return (x.reshape(SEQUENCES, STEPS) for x in (logp, entropy, values))


def vtrace_targets(weights, batch: SB, training, continuous: bool):
    """``(vs, pg_advantages, rhos)`` ``[N, T]`` from the weights, per the paper (constants of the loss)."""
    logp, _, values = forward(weights, batch, continuous)
    log_rhos = logp - batch[SB.ACTION_LOGP]
    vs, pg = [], []
    for n in range(SEQUENCES):
        column_vs, column_pg = reference_vtrace(
            log_rhos[n], batch[SB.REWARDS][n].astype(np.float64), values[n], batch[SB.STEP_TYPES][n],
            batch[SB.DISCOUNTS][n].astype(np.float64) * training.gamma,
            training.vtrace_clip_rho_threshold, training.vtrace_clip_pg_rho_threshold,
            training.vtrace_clip_c_threshold, training.vtrace_lambda,
        )  # fmt: skip
        vs.append(column_vs)
        pg.append(column_pg)
    return np.array(vs), np.array(pg), np.exp(log_rhos[:, :-1])


def reference(weights, batch: SB, training, continuous: bool, vs, pg, rhos):
    logp, entropy, values = forward(weights, batch, continuous)
    learned = batch[SB.STEP_TYPES][:, :-1] != LAST
    count = learned.sum()
    policy_loss = -(logp[:, :-1] * pg)[learned].sum() / count
    vf_loss = 0.5 * ((values[:, :-1] - vs) ** 2)[learned].sum() / count
    mean_entropy = entropy[:, :-1][learned].sum() / count
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": mean_entropy,
        "mean_rho": rhos[learned].mean(),
        "total_loss": loss,
    }
    return loss, stats


def build(tmp_path, backend, continuous, training):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "entropy_coeff": 0.03, "vf_loss_coeff": 0.7}
    config = resolve(
        tmp_path, "impala", {**base, **training}, env="Pendulum-v1" if continuous else "CartPole-v1",
        backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def expected_step(policy, batch, continuous):
    """The reference stats and gradient of one step from the policy's current weights."""
    training = policy.config.training
    weights = policy.get_weights()
    vs, pg, rhos = vtrace_targets(weights, batch, training, continuous)
    _, stats = reference(weights, batch, training, continuous, vs, pg, rhos)
    grads = finite_difference_gradient(
        lambda w: reference(w, batch, training, continuous, vs, pg, rhos)[0], weights
    )
    return stats, grads, rhos


NO_CLIPS = {
    "vtrace_clip_rho_threshold": None,
    "vtrace_clip_pg_rho_threshold": None,
    "vtrace_clip_c_threshold": None,
}
CASES = {
    # name: (continuous, training overrides)
    "default-clips": (False, {}),
    "clips-off": (False, NO_CLIPS),
    "rho-bar-0.8": (False, {"vtrace_clip_rho_threshold": 0.8}),
    "pg-rho-bar-0.6": (False, {"vtrace_clip_pg_rho_threshold": 0.6}),
    "c-bar-0.7": (False, {"vtrace_clip_c_threshold": 0.7}),
    "lambda-gamma": (False, {"vtrace_lambda": 0.8, "gamma": 0.9}),
    "grad-clip-active": (False, {"grad_clip": 0.05}),
    "continuous": (True, {"vtrace_clip_rho_threshold": 1.5, "vtrace_lambda": 0.9}),
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_impala_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training = CASES[case]
    policy = build(tmp_path, backend, continuous, training)
    config = policy.config.training
    batch = sequences(policy, continuous)
    ends = batch[SB.STEP_TYPES][:, :-1] == LAST
    terminal = batch[SB.DISCOUNTS][:, :-1] == 0
    assert (ends & terminal).any() and (ends & ~terminal).any()  # both kinds of episode end
    expected, grads, rhos = expected_step(policy, batch, continuous)
    for threshold in (config.vtrace_clip_rho_threshold, config.vtrace_clip_pg_rho_threshold):
        if threshold is not None:
            assert (rhos > threshold).any() and (rhos < threshold).any()  # the clip bites on some rows
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert stats["cur_lr"] == pytest.approx(config.lr)
    if config.grad_clip is not None:
        assert global_norm(grads) > config.grad_clip
    assert_update_is_sgd_on(update, grads, config.lr, config.grad_clip)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timestep", [20_000, 70_000])
def test_lr_schedule_sets_the_step_size_at_the_policys_global_timestep(tmp_path, backend, timestep):
    """The schedule's rate at the timestep (0.42 and 0.22), not ``lr`` (0.3): in ``cur_lr`` and in the step."""
    policy = build(tmp_path, backend, False, {"lr_schedule": [[0, 0.5], [100_000, 0.1]]})
    policy.set_global_timestep(timestep)
    lr = 0.5 - 0.4 * timestep / 100_000
    assert lr != pytest.approx(policy.config.training.lr)
    batch = sequences(policy, False, seed=1)
    expected, grads, _ = expected_step(policy, batch, False)
    stats, update = sgd_step(policy, batch)
    assert stats["cur_lr"] == pytest.approx(lr)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert_update_is_sgd_on(update, grads, lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_passes_recompute_vtrace_with_the_updated_weights(tmp_path, backend):
    """``num_sgd_iter: 2`` is two sequential steps, the second from the first one's weights."""
    policy = build(tmp_path, backend, False, {"num_sgd_iter": 2})
    batch = sequences(policy, False)
    start = policy.get_weights()
    _, first_grads, _ = expected_step(policy, batch, False)
    lr = policy.config.training.lr
    middle = {k: (start[k] - lr * first_grads[k]).astype(np.float32) for k in start}
    shadow = build(tmp_path / "shadow", backend, False, {})
    shadow.set_weights(middle)
    _, second_grads, _ = expected_step(shadow, batch, False)
    policy.learn_on_batch(batch)
    end = policy.get_weights()
    for name in start:
        np.testing.assert_allclose(
            end[name], middle[name] - lr * second_grads[name], rtol=2e-3, atol=2e-6, err_msg=name
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_gradients_returns_the_reference_gradient_and_changes_nothing(tmp_path, backend):
    policy = build(tmp_path, backend, False, {"vtrace_lambda": 0.9})
    batch = sequences(policy, False)
    expected, grads, _ = expected_step(policy, batch, False)
    before = policy.get_weights()
    worker_grads, stats = policy.compute_gradients(batch)
    np.testing.assert_equal(policy.get_weights(), before)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    for name, value in grads.items():
        np.testing.assert_allclose(worker_grads[name], value, rtol=2e-3, atol=2e-6, err_msg=name)
