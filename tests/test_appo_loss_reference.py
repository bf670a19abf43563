"""APPO's loss on both backends against an independent float64 numpy reference.

The reference is RLlib's APPO formulation, written from its definition (see
``plugins/algorithms/appo/torch_policy.py``) and sharing no code with either backend:
V-trace targets ``v_s`` and advantages ``A`` from ``tests/test_vtrace.py``'s explicit-sum
``reference_vtrace`` on the target network's importance weights ``pi_target / mu`` (or
``pi / mu`` without a target network), the ratio ``r = min(2, mu / pi_target) * pi / mu``
(``pi / mu``), PPO's clipped surrogate ``min(A r, A clip(r, 1 - eps, 1 + eps))``, half the
squared error ``(V(x_s) - v_s)^2``, the entropy bonus and ``kl_coeff * KL(pi_target || pi)``,
each averaged over the learned steps (neither LAST nor the bootstrap row). Targets,
advantages and the target network are constants of the loss, so the finite-difference
gradient holds them fixed.

Each case takes one plain-SGD step (``learn_on_batch``) on sequences ``[N, T+1]`` holding
terminated and truncated episode ends, with target weights apart from the learner's, and
compares every statistic and the update of every weight.
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
    kl_divergence,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_impala_loss_reference import LAST, SEQUENCES, STEPS, forward, sequences
from tests.test_vtrace import reference_vtrace

STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def target_weights(
    weights: dict[str, np.ndarray], seed: int = 7, scale: float = 0.25
) -> dict[str, np.ndarray]:
    """The learner's weights moved by seeded noise: a target network some updates behind."""
    rng = np.random.default_rng(seed)
    return {k: (v + scale * rng.normal(size=v.shape)).astype(np.float32) for k, v in weights.items()}


def constants(weights, target, batch: SB, training, continuous: bool):
    """``(vs, A, log_rhos, target_dist_inputs)``: V-trace per the paper on the chosen importance weights."""
    logp, _, values = forward(weights, batch, continuous)
    if training.use_target_network:
        importance_logp, _, _ = forward(target, batch, continuous)
    else:
        importance_logp = logp
    log_rhos = importance_logp - batch[SB.ACTION_LOGP]
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
    target_inputs, _ = actor_critic(target, batch[SB.OBS].reshape(SEQUENCES * STEPS, -1))
    return np.array(vs), np.array(pg), log_rhos, target_inputs


def reference(weights, batch: SB, training, continuous: bool, vs, pg, log_rhos, target_inputs, kl_coeff):
    logp, entropy, values = forward(weights, batch, continuous)
    behaviour = batch[SB.ACTION_LOGP].astype(np.float64)
    if training.use_target_network:
        ratio = np.clip(np.exp(-log_rhos), 0.0, 2.0) * np.exp(logp - behaviour)
    else:
        ratio = np.exp(logp - behaviour)
    ratio = ratio[:, :-1]
    eps = training.clip_param
    surrogate = np.minimum(pg * ratio, pg * np.clip(ratio, 1.0 - eps, 1.0 + eps))
    learned = batch[SB.STEP_TYPES][:, :-1] != LAST
    policy_loss = -surrogate[learned].mean()
    vf_loss = 0.5 * ((values[:, :-1] - vs) ** 2)[learned].mean()
    mean_entropy = entropy[:, :-1][learned].mean()
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": mean_entropy,
        "mean_rho": np.exp(log_rhos[:, :-1])[learned].mean(),
        "clip_fraction": (np.abs(ratio - 1.0) > eps)[learned].mean(),
    }
    if training.use_target_network:
        dist_inputs, _ = actor_critic(weights, batch[SB.OBS].reshape(SEQUENCES * STEPS, -1))
        kl = kl_divergence(target_inputs, dist_inputs, continuous).reshape(SEQUENCES, STEPS)[:, :-1]
        stats["kl"] = kl[learned].mean()
        if training.use_kl_loss:
            loss = loss + kl_coeff * stats["kl"]
    stats["total_loss"] = loss
    return loss, stats


def build(tmp_path, backend, continuous, training):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "entropy_coeff": 0.03, "vf_loss_coeff": 0.7,
            "num_sgd_iter": 1}  # fmt: skip
    config = resolve(
        tmp_path, "appo", {**base, **training}, env="Pendulum-v1" if continuous else "CartPole-v1",
        backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))  # the target copies them
    policy.set_target_weights(target_weights(policy.get_weights()))
    return policy


def expected_step(policy, batch, continuous):
    """The reference stats and gradient of one step from the policy's current weights."""
    training = policy.config.training
    weights, target = policy.get_weights(), policy.get_target_weights()
    consts = constants(weights, target, batch, training, continuous)
    args = (batch, training, continuous, *consts, policy.kl_coeff)
    _, stats = reference(weights, *args)
    grads = finite_difference_gradient(lambda w: reference(w, *args)[0], weights)
    return stats, grads, consts


NO_CLIPS = {
    "vtrace_clip_rho_threshold": None,
    "vtrace_clip_pg_rho_threshold": None,
    "vtrace_clip_c_threshold": None,
}
CASES = {
    # name: (continuous, training overrides)
    "target-network": (False, {}),
    "behaviour-ratios": (False, {"use_target_network": False}),
    "clip-0.1": (False, {"clip_param": 0.1}),
    "kl-loss": (False, {"use_kl_loss": True, "kl_coeff": 0.7}),
    "coefficients": (False, {"vf_loss_coeff": 0.2, "entropy_coeff": 0.3}),
    "vtrace-clips-off": (False, NO_CLIPS),
    "rho-bar-0.8": (False, {"vtrace_clip_rho_threshold": 0.8}),
    "pg-rho-bar-0.6": (False, {"vtrace_clip_pg_rho_threshold": 0.6}),
    "c-bar-0.7-lambda-gamma": (False, {"vtrace_clip_c_threshold": 0.7, "vtrace_lambda": 0.8, "gamma": 0.9}),
    "continuous-kl": (True, {"use_kl_loss": True, "kl_coeff": 0.5, "vtrace_clip_rho_threshold": 1.5}),
    "continuous-behaviour": (True, {"use_target_network": False}),
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_appo_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training = CASES[case]
    policy = build(tmp_path, backend, continuous, training)
    config = policy.config.training
    batch = sequences(policy, continuous)
    ends = batch[SB.STEP_TYPES][:, :-1] == LAST
    terminal = batch[SB.DISCOUNTS][:, :-1] == 0
    assert (ends & terminal).any() and (ends & ~terminal).any()  # both kinds of episode end
    expected, grads, (_, _, log_rhos, _) = expected_step(policy, batch, continuous)
    rhos = np.exp(log_rhos[:, :-1])
    for threshold in (config.vtrace_clip_rho_threshold, config.vtrace_clip_pg_rho_threshold):
        if threshold is not None:
            assert (rhos > threshold).any() and (rhos < threshold).any()  # the clip bites on some rows
    assert 0.0 < expected["clip_fraction"] < 1.0  # the surrogate's clip bites on some rows, not all
    if config.use_target_network:
        assert (1.0 / rhos > 2.0).any()  # the behaviour-over-target cap bites too
        assert expected["kl"] > 1e-3  # the target network is apart from the learner
    else:
        assert "kl" not in expected
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert_update_is_sgd_on(update, grads, config.lr, config.grad_clip)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kl_term_changes_the_update_by_kl_coeff_times_its_gradient(tmp_path, backend):
    """The KL term's weight is the policy's current (adapted) coefficient, not training.kl_coeff."""
    policy = build(tmp_path, backend, False, {"use_kl_loss": True, "kl_coeff": 0.7})
    policy.kl_coeff = 3.0
    batch = sequences(policy, False, seed=2)
    expected, grads, _ = expected_step(policy, batch, False)
    stats, update = sgd_step(policy, batch)
    assert stats["kl_coeff"] == pytest.approx(3.0)
    assert stats["total_loss"] == pytest.approx(expected["total_loss"], rel=STAT_RTOL, abs=STAT_ATOL)
    assert_update_is_sgd_on(update, grads, policy.config.training.lr)
