"""Masked, multi-categorical and product action distributions on both backends against numpy.

A masked action has probability 0: it is never sampled, never the greedy choice, and adds
nothing to the entropy or the KL. MultiCategorical and Product sum log-probabilities,
entropies and KLs over their parts. References are written here in float64 from those
definitions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete, MultiDiscrete, Tuple
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_OBS,
    categorical_entropy,
    make_policy,
    masked_categorical_log_probs,
    resolve,
)

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

B, N = 6, 5


class Backend:
    """Builds a backend's distribution of ``space`` from numpy inputs and reads results as numpy."""

    def __init__(self, name: str):
        self.name = name
        if name == "torch":
            import torch

            from rlgear.plugins.backends.torch import distributions

            self.to_tensor = lambda x: torch.from_numpy(np.asarray(x))
        else:
            from rlgear.plugins.backends.tf import distributions
            from rlgear.plugins.backends.tf.runtime import tf

            self.to_tensor = lambda x: tf.convert_to_tensor(np.asarray(x))
        self.module = distributions

    def make(self, space, inputs, mask=None):
        cls = self.module.distribution_class(space)
        return cls(
            self.to_tensor(np.asarray(inputs, np.float32)), None if mask is None else self.to_tensor(mask)
        )

    def sample(self, dist, space, rng):
        if self.name == "torch":
            return np.asarray(dist.sample())
        cls = self.module.distribution_class(space)
        return np.asarray(dist.sample(self.to_tensor(cls.draw_noise(rng, B, space))))


def numpy_of(x):
    return np.asarray(x, np.float64)


def masks(rng, shape):
    mask = rng.random(shape) < 0.5
    mask[..., 0] |= ~mask.any(axis=-1)  # at least one allowed per row
    return mask


def reference_categorical(logits, mask, actions, other_logits):
    log_p = masked_categorical_log_probs(logits, mask)
    log_q = masked_categorical_log_probs(other_logits, mask)
    logp = log_p[np.arange(len(actions)), actions]
    p = np.exp(log_p)
    kl = np.where(p > 0, p * (np.where(p > 0, log_p, 0) - np.where(p > 0, log_q, 0)), 0).sum(-1)
    return logp, categorical_entropy(log_p), kl


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_categorical_matches_the_reference_and_ignores_masked_actions(backend):
    be = Backend(backend)
    rng = np.random.default_rng(0)
    logits, other = rng.normal(size=(B, N)) * 2, rng.normal(size=(B, N)) * 2
    mask = masks(rng, (B, N))
    actions = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
    dist, other_dist = be.make(Discrete(N), logits, mask), be.make(Discrete(N), other, mask)
    logp, entropy, kl = reference_categorical(logits, mask, actions, other)
    np.testing.assert_allclose(numpy_of(dist.logp(be.to_tensor(actions))), logp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numpy_of(dist.entropy()), entropy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numpy_of(dist.kl(other_dist)), kl, rtol=1e-4, atol=1e-6)
    # the unmasked numbers differ: the mask is what makes these equal
    assert not np.allclose(numpy_of(be.make(Discrete(N), logits).entropy()), entropy, atol=1e-3)

    # greedy: the best allowed action even when a masked one has the largest logit
    best = logits.copy()
    best[~mask] += 100.0
    greedy = np.asarray(be.make(Discrete(N), best, mask).deterministic_sample())
    np.testing.assert_array_equal(greedy, np.where(mask, logits, -np.inf).argmax(-1))

    # thousands of samples: never a masked action, and the allowed ones at their probabilities
    counts = np.zeros((B, N))
    for _ in range(800):
        drawn = be.sample(dist, Discrete(N), rng)
        counts[np.arange(B), drawn] += 1
    assert not counts[~mask].any()
    np.testing.assert_allclose(counts / 800, np.exp(masked_categorical_log_probs(logits, mask)), atol=0.08)


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_categorical_is_the_product_of_its_parts(backend):
    be = Backend(backend)
    rng = np.random.default_rng(1)
    space = MultiDiscrete([3, 4])
    logits, other = rng.normal(size=(B, 7)), rng.normal(size=(B, 7))
    mask = np.concatenate([masks(rng, (B, 3)), masks(rng, (B, 4))], axis=1)
    actions = np.stack(
        [[rng.choice(np.flatnonzero(m[:3])), rng.choice(np.flatnonzero(m[3:]))] for m in mask]
    ).astype(np.int64)
    dist, other_dist = be.make(space, logits, mask), be.make(space, other, mask)
    parts = [
        reference_categorical(logits[:, :3], mask[:, :3], actions[:, 0], other[:, :3]),
        reference_categorical(logits[:, 3:], mask[:, 3:], actions[:, 1], other[:, 3:]),
    ]
    np.testing.assert_allclose(
        numpy_of(dist.logp(be.to_tensor(actions))), parts[0][0] + parts[1][0], rtol=1e-5
    )
    np.testing.assert_allclose(numpy_of(dist.entropy()), parts[0][1] + parts[1][1], rtol=1e-5)
    np.testing.assert_allclose(numpy_of(dist.kl(other_dist)), parts[0][2] + parts[1][2], rtol=1e-4, atol=1e-6)
    for _ in range(300):
        drawn = be.sample(dist, space, rng)
        assert drawn.shape == (B, 2)
        assert mask[np.arange(B), drawn[:, 0]].all() and mask[np.arange(B), 3 + drawn[:, 1]].all()
    greedy = np.asarray(dist.deterministic_sample())
    np.testing.assert_array_equal(greedy[:, 1], np.where(mask[:, 3:], logits[:, 3:], -np.inf).argmax(-1))


def gaussian_reference(inputs, actions, other_inputs):
    mean, log_std = np.split(inputs, 2, axis=-1)
    other_mean, other_log_std = np.split(other_inputs, 2, axis=-1)
    z = (actions - mean) / np.exp(log_std)
    logp = (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    entropy = (log_std + 0.5 * (1 + math.log(2 * math.pi))).sum(-1)
    var, other_var = np.exp(2 * log_std), np.exp(2 * other_log_std)
    kl = (other_log_std - log_std + (var + (mean - other_mean) ** 2) / (2 * other_var) - 0.5).sum(-1)
    return logp, entropy, kl


@pytest.mark.parametrize("backend", BACKENDS)
def test_product_distribution_sums_its_parts_over_the_flat_action_layout(backend):
    be = Backend(backend)
    rng = np.random.default_rng(2)
    box = Box(-np.ones(2), np.ones(2))
    space = Tuple([Discrete(3), box, MultiDiscrete([2, 2])])
    width = 3 + 4 + 4  # logits 3, mean + log_std 4, logits 2 + 2
    inputs, other = rng.normal(size=(B, width)) * 0.5, rng.normal(size=(B, width)) * 0.5
    flat = np.concatenate(
        [rng.integers(3, size=(B, 1)), rng.normal(size=(B, 2)), rng.integers(2, size=(B, 2))], axis=1
    ).astype(np.float32)
    dist, other_dist = be.make(space, inputs, None), be.make(space, other, None)
    ones = np.ones((B, 2), bool)
    parts = [
        reference_categorical(inputs[:, :3], np.ones((B, 3), bool), flat[:, 0].astype(int), other[:, :3]),
        gaussian_reference(inputs[:, 3:7].astype(np.float64), flat[:, 1:3], other[:, 3:7]),
        reference_categorical(inputs[:, 7:9], ones, flat[:, 3].astype(int), other[:, 7:9]),
        reference_categorical(inputs[:, 9:11], ones, flat[:, 4].astype(int), other[:, 9:11]),
    ]
    for i, method in enumerate(("logp", "entropy", "kl")):
        expected = sum(part[i] for part in parts)
        got = {
            "logp": lambda: dist.logp(be.to_tensor(flat)),
            "entropy": dist.entropy,
            "kl": lambda: dist.kl(other_dist),
        }[method]()
        np.testing.assert_allclose(numpy_of(got), expected, rtol=1e-4, atol=1e-5, err_msg=method)
    drawn = be.sample(dist, space, rng)
    assert drawn.shape == (B, 5) and drawn.dtype == np.float32
    assert set(np.unique(drawn[:, 0])) <= {0.0, 1.0, 2.0} and set(np.unique(drawn[:, 3:])) <= {0.0, 1.0}
    greedy = np.asarray(dist.deterministic_sample())
    np.testing.assert_allclose(greedy[:, 1:3], inputs[:, 3:5], rtol=1e-6)  # the means


def test_numpy_acting_twin_never_picks_a_masked_action():
    from rlgear.blocks.inference import NumpyActorCritic

    actor = NumpyActorCritic(Discrete(N), 1, "tanh", False, seed=0)
    rng = np.random.default_rng(3)
    weights = {
        "policy/hidden_0/kernel": rng.normal(size=(4, 8)), "policy/hidden_0/bias": np.zeros(8),
        "value/hidden_0/kernel": rng.normal(size=(4, 8)), "value/hidden_0/bias": np.zeros(8),
        "policy/output/kernel": 3 * rng.normal(size=(8, N)), "policy/output/bias": np.zeros(N),
        "value/output/kernel": rng.normal(size=(8, 1)), "value/output/bias": np.zeros(1),
    }  # fmt: skip
    actor.load(weights, 0)
    obs = rng.normal(size=(B, 4)).astype(np.float32)
    mask = masks(rng, (B, N))
    head, _ = actor.forward(obs)
    log_p = masked_categorical_log_probs(head.astype(np.float64), mask)
    for _ in range(1000):
        actions, logp, _ = actor.act(obs, True, mask)
        assert mask[np.arange(B), actions].all()
        np.testing.assert_allclose(logp, log_p[np.arange(B), actions], rtol=1e-4, atol=1e-5)
    greedy, _, _ = actor.act(obs, False, mask)
    np.testing.assert_array_equal(greedy, log_p.argmax(-1))


def masked_timestep(obs, mask):
    n = len(obs)
    return TimeStep(
        step_type=np.full(n, StepType.MID, np.int32), reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32), observation=obs, prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n, dtype=np.int32), action_mask=mask,
    )  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("numpy_inference", [True, False])
def test_policies_act_only_among_allowed_actions(tmp_path, backend, numpy_inference):
    config = resolve(tmp_path, "ppo", {}, {"numpy_inference": numpy_inference}, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, Discrete(N))
    assert (policy.fast_actor is not None) == numpy_inference
    rng = np.random.default_rng(4)
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    mask = masks(rng, (64, N))
    seen = np.zeros(N, bool)
    for _ in range(60):  # 3840 actions
        actions, _, extras = policy.compute_actions(masked_timestep(obs, mask))
        assert mask[np.arange(64), actions].all()
        assert np.isfinite(extras[SB.ACTION_LOGP]).all()
        seen[actions] = True
    assert seen.all()  # every action is allowed somewhere, so every one gets sampled
    greedy, _, _ = policy.compute_actions(masked_timestep(obs, mask), explore=False)
    assert mask[np.arange(64), greedy].all()
