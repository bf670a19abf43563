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


def _random_weights(policy, seed=0):
    rng = np.random.default_rng(seed)
    policy.set_weights(
        {k: rng.normal(0, 0.5, v.shape).astype(np.float32) for k, v in policy.get_weights().items()}
    )


@pytest.mark.parametrize("space", [Discrete(3), Box(-np.ones(2), np.ones(2))])
def test_the_samplers_deferred_log_probabilities_equal_the_ones_computed_at_once(tmp_path, space):
    """The evaluator's policy records the head and gets ``action_logp`` per fragment from
    ``finish_fragment``: the same numbers as ``compute_actions`` gives any other caller, and as an
    independent numpy log-softmax / Gaussian density (``[T, B]`` rows at once)."""
    policy = make_policy(tmp_path, space)
    _random_weights(policy)
    obs = np.random.default_rng(1).normal(0, 2, (6, 4, 5)).astype(np.float32)  # [T, B, F]
    policy.defer_extras = True
    steps = [policy.compute_actions(timestep(o)) for o in obs]
    assert all("action_logp" not in extras for _, _, extras in steps)
    columns = {
        "actions": np.stack([a for a, _, _ in steps]),
        **{key: np.stack([e[key] for _, _, e in steps]) for key in steps[0][2]},
    }
    policy.finish_fragment(columns)
    assert "policy_head" not in columns and columns["action_logp"].shape == (6, 4)
    with torch.no_grad():
        dist_inputs = policy.model(torch.from_numpy(obs.reshape(24, 5)))[0].numpy().astype(np.float64)
    actions = columns["actions"].reshape(24, -1)
    if isinstance(space, Discrete):
        log_softmax = dist_inputs - np.log(np.exp(dist_inputs).sum(axis=1, keepdims=True))
        expected = log_softmax[np.arange(24), actions[:, 0]]
    else:
        mean, log_std = dist_inputs[:, :2], dist_inputs[:, 2:]
        z = (actions - mean) / np.exp(log_std)
        expected = (-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(axis=1)
    np.testing.assert_allclose(columns["action_logp"].reshape(24), expected, rtol=1e-4, atol=1e-4)
    policy.defer_extras = False
    _, _, extras = policy.compute_actions(timestep(obs[0]), explore=False)
    assert "action_logp" in extras and "policy_head" not in extras


def test_masked_deferred_log_probabilities_ignore_disallowed_actions_and_never_give_nan():
    from rlgear.blocks.inference import NumpyActorCritic

    twin = NumpyActorCritic(Discrete(3), 1, "tanh", False, seed=0)
    rng = np.random.default_rng(2)
    shapes = {"hidden_0/kernel": (2, 4), "hidden_0/bias": (4,)}
    weights = {f"{net}/{k}": rng.normal(size=s) for net in ("policy", "value") for k, s in shapes.items()}
    weights |= {"policy/output/kernel": rng.normal(size=(4, 3)), "policy/output/bias": np.zeros(3)}
    weights |= {"value/output/kernel": rng.normal(size=(4, 1)), "value/output/bias": np.zeros(1)}
    twin.load(weights, 0)
    obs = rng.normal(size=(500, 2)).astype(np.float32)
    mask = np.tile([True, False, True], (500, 1))
    mask[::7] = [False, True, False]
    actions, head, _ = twin.act_deferred(obs, True, mask)
    assert mask[np.arange(500), actions].all()  # never a disallowed action
    logp = twin.logp(head, actions, mask)
    allowed_logits = np.where(mask, twin.forward(obs)[0].astype(np.float64), -np.inf)
    expected = allowed_logits[np.arange(500), actions] - np.log(np.exp(allowed_logits).sum(axis=1))
    np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-5)
    nothing_allowed = np.zeros((1, 3), bool)  # an inactive multi-agent row, recorded as zeros
    assert np.isfinite(twin.logp(np.zeros((1, 3), np.float32), np.zeros(1, np.int64), nothing_allowed)).all()


@pytest.mark.parametrize("space", [Discrete(3), Box(-np.ones(2), np.ones(2))])
def test_a_restored_acting_rng_goes_on_mid_noise_block_as_the_uninterrupted_one(tmp_path, space):
    """The twin draws exploration noise in blocks: a checkpoint keeps the generator's state before
    the block and how much of it was used, so a restored policy samples what the original would."""
    import json

    policy = make_policy(tmp_path, space)
    _random_weights(policy)
    obs = np.random.default_rng(3).normal(0, 2, (4, 5)).astype(np.float32)
    for _ in range(3):  # into a block
        policy.compute_actions(timestep(obs))
    state = policy.get_state()
    state.meta = json.loads(json.dumps(state.meta))  # what the checkpoint's JSON meta gives back
    assert state.meta["twin_rng"]["noise"][1] > 0
    expected = [policy.compute_actions(timestep(obs))[0] for _ in range(5)]
    fresh = make_policy(tmp_path, space)
    fresh.fast_actor.rng = np.random.default_rng(99)
    fresh.set_state(state)
    for want in expected:
        np.testing.assert_array_equal(fresh.compute_actions(timestep(obs))[0], want)
