"""mappo's centralised critic against independent float64 numpy references, on both backends.

- The critic input (``training.critic_input``) of every trained row of a scripted 3-agent env
  (:func:`tests.mappo_envs.make_scripted`: each observation says which agent, env slot and step it
  is; agent ``c`` sits out odd steps, and has a policy of its own so the joint observation crosses
  policies), rebuilt here from the row's own observation: ``state`` and ``joint_obs``, fragments
  cut mid-episode so carried rows are checked too. The ``vf_preds`` the rows carry are the
  critic's outputs on that input, and ``value_targets - advantages`` its denormalized values.
- ValueNorm: the debiased EMA of the MAPPO authors' code (beta 0.99999, epsilon 1e-5, variance
  at least 1e-2), written here again, against the policy's statistics after ``learn_on_batch``.
- The loss: PPO's clipped surrogate with the value term on the critic's outputs against targets
  normalized with the statistics updated once by this batch (``value_normalization: true``) or
  raw (false); loss statistics and the update of every weight (plain SGD: ``lr x`` the
  finite-difference gradient of the reference), value clipping on and off.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS
from tests.numpy_reference import assert_update_is_sgd_on as assert_sgd
from tests.numpy_reference import (
    dense,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    mlp_body,
    normalized,
    random_weights,
    sgd_step,
)

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

ENV = "tests.mappo_envs:make_scripted"
AGENTS = ("a", "b", "c")
END = 5  # the scripted episodes' last step
N = 24
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5


def config(backend: str, training: dict | None = None, state: bool = True, **sections) -> dict:
    raw = {
        "algorithm": "mappo",
        "backend": backend,
        "seed": 3,
        "env": {"adapter": "vector", "name": ENV, "kwargs": {"state": state}},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        "training": {
            "train_batch_size": 8,
            "sgd_minibatch_size": 8,
            "num_sgd_iter": 1,
            "value_normalization": True,
            **(training or {}),
        },
        "model": {"hidden_sizes": [8, 6]},
        "multiagent": {"policies": {"ab": {}, "c": {}}, "policy_mapping": {"c": "c", "*": "ab"}},
        "logging": {"tensorboard": False, "progress": "none"},
    }
    raw.update(sections)
    return raw


def critic(weights, x: np.ndarray, activation: str = "tanh") -> np.ndarray:
    """The critic MLP ``critic/hidden_<i>``, ``critic/output`` in float64."""
    return dense(
        weights, "critic/output", mlp_body(weights, "critic", np.asarray(x, np.float64), activation)
    )[:, 0]


def c_active(k: np.ndarray) -> np.ndarray:
    return (k % 2 == 0) | (k == END)


def expected_critic_input(obs: np.ndarray, mode: str) -> np.ndarray:
    """Each row's critic input from its own observation ``[agent index, env slot, step]``."""
    index, slot, k = obs[:, 0].astype(int), obs[:, 1], obs[:, 2]
    one_hot = np.eye(3)[index]
    if mode == "state":
        return np.concatenate([np.stack([slot, k, np.full_like(k, 100.0)], 1), one_hot], 1)
    parts = []
    for b in range(3):
        present = np.ones_like(k, bool) if b < 2 else c_active(k.astype(int))
        row = np.stack([np.full_like(k, float(b)), slot, k], 1)
        parts.append(np.where(present[:, None], row, 0.0))
    return np.concatenate([*parts, one_hot], 1)


class ValueNormReference:
    """The MAPPO authors' ValueNorm (per_element_update false), in float64."""

    def __init__(self, beta=0.99999, epsilon=1e-5):
        self.beta, self.eps = beta, epsilon
        self.mean = self.mean_sq = self.debias = 0.0

    def update(self, x):
        x = np.asarray(x, np.float64)
        self.mean = self.beta * self.mean + (1 - self.beta) * x.mean()
        self.mean_sq = self.beta * self.mean_sq + (1 - self.beta) * (x**2).mean()
        self.debias = self.beta * self.debias + (1 - self.beta) * 1.0

    def stats(self):
        mean = self.mean / max(self.debias, self.eps)
        var = max(self.mean_sq / max(self.debias, self.eps) - mean**2, 1e-2)
        return mean, var


# --- the critic input and the values GAE uses ----------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["state", "joint_obs"])
def test_critic_input_and_values_of_every_row_match_the_reference(backend, mode):
    trainer = registry.load_algorithm("mappo")(config(backend, {"critic_input": mode}))
    try:
        worker = trainer.workers.local_worker
        for policy in worker.policy_map.values():
            assert policy.critic_spec.mode == mode
            assert policy.critic_spec.dim == (6 if mode == "state" else 12)
            policy.set_weights(random_weights(policy.get_weights(), seed=7))
            for targets in ([-4.0, -6.0, -9.0], [-3.0, -5.0]):  # statistics away from the start
                policy.value_norm.update(np.array(targets))
        seen_c_absent = 0
        # fragments of 4 env steps, episodes of 6: from the second fragment on, each stream starts
        # with the row carried from the previous one (its critic input built there)
        for _ in range(4):
            batch = worker.sample()
            for pid, rows in batch.policy_batches.items():
                policy = worker.policy_map[pid]
                obs = rows[SB.OBS].astype(np.float64)
                np.testing.assert_allclose(rows["critic_obs"], expected_critic_input(obs, mode), atol=1e-6)
                weights = policy.get_weights()
                np.testing.assert_allclose(
                    rows[SB.VF_PREDS], critic(weights, rows["critic_obs"]), rtol=1e-5, atol=1e-5
                )
                mean, var = policy.value_norm.mean_var()
                denormalized = rows[SB.VF_PREDS].astype(np.float64) * np.sqrt(var) + mean
                np.testing.assert_allclose(
                    rows[SB.VALUE_TARGETS] - rows[SB.ADVANTAGES], denormalized, rtol=1e-4, atol=1e-4
                )
                k = obs[:, 2].astype(int)
                seen_c_absent += int(np.sum(~c_active(k) & (obs[:, 0] < 2)))  # zeros for c's part
        assert seen_c_absent > 0
    finally:
        trainer.stop()


def test_value_norm_matches_the_authors_debiased_ema():
    from rlgear.plugins.algorithms.ppo.mappo.value_norm import ValueNorm

    norm, ref = ValueNorm(), ValueNormReference()
    assert norm.mean_var() == pytest.approx(ref.stats())  # before any update: mean 0, variance 1e-2
    rng = np.random.default_rng(0)
    for step in range(5):
        x = rng.normal(-20.0 + 3 * step, 4.0, size=50)
        norm.update(x)
        ref.update(x)
        mean, var = ref.stats()
        assert norm.mean_var() == pytest.approx((mean, var), rel=1e-9)
        np.testing.assert_allclose(norm.normalize(x), (x - mean) / np.sqrt(var), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(norm.denormalize(x), x * np.sqrt(var) + mean, rtol=1e-5, atol=1e-4)
    # debiased: after one update the mean is the batch's, not (1 - beta) times it
    one = ValueNorm()
    one.update(np.array([-10.0, -12.0]))
    assert one.mean_var()[0] == pytest.approx(-11.0)


# --- the loss ----------------------------------------------------------------------------------
CASES = {
    # name: training overrides
    "value-normalization": {},
    "value-normalization-clipped": {"vf_clip_param": 0.3},
    "no-value-normalization": {"value_normalization": False},
    "no-value-normalization-clipped": {"value_normalization": False, "vf_clip_param": 0.3},
}


def loss_reference(weights, batch, training, targets, clip):
    logits = dense(
        weights, "policy/output", mlp_body(weights, "policy", batch[SB.OBS].astype(np.float64), "tanh")
    )
    logp, entropy = logp_and_entropy(logits, batch[SB.ACTIONS], False)
    log_ratio = logp - batch[SB.ACTION_LOGP].astype(np.float64)
    ratio = np.exp(log_ratio)
    advantages = normalized(batch[SB.ADVANTAGES].astype(np.float64))
    policy_loss = -np.minimum(ratio * advantages, np.clip(ratio, 1 - clip, 1 + clip) * advantages).mean()
    values = critic(weights, batch["critic_obs"])
    error = (values - targets) ** 2
    if training.vf_clip_param is not None:
        old = batch[SB.VF_PREDS].astype(np.float64)
        clipped = old + np.clip(values - old, -training.vf_clip_param, training.vf_clip_param)
        error = np.maximum(error, (clipped - targets) ** 2)
    vf_loss = 0.5 * error.mean()
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy.mean()
    return loss, {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": entropy.mean(),
        "total_loss": loss,
    }


def make_policy(backend, training):
    raw = config(backend, {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, "sgd_minibatch_size": N,
                           "entropy_coeff": 0.01, "critic_input": "state", **training})  # fmt: skip
    del raw["multiagent"]
    resolved = config_mod.resolve(raw, training_class=registry.load_algorithm("mappo").config_class)
    obs_space, act_space = Box(np.full(3, -1e3), np.full(3, 1e3)), Discrete(2)
    policy = registry.load_algorithm("mappo").policy_class(backend)(obs_space, act_space, resolved)
    template = {k: v for k, v in policy.get_weights().items() if "value_norm" not in k}
    weights = random_weights(template, gain=1.5)
    if policy.value_norm is not None:
        policy.value_norm.update(np.array([-6.0, -2.0, -7.0]))  # a start the batch moves
        weights.update(policy.value_norm.arrays())
    policy.set_weights(weights)
    return policy


def loss_batch(policy, seed=0) -> SB:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N, 3)).astype(np.float32)
    critic_obs = rng.normal(size=(N, policy.critic_spec.dim)).astype(np.float32)
    weights = policy.get_weights()
    logits = dense(weights, "policy/output", mlp_body(weights, "policy", obs.astype(np.float64), "tanh"))
    actions = rng.integers(2, size=N).astype(np.int64)
    logp, _ = logp_and_entropy(logits, actions, False)
    values = critic(weights, critic_obs)
    return SB({
        SB.OBS: obs, SB.ACTIONS: actions, "critic_obs": critic_obs,
        SB.ACTION_LOGP: (logp + 0.25 * rng.normal(size=N)).astype(np.float32),
        SB.VF_PREDS: (values + rng.uniform(-0.8, 0.8, size=N)).astype(np.float32),
        SB.ADVANTAGES: (0.7 + 2.0 * rng.normal(size=N)).astype(np.float32),
        # returns far from 0 with a scale of several units: normalizing them changes the numbers
        SB.VALUE_TARGETS: (-8.0 + 3.0 * rng.normal(size=N)).astype(np.float32),
    })  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mappo_loss_stats_update_and_value_statistics_match_the_reference(backend, case):
    policy = make_policy(backend, CASES[case])
    training = policy.config.training
    batch = loss_batch(policy)
    raw_targets = batch[SB.VALUE_TARGETS].astype(np.float64)
    if training.value_normalization:
        ref = ValueNormReference()
        ref.update(np.array([-6.0, -2.0, -7.0]))
        ref.update(raw_targets)  # once per train batch, before the SGD epochs
        mean, var = ref.stats()
        targets = (raw_targets - mean) / np.sqrt(var)
    else:
        targets = raw_targets
    weights = {k: v for k, v in policy.get_weights().items() if "value_norm" not in k}

    def loss_of(w):
        return loss_reference(w, batch, training, targets, training.clip_param)[0]

    _, expected = loss_reference(weights, batch, training, targets, training.clip_param)
    grads = finite_difference_gradient(loss_of, weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    if training.value_normalization:
        assert policy.value_norm.mean_var() == pytest.approx((mean, var), rel=1e-9)
        assert stats["value_norm_mean"] == pytest.approx(mean)
        moved = {k: v for k, v in update.items() if "value_norm" in k}
        assert moved and all(np.any(v != 0) for v in moved.values())  # the statistics did move
        update = {k: v for k, v in update.items() if "value_norm" not in k}
    assert_sgd(update, grads, training.lr)
    assert any(np.abs(grads[k]).max() > 0 for k in grads if k.startswith("critic/"))


def test_normalized_and_raw_targets_give_different_value_losses():
    """The cases above differ where they should: the same batch and weights, the value term apart."""
    on, off = make_policy("torch", {}), make_policy("torch", {"value_normalization": False})
    off.set_weights({k: v for k, v in on.get_weights().items() if "value_norm" not in k})
    stats_on, _ = sgd_step(on, loss_batch(on))
    stats_off, _ = sgd_step(off, loss_batch(off))
    assert stats_on["policy_loss"] == pytest.approx(stats_off["policy_loss"], rel=1e-5)
    assert stats_off["vf_loss"] > 5 * stats_on["vf_loss"]  # raw returns near -8 vs normalized ones
