"""PQN's network and loss on both backends against an independent float64 numpy reference.

The reference is written from the papers: each hidden layer is dense -> LayerNorm (Ba et al.
2016: mean and biased variance over the features, epsilon 1e-5, then scale and offset) ->
activation (Gallici et al. 2024, sec. 4), then a dense output of one Q-value per action; the loss
is ``0.5 mean((Q(s, a) - R)^2)`` against the Q(lambda) targets ``R`` of the batch. Each case takes
one plain-SGD step (``learn_on_batch``: one epoch of one minibatch) and compares the loss, every
statistic and the update of every weight with ``lr x`` the finite-difference gradient.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.q_inference import NumpyQNetwork
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    ACTIVATIONS,
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    global_norm,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)

N = 24
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def layer_norm(x, scale, offset, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps) * scale + offset


def q_values(weights, obs, activation="relu"):
    """``[B, actions]``: ``q/hidden_<i>`` (each then ``q/norm_<i>`` when present, then the activation),
    then ``q/output``."""
    x = np.asarray(obs, np.float64)
    i = 0
    while f"q/hidden_{i}/kernel" in weights:
        x = dense(weights, f"q/hidden_{i}", x)
        if f"q/norm_{i}/scale" in weights:
            x = layer_norm(
                x,
                np.asarray(weights[f"q/norm_{i}/scale"], np.float64),
                np.asarray(weights[f"q/norm_{i}/offset"], np.float64),
            )
        x = ACTIVATIONS[activation](x)
        i += 1
    return dense(weights, "q/output", x)


def reference(weights, batch, activation="relu"):
    q = q_values(weights, batch[SB.OBS], activation)
    q_taken = q[np.arange(len(q)), batch[SB.ACTIONS]]
    targets = batch[SB.VALUE_TARGETS].astype(np.float64)
    td = q_taken - targets
    loss = 0.5 * np.mean(td**2)
    stats = {
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": np.abs(td).mean(),
        "total_loss": loss,
    }
    return loss, stats


def rows(seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(N, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=N).astype(np.int64),
            SB.VALUE_TARGETS: (scale * rng.normal(size=N)).astype(np.float32),
        }
    )


def layer_norm_weights(template, seed=1):
    """Random weights; LayerNorm scales around 1 (the kernels' draw would make them ~0.1)."""
    weights = random_weights(template, seed=seed, gain=1.5)
    rng = np.random.default_rng(seed + 100)
    for name in weights:
        if name.endswith("/scale"):
            weights[name] = (1.0 + 0.3 * rng.normal(size=weights[name].shape)).astype(np.float32)
    return weights


def build(tmp_path, backend, training=None, model=None):
    base = {
        "optimizer": "sgd",
        "lr": 0.3,
        "grad_clip": None,
        "train_batch_size": N,
        "sgd_minibatch_size": N,
        "num_sgd_iter": 1,
    }
    config = resolve(
        tmp_path,
        "pqn",
        {**base, **(training or {})},
        {"activation": "relu", **(model or {})},
        backend=backend,
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(layer_norm_weights(policy.get_weights()))
    return policy


CASES = {
    # name: (training, model)
    "layer-norm-relu": ({}, {}),
    "layer-norm-tanh-one-layer": ({}, {"activation": "tanh", "hidden_sizes": [7]}),
    "no-layer-norm": ({"layer_norm": False}, {}),
    "grad-clip-active": ({"grad_clip": 0.05}, {}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_pqn_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training, model = CASES[case]
    policy = build(tmp_path, backend, training, model)
    activation = policy.config.model.activation
    has_norm = any(name.startswith("q/norm_") for name in policy.get_weights())
    assert has_norm == policy.config.training.layer_norm
    batch = rows()
    weights = policy.get_weights()
    _, expected = reference(weights, batch, activation)
    grads = finite_difference_gradient(lambda w: reference(w, batch, activation)[0], weights)
    grad_clip = policy.config.training.grad_clip
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    if grad_clip is not None:
        assert global_norm(grads) > grad_clip
    assert_update_is_sgd_on(update, grads, policy.config.training.lr, grad_clip)


@pytest.mark.parametrize("backend", BACKENDS)
def test_q_values_with_layer_norm_match_numpy_and_the_framework_free_runtime(tmp_path, backend):
    """The acting pass: the backend's Q-values, the float64 reference and ``rlgear.inference``'s
    numpy Q-network (which serves PQN checkpoints without a framework) agree."""
    policy = build(tmp_path, backend)
    weights = policy.get_weights()
    obs = rows(seed=7)[SB.OBS] * 4.0
    expected = q_values(weights, obs)
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected, rtol=1e-5, atol=1e-5)
    numpy_net = NumpyQNetwork(2, len(policy.config.model.hidden_sizes), "relu", dueling=False)
    numpy_net.load(weights)
    np.testing.assert_allclose(numpy_net.q_values(obs), expected, rtol=1e-5, atol=1e-5)
    # LayerNorm matters here: without it the same dense weights give other Q-values
    plain = {k: v for k, v in weights.items() if not k.startswith("q/norm_")}
    assert not np.allclose(q_values(plain, obs), expected, atol=1e-3)


def test_both_backends_name_and_shape_the_weights_alike_and_act_alike(tmp_path):
    pytest.importorskip("tensorflow")
    torch_policy = build(tmp_path / "torch", "torch")
    tf_policy = build(tmp_path / "tf", "tf")
    torch_weights, tf_weights = torch_policy.get_weights(), tf_policy.get_weights()
    assert list(torch_weights) == list(tf_weights)  # same names, in the same order
    assert {k: v.shape for k, v in torch_weights.items()} == {k: v.shape for k, v in tf_weights.items()}
    assert {"q/norm_0/scale", "q/norm_0/offset", "q/norm_1/scale", "q/norm_1/offset"} <= set(torch_weights)
    tf_policy.set_weights(layer_norm_weights(torch_weights, seed=5))
    torch_policy.set_weights(layer_norm_weights(torch_weights, seed=5))
    obs = rows(seed=8)[SB.OBS]
    np.testing.assert_allclose(
        tf_policy.action_distribution_inputs(obs),
        torch_policy.action_distribution_inputs(obs),
        rtol=1e-5,
        atol=1e-5,
    )
