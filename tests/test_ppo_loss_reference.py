"""PPO's loss, statistics and gradients on both backends against an independent numpy reference.

The reference is the clipped surrogate of Schulman et al. 2017 (eq. 7) with
the value term and entropy bonus of eq. 9, written here from the paper and
the config docstrings in float64 (``tests/numpy_reference.py`` supplies the
network and the distributions). Each case takes one plain-SGD step on the
whole fixed batch and compares every statistic the learner reports and the
update of every weight with ``lr x`` the finite-difference gradient of the
reference loss. Every option that changes the math has a case, set so that a
wrong implementation changes the numbers (checked by ``bench/mutation_check.py``).
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

N = 24
# float32 frameworks against a float64 reference: the stats agree to ~1e-6 relative.
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def ppo_batch(policy, continuous: bool, seed: int = 0) -> SB:
    """A batch whose old log-probabilities sit near the current ones: ratios within
    about 0.6-1.6, so clip ranges of 0.1 to 0.3 clip some rows and not others."""
    rng = np.random.default_rng(seed)
    obs_dim = policy.observation_space.size
    obs = rng.normal(size=(N, obs_dim)).astype(np.float32)
    if continuous:
        actions = rng.normal(size=(N, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=N).astype(np.int64)
    dist_inputs, values = actor_critic(policy.get_weights(), obs, policy.config.model.activation)
    logp, _ = logp_and_entropy(dist_inputs, actions, continuous)
    return SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.ACTION_LOGP: (logp + 0.25 * rng.normal(size=N)).astype(np.float32),
            # Old value predictions off from the current ones by -1..1, so value clipping bites.
            SB.VF_PREDS: (values + rng.uniform(-1.0, 1.0, size=N)).astype(np.float32),
            # Advantages with a non-zero mean and a non-unit scale: normalising them matters.
            SB.ADVANTAGES: (0.7 + 2.0 * rng.normal(size=N)).astype(np.float32),
            SB.VALUE_TARGETS: (values + rng.normal(size=N)).astype(np.float32),
        }
    )


def reference(weights, batch: SB, training, continuous: bool, activation: str, clip: float):
    """``(loss, stats)`` of PPO on ``batch`` in float64, as the paper and the config define them."""
    dist_inputs, values = actor_critic(weights, batch[SB.OBS], activation)
    logp, entropy = logp_and_entropy(dist_inputs, batch[SB.ACTIONS], continuous, batch.get(SB.ACTION_MASK))
    log_ratio = logp - batch[SB.ACTION_LOGP].astype(np.float64)
    ratio = np.exp(log_ratio)
    advantages = batch[SB.ADVANTAGES].astype(np.float64)
    if training.normalize_advantages:
        advantages = normalized(advantages)
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 1 - clip, 1 + clip) * advantages)
    policy_loss = -surrogate.mean()
    targets = batch[SB.VALUE_TARGETS].astype(np.float64)
    vf_error = (values - targets) ** 2
    if training.vf_clip_param is not None:
        old = batch[SB.VF_PREDS].astype(np.float64)
        clipped_values = old + np.clip(values - old, -training.vf_clip_param, training.vf_clip_param)
        vf_error = np.maximum(vf_error, (clipped_values - targets) ** 2)
    vf_loss = 0.5 * vf_error.mean()
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy.mean()
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": entropy.mean(),
        "approx_kl": ((ratio - 1) - log_ratio).mean(),
        "clip_fraction": (np.abs(ratio - 1) > clip).mean(),
        "total_loss": loss,
    }
    return loss, stats


CASES = {
    # name: (continuous, training overrides, model overrides)
    "discrete-defaults": (False, {}, {}),
    "discrete-clip-0.1": (False, {"clip_param": 0.1}, {}),
    "discrete-clip-0.3": (False, {"clip_param": 0.3}, {}),
    "no-advantage-normalisation": (False, {"normalize_advantages": False}, {}),
    "value-clipping": (False, {"vf_clip_param": 0.4}, {}),
    "coefficients": (False, {"entropy_coeff": 0.03, "vf_loss_coeff": 0.7}, {}),
    "grad-clip-active": (False, {"grad_clip": 0.05}, {}),
    "shared-layers-relu": (False, {"vf_clip_param": 0.4, "entropy_coeff": 0.02}, {"vf_share_layers": True,
                                                                                  "activation": "relu"}),
    "continuous": (True, {"entropy_coeff": 0.03, "vf_loss_coeff": 0.7, "vf_clip_param": 0.4}, {}),
    "continuous-no-normalisation": (True, {"normalize_advantages": False, "clip_param": 0.15}, {}),
}  # fmt: skip


def build(tmp_path, backend, continuous, training, model):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    base = {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, "sgd_minibatch_size": N, "num_sgd_iter": 1}
    config = resolve(
        tmp_path, "ppo", {**base, **training}, model, env="Pendulum-v1" if continuous else "CartPole-v1",
        backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_ppo_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training_overrides, model = CASES[case]
    policy = build(tmp_path, backend, continuous, training_overrides, model)
    training = policy.config.training
    batch = ppo_batch(policy, continuous)
    weights = policy.get_weights()
    activation = policy.config.model.activation

    def loss_of(w):
        return reference(w, batch, training, continuous, activation, training.clip_param)[0]

    _, expected = reference(weights, batch, training, continuous, activation, training.clip_param)
    grads = finite_difference_gradient(loss_of, weights)
    stats, update = sgd_step(policy, batch)

    assert 0.0 < expected["clip_fraction"] < 1.0  # both branches of the surrogate's min are taken
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert stats["cur_lr"] == pytest.approx(training.lr)
    if training.grad_clip is not None:
        assert global_norm(grads) > training.grad_clip  # the clip is active in this case
    assert_update_is_sgd_on(update, grads, training.lr, training.grad_clip)


VALUE_CLIP_CASES = sorted(name for name, (_, training, _) in CASES.items() if "vf_clip_param" in training)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", VALUE_CLIP_CASES)
def test_value_clipping_cases_take_the_clipped_error_on_some_rows_and_not_others(tmp_path, backend, case):
    """Every case with ``vf_clip_param`` is set so that max(unclipped, clipped) differs from either alone,
    on the batch and weights each backend's run of that case uses (so min for max, or either term
    alone, changes its numbers on both backends)."""
    continuous, training_overrides, model = CASES[case]
    policy = build(tmp_path, backend, continuous, training_overrides, model)
    clip = policy.config.training.vf_clip_param
    batch = ppo_batch(policy, continuous)
    _, values = actor_critic(policy.get_weights(), batch[SB.OBS], policy.config.model.activation)
    old, targets = batch[SB.VF_PREDS], batch[SB.VALUE_TARGETS]
    unclipped = (values - targets) ** 2
    clipped = (old + np.clip(values - old, -clip, clip) - targets) ** 2
    assert (clipped > unclipped + 1e-6).any() and (unclipped > clipped + 1e-6).any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timestep", [20_000, 70_000])
def test_lr_and_clip_schedules_are_read_at_the_policys_global_timestep(tmp_path, backend, timestep):
    schedules = {
        "lr_schedule": [[0, 1.0], [100_000, 0.0]],
        "clip_param_schedule": [[0, 0.3], [100_000, 0.1]],
    }
    policy = build(tmp_path, backend, False, schedules, {})
    policy.set_global_timestep(timestep)
    lr = 1.0 - timestep / 100_000
    clip = 0.3 - 0.2 * timestep / 100_000
    training = policy.config.training
    batch = ppo_batch(policy, False, seed=1)
    weights = policy.get_weights()

    def loss_of(w):
        return reference(w, batch, training, False, "tanh", clip)[0]

    _, expected = reference(weights, batch, training, False, "tanh", clip)
    grads = finite_difference_gradient(loss_of, weights)
    stats, update = sgd_step(policy, batch)
    assert stats["cur_lr"] == pytest.approx(lr)
    assert stats["clip_fraction"] == pytest.approx(expected["clip_fraction"])
    assert stats["policy_loss"] == pytest.approx(expected["policy_loss"], rel=STAT_RTOL, abs=STAT_ATOL)
    assert_update_is_sgd_on(update, grads, lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_gradients_uses_the_scheduled_clip_and_matches_the_reference(tmp_path, backend):
    """compute_gradients (the asynchronous path) on a fresh policy, with no learn call before it:
    the clip in force is the schedule's at the policy's timestep, and the gradients are the
    reference's. (The TF policy once set its clip only inside learn_on_batch.)"""
    policy = build(tmp_path, backend, False, {"clip_param_schedule": [[0, 0.3], [100_000, 0.1]]}, {})
    policy.set_global_timestep(50_000)
    training = policy.config.training
    batch = ppo_batch(policy, False, seed=2)
    weights = policy.get_weights()

    def loss_of(w):
        return reference(w, batch, training, False, "tanh", 0.2)[0]

    _, expected = reference(weights, batch, training, False, "tanh", 0.2)
    grads, stats = policy.compute_gradients(batch)
    assert 0.0 < expected["clip_fraction"] < 1.0
    for key in ("policy_loss", "clip_fraction", "total_loss"):
        assert stats[key] == pytest.approx(expected[key], rel=STAT_RTOL, abs=STAT_ATOL), key
    reference_grads = finite_difference_gradient(loss_of, weights)
    for name, value in reference_grads.items():
        np.testing.assert_allclose(grads[name], value, rtol=2e-3, atol=2e-5, err_msg=name)
