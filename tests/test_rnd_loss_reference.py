"""RND's intrinsic reward and loss on both backends against an independent float64 numpy reference.

The reference is written from Burda et al. 2018 and CleanRL's ``ppo_rnd_envpool.py``: observations
normalized by the running mean and std and clipped to [-5, 5]; the intrinsic reward is half the
SUM of squared differences between the predictor's and the fixed target's features; the predictor
loss is the mean squared difference over features, averaged over the rows the update mask keeps;
in value mode the intrinsic value loss ``0.5 * mean (V - target)^2`` is added. Gradients are
central finite differences of the reference (the target network gets none). One case per option
that changes the math: reward mode (predictor only), value mode (plus the value head), an
all-zero mask. Then one ``learn`` call (Adam) on each backend gives the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import exploration as xp
from rlgear.plugins.exploration.rnd import RNDConfig
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS
from tests.numpy_reference import finite_difference_gradient

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

OBS_DIM, N = 5, 7
OPTIONS = RNDConfig(name="rnd", hidden_sizes=[6, 4], output_dim=3, value_hidden_sizes=[4], obs_clip=5.0)


def module(backend: str):
    if backend == "torch":
        pytest.importorskip("torch")
        from rlgear.plugins.exploration.rnd.torch_module import RNDTorchModule as cls
    else:
        pytest.importorskip("tensorflow")
        from rlgear.plugins.exploration.rnd.tf_module import RNDTFModule as cls
    space = Box(np.full(OBS_DIM, -10.0), np.full(OBS_DIM, 10.0))
    return cls(space, Discrete(2), OPTIONS, seed=3)


def mlp(weights, network, x):
    layers = sorted({k.rsplit("/", 1)[0] for k in weights if k.startswith(network + "/") and "hidden" in k})
    for name in layers:
        x = np.maximum(x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"], 0.0)
    return x @ weights[f"{network}/output/kernel"] + weights[f"{network}/output/bias"]


def normalize(next_obs, mean, var, clip):
    return np.clip((next_obs - mean) / np.sqrt(var), -clip, clip)


def reference_reward(weights, next_obs, mean, var):
    x = normalize(np.asarray(next_obs, np.float64), mean, var, 5.0)
    return 0.5 * ((mlp(weights, "predictor", x) - mlp(weights, "target", x)) ** 2).sum(axis=1)


def reference_loss(weights, inputs):
    x = np.asarray(inputs["x"], np.float64)
    mask = np.asarray(inputs["mask"], np.float64)
    per_row = ((mlp(weights, "predictor", x) - mlp(weights, "target", x)) ** 2).mean(axis=1)
    loss = (per_row * mask).sum() / max(mask.sum(), 1.0)
    if "value_targets" in inputs:
        values = mlp(weights, "intrinsic_value", np.asarray(inputs["obs"], np.float64))[:, 0]
        loss += 0.5 * ((values - inputs["value_targets"]) ** 2).mean()
    return loss


def inputs_for(case: str, rng):
    inputs = {"x": rng.normal(size=(N, OBS_DIM)).astype(np.float32)}
    inputs["mask"] = (
        np.zeros(N, np.float32) if case == "zero_mask" else np.array([1, 0, 1, 1, 0, 1, 1], np.float32)
    )
    if case == "value":
        inputs["obs"] = rng.normal(size=(N, OBS_DIM)).astype(np.float32)
        inputs["value_targets"] = rng.normal(size=N).astype(np.float32)
    return inputs


@pytest.mark.parametrize("backend", BACKENDS)
def test_intrinsic_reward_matches_reference(backend):
    rng = np.random.default_rng(0)
    rnd = module(backend)
    rnd.obs_rms.mean = rng.normal(size=OBS_DIM)
    rnd.obs_rms.var = rng.uniform(0.01, 2.0, size=OBS_DIM)  # small variances: some features clip at 5
    next_obs = rng.normal(size=(N, OBS_DIM)).astype(np.float32) * 3
    weights = {k: np.ascontiguousarray(v, np.float64) for k, v in rnd.params.items()}
    expected = reference_reward(weights, next_obs, rnd.obs_rms.mean, rnd.obs_rms.var)
    assert (
        np.abs(normalize(next_obs, rnd.obs_rms.mean, rnd.obs_rms.var, np.inf)).max() > 5
    )  # clipping is tested
    got = rnd.intrinsic_rewards(np.zeros_like(next_obs), np.zeros(N), next_obs)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)
    assert got.dtype == np.float32


@pytest.mark.parametrize("case", ["reward", "value", "zero_mask"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_loss_and_gradients_match_reference(backend, case):
    rng = np.random.default_rng(1)
    rnd = module(backend)
    inputs = inputs_for(case, rng)
    loss, stats, grads = rnd.loss_and_gradients(rnd.params, inputs)
    weights = {k: np.ascontiguousarray(v, np.float64) for k, v in rnd.params.items()}
    np.testing.assert_allclose(loss, reference_loss(weights, inputs), rtol=2e-5, atol=1e-7)
    expected = finite_difference_gradient(lambda w: reference_loss(w, inputs), weights)
    assert set(grads) == set(rnd.trainable)  # the target network is never trained
    for name in rnd.trainable:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-3, atol=2e-6, err_msg=name)
    if case == "zero_mask":
        assert all(not np.any(grads[n]) for n in rnd.trainable)
    if case != "value":
        assert all(not np.any(grads[n]) for n in rnd.trainable if n.startswith("intrinsic_value/"))
    assert ("intrinsic_value_loss" in stats) == (case == "value")


def rows(rng):
    return SB(
        {
            SB.OBS: rng.normal(size=(40, OBS_DIM)).astype(np.float32),
            SB.ACTIONS: np.zeros(40, np.int64),
            xp.NEXT_OBS: rng.normal(size=(40, OBS_DIM)).astype(np.float32),
            xp.INTRINSIC_REWARDS: rng.random(40).astype(np.float32),
            xp.INTRINSIC_RETURNS: rng.random(40).astype(np.float32),
            xp.INTRINSIC_VALUE_TARGETS: rng.normal(size=40).astype(np.float32),
        }
    )


def test_learn_is_the_same_on_both_backends_and_state_moves_between_them():
    pytest.importorskip("tensorflow")
    torch_rnd, tf_rnd = module("torch"), module("tf")
    assert set(torch_rnd.get_weights()) == set(tf_rnd.get_weights())  # the same neutral names
    for name, value in torch_rnd.get_weights().items():
        np.testing.assert_array_equal(tf_rnd.get_weights()[name], value)
    torch_stats = torch_rnd.learn(rows(np.random.default_rng(2)))
    tf_stats = tf_rnd.learn(rows(np.random.default_rng(2)))
    assert torch_stats.keys() == tf_stats.keys()
    for key, value in torch_stats.items():
        np.testing.assert_allclose(tf_stats[key], value, rtol=1e-4, err_msg=key)
    for name, value in torch_rnd.get_weights().items():
        np.testing.assert_allclose(tf_rnd.get_weights()[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    # a torch module's weights and state continue on TF
    fresh_tf = module("tf")
    fresh_tf.set_weights(torch_rnd.get_weights())
    fresh_tf.set_state(torch_rnd.get_state())
    torch_rnd.learn(rows(np.random.default_rng(4)))
    fresh_tf.learn(rows(np.random.default_rng(4)))
    for name, value in torch_rnd.get_weights().items():
        np.testing.assert_allclose(fresh_tf.get_weights()[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
