"""ICM's intrinsic reward and loss on both backends against an independent float64 numpy reference.

The reference is written from Pathak et al. 2017 (eqs. 2-7) with the reductions of the authors'
code and RLlib's ``Curiosity``: observations normalized by the running mean and std and clipped to
[-5, 5]; features ``phi`` of ``s`` and ``s'`` from one MLP; the inverse loss is the mean
cross-entropy of the action given ``[phi, phi']``; the forward loss is the mean over rows of half
the SUM of squared differences between the forward model's ``f([phi, onehot(a)])`` and ``phi'``;
the loss is ``(1 - beta) L_I + beta L_F``, gradients reaching phi from both; the intrinsic reward
is the forward loss of each row. Gradients are central finite differences of the reference. One
case per option that changes the math: beta 0.2 (default), beta 0 and 1 (one loss alone), value
mode (the intrinsic value head). Then one ``learn`` call (Adam) gives the same weights on both
backends, and a module refuses Box actions.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import exploration as xp
from rlgear.errors import UnsupportedError
from rlgear.plugins.exploration.icm import ICMConfig
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS
from tests.numpy_reference import finite_difference_gradient

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

OBS_DIM, N, ACTIONS = 4, 6, 3


def options(beta: float = 0.2) -> ICMConfig:
    return ICMConfig(
        name="icm",
        feature_dim=3,
        feature_hidden_sizes=[5],
        inverse_hidden_sizes=[4],
        forward_hidden_sizes=[4],
        value_hidden_sizes=[3],
        beta=beta,
    )


def module(backend: str, beta: float = 0.2, action_space=None):
    if backend == "torch":
        pytest.importorskip("torch")
        from rlgear.plugins.exploration.icm.torch_module import ICMTorchModule as cls
    else:
        pytest.importorskip("tensorflow")
        from rlgear.plugins.exploration.icm.tf_module import ICMTFModule as cls
    space = Box(np.full(OBS_DIM, -10.0), np.full(OBS_DIM, 10.0))
    return cls(space, action_space or Discrete(ACTIONS), options(beta), seed=3)


def mlp(weights, network, x):
    layers = sorted({k.rsplit("/", 1)[0] for k in weights if k.startswith(network + "/") and "hidden" in k})
    for name in layers:
        x = np.maximum(x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"], 0.0)
    return x @ weights[f"{network}/output/kernel"] + weights[f"{network}/output/bias"]


def normalize(obs, mean, var, clip):
    return np.clip((obs - mean) / np.sqrt(var), -clip, clip)


def forward_error(weights, x, next_x, actions):
    phi, phi_next = mlp(weights, "feature", x), mlp(weights, "feature", next_x)
    one_hot = np.eye(ACTIONS)[actions]
    predicted = mlp(weights, "forward", np.concatenate([phi, one_hot], axis=1))
    return phi, phi_next, 0.5 * ((predicted - phi_next) ** 2).sum(axis=1)


def reference_loss(weights, inputs, beta):
    x, next_x = (np.asarray(inputs[k], np.float64) for k in ("x", "next_x"))
    actions = inputs["actions"]
    phi, phi_next, per_row_forward = forward_error(weights, x, next_x, actions)
    logits = mlp(weights, "inverse", np.concatenate([phi, phi_next], axis=1))
    top = logits.max(axis=1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    inverse = -log_probs[np.arange(len(actions)), actions].mean()
    loss = (1 - beta) * inverse + beta * per_row_forward.mean()
    if "value_targets" in inputs:
        values = mlp(weights, "intrinsic_value", np.asarray(inputs["obs"], np.float64))[:, 0]
        loss += 0.5 * ((values - inputs["value_targets"]) ** 2).mean()
    return loss


def inputs_for(case: str, rng):
    inputs = {
        "x": rng.normal(size=(N, OBS_DIM)).astype(np.float32),
        "next_x": rng.normal(size=(N, OBS_DIM)).astype(np.float32),
        "actions": np.array([0, 2, 1, 1, 0, 2], np.int64),
    }
    if case == "value":
        inputs["obs"] = rng.normal(size=(N, OBS_DIM)).astype(np.float32)
        inputs["value_targets"] = rng.normal(size=N).astype(np.float32)
    return inputs


def float64(icm):
    return {k: np.ascontiguousarray(v, np.float64) for k, v in icm.params.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_intrinsic_reward_matches_reference(backend):
    rng = np.random.default_rng(0)
    icm = module(backend)
    icm.obs_rms.mean = rng.normal(size=OBS_DIM)
    icm.obs_rms.var = rng.uniform(0.01, 2.0, size=OBS_DIM)  # small variances: some features clip at 5
    obs, next_obs = (rng.normal(size=(N, OBS_DIM)).astype(np.float32) * 6 for _ in range(2))
    actions = np.array([2, 0, 1, 2, 1, 0])
    mean, var = icm.obs_rms.mean, icm.obs_rms.var
    assert np.abs(normalize(next_obs, mean, var, np.inf)).max() > 5  # clipping is tested
    x, next_x = normalize(obs, mean, var, 5.0), normalize(next_obs, mean, var, 5.0)
    expected = forward_error(float64(icm), x, next_x, actions)[2]
    got = icm.intrinsic_rewards(obs, actions, next_obs)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)
    assert got.dtype == np.float32
    other = icm.intrinsic_rewards(obs, (actions + 1) % ACTIONS, next_obs)
    assert not np.allclose(other, got)  # the action is an input of the forward model


@pytest.mark.parametrize(
    ("case", "beta"), [("reward", 0.2), ("reward", 0.0), ("reward", 1.0), ("value", 0.2)]
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_loss_and_gradients_match_reference(backend, case, beta):
    rng = np.random.default_rng(1)
    icm = module(backend, beta)
    inputs = inputs_for(case, rng)
    loss, stats, grads = icm.loss_and_gradients(icm.params, inputs)
    weights = float64(icm)
    np.testing.assert_allclose(loss, reference_loss(weights, inputs, beta), rtol=2e-5, atol=1e-7)
    expected = finite_difference_gradient(lambda w: reference_loss(w, inputs, beta), weights)
    assert set(grads) == set(icm.trainable) == set(icm.params)  # every network trains
    for name in icm.trainable:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-3, atol=2e-6, err_msg=name)
    if beta == 0.0:  # the forward model learns only from the forward loss
        assert all(not np.any(grads[n]) for n in icm.trainable if n.startswith("forward/"))
    if beta == 1.0:
        assert all(not np.any(grads[n]) for n in icm.trainable if n.startswith("inverse/"))
    assert {"inverse_loss", "forward_loss"} <= set(stats)
    assert ("intrinsic_value_loss" in stats) == (case == "value")


def rows(rng):
    return SB(
        {
            SB.OBS: rng.normal(size=(40, OBS_DIM)).astype(np.float32),
            SB.ACTIONS: rng.integers(0, ACTIONS, size=40),
            xp.NEXT_OBS: rng.normal(size=(40, OBS_DIM)).astype(np.float32),
            xp.INTRINSIC_REWARDS: rng.random(40).astype(np.float32),
            xp.INTRINSIC_RETURNS: rng.random(40).astype(np.float32),
            xp.INTRINSIC_VALUE_TARGETS: rng.normal(size=40).astype(np.float32),
        }
    )


def test_learn_is_the_same_on_both_backends_and_state_moves_between_them():
    pytest.importorskip("tensorflow")
    torch_icm, tf_icm = module("torch"), module("tf")
    assert set(torch_icm.get_weights()) == set(tf_icm.get_weights())  # the same neutral names
    for name, value in torch_icm.get_weights().items():
        np.testing.assert_array_equal(tf_icm.get_weights()[name], value)
    torch_stats = torch_icm.learn(rows(np.random.default_rng(2)))
    tf_stats = tf_icm.learn(rows(np.random.default_rng(2)))
    assert torch_stats.keys() == tf_stats.keys()
    for key, value in torch_stats.items():
        np.testing.assert_allclose(tf_stats[key], value, rtol=1e-4, err_msg=key)
    for name, value in torch_icm.get_weights().items():
        np.testing.assert_allclose(tf_icm.get_weights()[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    fresh_tf = module("tf")  # a torch module's weights and state continue on TF
    fresh_tf.set_weights(torch_icm.get_weights())
    fresh_tf.set_state(torch_icm.get_state())
    torch_icm.learn(rows(np.random.default_rng(4)))
    fresh_tf.learn(rows(np.random.default_rng(4)))
    for name, value in torch_icm.get_weights().items():
        np.testing.assert_allclose(fresh_tf.get_weights()[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_box_actions_are_refused_naming_the_key(backend):
    with pytest.raises(
        UnsupportedError, match=r"exploration\.name: exploration 'icm' needs Discrete actions"
    ):
        module(backend, action_space=Box(np.full(2, -1.0), np.full(2, 1.0)))


def test_set_weights_checks_every_name_and_shape_before_changing_anything():
    icm = module("torch")
    before = icm.get_weights()
    bad = {**before, "forward/output/kernel": np.zeros((2, 2), np.float32)}
    bad["feature/output/bias"] = before["feature/output/bias"] + 1.0  # would change if applied
    with pytest.raises(ValueError, match="forward/output/kernel"):
        icm.set_weights(bad)
    for name, value in before.items():
        np.testing.assert_array_equal(icm.get_weights()[name], value)
