"""PG, A2C and A3C losses on both backends against an independent numpy reference.

The reference is the advantage actor-critic loss of Mnih et al. 2016
(arXiv:1602.01783, the policy-gradient term on given advantages, half the
squared error of the value head, an entropy bonus) and REINFORCE with an
optional learned baseline (Sutton & Barto 2018, 13.4), written here in float64
from the papers and the config docstrings. PG and A2C take one plain-SGD step
on the whole batch (``learn_on_batch``); A3C splits it into the worker's
``compute_gradients`` (unclipped, no weight change) and the learner's
``apply_gradients`` (clipped by ``grad_clip``, scaled by the learning rate),
and both halves are checked. Rates are checked at two timesteps of an
``lr_schedule``.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
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
    normalized,
    random_weights,
    resolve,
    sgd_step,
)

N = 20
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def batch_for(policy, continuous: bool, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N, policy.observation_space.size)).astype(np.float32)
    if continuous:
        actions = rng.normal(size=(N, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=N).astype(np.int64)
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            # A non-zero mean and a non-unit scale, so normalising the advantages matters.
            SB.ADVANTAGES: (0.5 + 1.5 * rng.normal(size=N)).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=N).astype(np.float32),
        }
    )


def reference(weights, batch: SB, training, continuous: bool, value_term: bool, normalize: bool):
    """``(loss, stats)``: -mean(logp * A) + c_v * 0.5 * mean((V - target)^2) - c_e * mean(entropy)."""
    dist_inputs, values = actor_critic(weights, batch[SB.OBS])
    logp, entropy = logp_and_entropy(dist_inputs, batch[SB.ACTIONS], continuous, batch.get(SB.ACTION_MASK))
    advantages = batch[SB.ADVANTAGES].astype(np.float64)
    if normalize:
        advantages = normalized(advantages)
    policy_loss = -(logp * advantages).mean()
    loss = policy_loss - training.entropy_coeff * entropy.mean()
    stats = {"policy_loss": policy_loss, "entropy": entropy.mean()}
    if value_term:
        vf_loss = 0.5 * ((values - batch[SB.VALUE_TARGETS]) ** 2).mean()
        loss = loss + training.vf_loss_coeff * vf_loss
        stats["vf_loss"] = vf_loss
    stats["total_loss"] = loss
    return loss, stats


def build(tmp_path, algorithm, backend, continuous, training):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, **training},
        env="Pendulum-v1" if continuous else "CartPole-v1", backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def check_step(policy, continuous: bool, value_term: bool, normalize: bool, lr: float | None = None):
    training = policy.config.training
    # Read before the step: a policy that changed its own config while learning must not move the goalposts.
    lr = training.lr if lr is None else lr
    grad_clip = training.grad_clip
    batch = batch_for(policy, continuous)
    weights = policy.get_weights()
    _, expected = reference(weights, batch, training, continuous, value_term, normalize)
    grads = finite_difference_gradient(
        lambda w: reference(w, batch, training, continuous, value_term, normalize)[0], weights
    )
    stats, update = sgd_step(policy, batch)
    assert set(expected) <= set(stats), sorted(stats)
    if not value_term:
        assert "vf_loss" not in stats
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert stats["cur_lr"] == pytest.approx(lr)
    if grad_clip is not None:
        assert global_norm(grads) > grad_clip  # the clip is active in this case
    assert_update_is_sgd_on(update, grads, lr, grad_clip)
    return update


PG_CASES = {
    "baseline-normalised": (False, {}),
    "baseline-raw-advantages": (False, {"normalize_advantages": False}),
    "no-baseline": (False, {"use_baseline": False, "entropy_coeff": 0.05}),
    "coefficients": (False, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8}),
    "grad-clip-active": (False, {"entropy_coeff": 0.04, "grad_clip": 0.05}),
    "continuous": (True, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8, "normalize_advantages": False}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(PG_CASES))
def test_pg_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training = PG_CASES[case]
    policy = build(tmp_path, "pg", backend, continuous, training)
    config = policy.config.training
    update = check_step(policy, continuous, config.use_baseline, config.normalize_advantages)
    if not config.use_baseline:  # no gradient reaches the unused value head
        assert not np.any(update["value/output/kernel"])


A2C_CASES = {
    "defaults": (False, {}),
    "normalised": (False, {"normalize_advantages": True}),
    "coefficients": (False, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8}),
    "grad-clip-active": (False, {"entropy_coeff": 0.04, "grad_clip": 0.05}),
    "continuous": (True, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8, "normalize_advantages": True}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(A2C_CASES))
def test_a2c_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    """A2C's default optimizer is RMSprop; plain SGD here makes the update show the gradient."""
    continuous, training = A2C_CASES[case]
    policy = build(tmp_path, "a2c", backend, continuous, training)
    check_step(policy, continuous, True, policy.config.training.normalize_advantages)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["pg", "a2c", "a3c"])
@pytest.mark.parametrize("timestep", [10_000, 60_000])
def test_lr_schedule_sets_the_step_size_at_the_policys_global_timestep(
    tmp_path, backend, algorithm, timestep
):
    policy = build(tmp_path, algorithm, backend, False, {"lr_schedule": [[0, 1.0], [100_000, 0.2]]})
    policy.set_global_timestep(timestep)
    lr = 1.0 - 0.8 * timestep / 100_000
    normalize = bool(getattr(policy.config.training, "normalize_advantages", False))
    check_step(policy, False, True, normalize, lr=lr)


A3C_CASES = {
    "discrete": (False, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8}),
    "discrete-clipped": (False, {"entropy_coeff": 0.04, "grad_clip": 0.05}),
    "continuous-clipped": (True, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8, "grad_clip": 0.1}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(A3C_CASES))
def test_a3c_worker_gradients_and_learner_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training = A3C_CASES[case]
    policy = build(tmp_path, "a3c", backend, continuous, training)
    config = policy.config.training
    batch = batch_for(policy, continuous)
    weights = policy.get_weights()
    _, expected = reference(weights, batch, config, continuous, True, False)
    grads = finite_difference_gradient(
        lambda w: reference(w, batch, config, continuous, True, False)[0], weights
    )

    # The worker's half: the unclipped gradient and the loss's stats; the weights stay as they were.
    worker_grads, stats = policy.compute_gradients(batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert set(worker_grads) == set(grads)
    for name, expected_grad in grads.items():
        np.testing.assert_allclose(worker_grads[name], expected_grad, rtol=2e-3, atol=2e-6, err_msg=name)
    np.testing.assert_equal(policy.get_weights(), weights)

    # The learner's half: clip by grad_clip, step by lr.
    policy.apply_gradients(worker_grads)
    after = policy.get_weights()
    update = {name: weights[name].astype(np.float64) - after[name] for name in weights}
    if config.grad_clip is not None:
        assert global_norm(grads) > config.grad_clip
    assert_update_is_sgd_on(update, grads, config.lr, config.grad_clip)
