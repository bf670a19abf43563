"""The numpy acting twin gives what the torch model gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlgear import config as config_mod
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep
from tests.conftest import small_config


def make_policy(tmp_path, action_space, numpy_inference=True, **model):
    raw = small_config(tmp_path, model={"numpy_inference": numpy_inference, **model})
    config = config_mod.resolve(raw)
    obs_space = Box(np.full(5, -10.0), np.full(5, 10.0))
    return PPO.policy_class("torch")(obs_space, action_space, config)


def timestep(obs):
    n = obs.shape[0]
    return TimeStep(
        np.full(n, StepType.MID, np.int32), np.zeros(n, np.float32), np.ones(n, np.float32),
        obs, np.zeros(n), np.arange(n),
    )  # fmt: skip


@pytest.mark.parametrize("space", [Discrete(3), Box(-np.ones(2), np.ones(2))])
@pytest.mark.parametrize(
    "model", [{}, {"vf_share_layers": True, "activation": "relu"}, {"activation": "elu"}]
)
def test_numpy_twin_matches_torch_logp_and_values(tmp_path, space, model):
    policy = make_policy(tmp_path, space, **model)
    assert policy.fast_actor is not None
    rng = np.random.default_rng(0)
    # random weights far from the initialisation, so every layer matters
    policy.set_weights(
        {k: rng.normal(0, 0.5, v.shape).astype(np.float32) for k, v in policy.get_weights().items()}
    )
    obs = rng.normal(0, 2, (16, 5)).astype(np.float32)
    actions, _, extras = policy.compute_actions(timestep(obs))
    with torch.no_grad():
        dist_inputs, values = policy.model(torch.from_numpy(obs))
        logp = policy.dist_class(dist_inputs).logp(torch.from_numpy(actions))
    np.testing.assert_allclose(extras["vf_preds"], values.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(extras["action_logp"], logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy.fast_actor.dist_inputs(obs), dist_inputs.numpy(), rtol=1e-5, atol=1e-5)


def test_twin_refreshes_after_learning(tmp_path):
    policy = make_policy(tmp_path, Discrete(2))
    obs = np.ones((4, 5), np.float32)
    before = policy.compute_actions(timestep(obs))[2]["vf_preds"].copy()
    policy.set_weights({k: v + 0.1 for k, v in policy.get_weights().items()})
    after = policy.compute_actions(timestep(obs))[2]["vf_preds"]
    with torch.no_grad():
        _, values = policy.model(torch.from_numpy(obs))
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, values.numpy(), rtol=1e-5)


def test_greedy_actions_agree_between_numpy_and_torch_paths(tmp_path):
    fast = make_policy(tmp_path, Discrete(4))
    slow = make_policy(tmp_path, Discrete(4), numpy_inference=False)
    assert slow.fast_actor is None
    slow.set_weights(fast.get_weights())
    obs = np.random.default_rng(1).normal(size=(32, 5)).astype(np.float32)
    a_fast = fast.compute_actions(timestep(obs), explore=False)[0]
    a_slow = slow.compute_actions(timestep(obs), explore=False)[0]
    np.testing.assert_array_equal(a_fast, a_slow)


def test_sampled_discrete_actions_follow_the_policy_probabilities(tmp_path):
    policy = make_policy(tmp_path, Discrete(3))
    weights = policy.get_weights()
    weights["policy/output/bias"] = np.array([0.0, 1.0, 2.0], np.float32)
    weights["policy/output/kernel"][:] = 0
    policy.set_weights(weights)
    obs = np.zeros((20_000, 5), np.float32)
    actions = policy.compute_actions(timestep(obs))[0]
    expected = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    frequencies = np.bincount(actions, minlength=3) / len(actions)
    tolerance = 4 * np.sqrt(expected * (1 - expected) / len(actions))
    assert np.all(np.abs(frequencies - expected) < tolerance), (frequencies, expected)
