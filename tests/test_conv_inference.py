"""The numpy acting twin of conv policies acts as the framework does.

A conv policy acts through ``NumpyActorCritic`` with a numpy conv trunk
(``rlgear.blocks.conv_inference``) when ``model.numpy_inference`` is on. Each
test builds two policies with the same (perturbed) weights, one acting in numpy and
one in the framework, and checks the distribution inputs, the values, the greedy
actions and their log-probabilities, on both backends, for uint8 and float images:

* the MinAtar default (one 16x3x3 stride-1 layer on 10x10x4);
* a Nature-like stack on a small image (strides 2, 2 and 1, three layers), so a
  wrong stride, window order or flatten order (e.g. CHW instead of HWC) shows.

The exact numpy reference of the conv math itself (by loops) is in tests/test_vision.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep
from tests.conftest import needs_tf
from tests.numpy_reference import make_policy, resolve

BACKENDS = ["torch", pytest.param("tf", marks=needs_tf)]
#: name -> (image shape, conv_filters (None: the default), hidden sizes)
STACKS = {
    "minatar-default": ((10, 10, 4), None, [32]),
    "nature-like": ((20, 20, 4), [[8, 4, 2], [16, 3, 2], [8, 2, 1]], [16]),  # 20 -> 9 -> 4 -> 3
}


def image_space(shape, dtype) -> Box:
    high = 255 if dtype == np.uint8 else 1.0
    return Box(np.zeros(shape), np.full(shape, high), dtype)


def images(shape, dtype, n=12, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=(n, *shape)).astype(np.uint8)
    return rng.random((n, *shape)).astype(np.float32)


def perturbed(weights, seed=1):
    """Weights of ``weights``' names and shapes drawn from ``seed`` alone (He-scaled kernels, biases
    N(0, 0.1^2)): every weight matters and the logits vary across observations, unlike at
    the initial 0.01-gain policy head."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in sorted(weights.items()):
        if name.endswith("kernel"):
            new = rng.normal(size=value.shape) * np.sqrt(2.0 / np.prod(value.shape[:-1]))
        else:
            new = rng.normal(size=value.shape) * 0.1 - (0.3 if name.endswith("log_std") else 0.0)
        out[name] = new.astype(np.float32)
    return out


def policy_pair(tmp_path, backend, stack, dtype, action_space, shared=True):
    """(numpy-acting policy, framework-acting policy) with the same weights."""
    shape, filters, hidden = STACKS[stack]
    space = image_space(shape, dtype)
    policies = []
    for twin in (True, False):
        model = {"hidden_sizes": hidden, "activation": "relu", "vf_share_layers": shared}
        model["numpy_inference"] = twin
        if filters is not None:
            model["conv_filters"] = filters
        config = resolve(tmp_path, "ppo", None, model, env="tests.image_env:QuadrantEnv", backend=backend)
        policies.append(make_policy(config, backend, space, action_space))
    fast, framework = policies
    assert fast.fast_actor is not None and fast.fast_actor.trunk is not None
    assert framework.fast_actor is None
    weights = perturbed(framework.get_weights())
    fast.set_weights(weights)
    framework.set_weights(weights)
    return fast, framework


def timestep_of(obs):
    n = len(obs)
    return TimeStep(
        np.full(n, StepType.MID, np.int32),
        np.zeros(n, np.float32),
        np.ones(n, np.float32),
        obs,
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int32),
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["uint8", "float32"])
def test_the_numpy_twin_of_a_conv_policy_acts_as_the_framework(tmp_path, backend, stack, dtype):
    fast, framework = policy_pair(tmp_path, backend, stack, dtype, Discrete(5), shared=stack != "nature-like")
    obs = images(STACKS[stack][0], dtype)
    flat = obs.reshape(len(obs), -1).astype(np.float32)
    fast.fast_actor.load(fast.get_weights(), fast.weights_version)
    expected = framework.action_distribution_inputs(obs)
    assert np.ptp(expected, axis=0).max() > 1e-2  # the observations move the logits: a real comparison
    np.testing.assert_allclose(fast.fast_actor.dist_inputs(flat), expected, rtol=1e-5, atol=1e-5)
    actions, _, extras = fast.compute_actions(timestep_of(obs), explore=False)
    expected_actions, _, expected_extras = framework.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_array_equal(actions, expected_actions)
    assert len(set(expected_actions.tolist())) > 1  # not one constant action
    for key in (SB.VF_PREDS, SB.ACTION_LOGP):
        np.testing.assert_allclose(extras[key], expected_extras[key], rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_numpy_twin_of_a_conv_policy_with_box_actions_matches_means_and_log_stds(tmp_path, backend):
    actions = Box(-np.ones(2), np.ones(2), np.float32)
    fast, framework = policy_pair(tmp_path, backend, "nature-like", np.uint8, actions, shared=False)
    obs = images(STACKS["nature-like"][0], np.uint8, seed=3)
    fast.fast_actor.load(fast.get_weights(), fast.weights_version)
    flat = obs.reshape(len(obs), -1).astype(np.float32)
    np.testing.assert_allclose(
        fast.fast_actor.dist_inputs(flat), framework.action_distribution_inputs(obs), rtol=1e-5, atol=1e-5
    )
    greedy, _, extras = fast.compute_actions(timestep_of(obs), explore=False)
    expected, _, expected_extras = framework.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(greedy, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(extras[SB.VF_PREDS], expected_extras[SB.VF_PREDS], rtol=1e-5, atol=1e-5)


def test_the_twin_follows_the_weights_after_an_update(tmp_path):
    """After ``set_weights`` the twin reloads (by version) instead of acting on stale weights."""
    fast, framework = policy_pair(tmp_path, "torch", "minatar-default", np.uint8, Discrete(5))
    obs = images(STACKS["minatar-default"][0], np.uint8)
    fast.compute_actions(timestep_of(obs), explore=False)
    new_weights = perturbed(framework.get_weights(), seed=7)
    fast.set_weights(new_weights)
    framework.set_weights(new_weights)
    _, _, extras = fast.compute_actions(timestep_of(obs), explore=False)
    _, _, expected = framework.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(extras[SB.VF_PREDS], expected[SB.VF_PREDS], rtol=1e-5, atol=1e-5)


def test_a_conv_kernel_of_the_wrong_shape_is_refused_naming_it(tmp_path):
    fast, _ = policy_pair(tmp_path, "torch", "nature-like", np.uint8, Discrete(5))
    trunk: NumpyConvTrunk = fast.fast_actor.trunk
    weights = fast.get_weights()
    weights["shared/conv_1/kernel"] = weights["shared/conv_1/kernel"].transpose(3, 2, 0, 1)  # torch layout
    with pytest.raises(ValueError, match=r"shared/conv_1/kernel: expected shape \(3, 3, 8, 16\)"):
        trunk.load(weights)
