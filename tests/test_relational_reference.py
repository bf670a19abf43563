"""The relational module (``model.relational``) on both backends against a float64 numpy reference.

The reference (``tests/relational_reference.py``) loops over observations, heads and present
entities; the backends batch and mask. Checked: outputs for entity sets with absent (zero) rows and
for conv cells with coordinates, separate and shared block weights; an A2C loss and its gradient
through the whole actor-critic (one plain-SGD step moves every weight by ``lr x`` the reference's
finite-difference gradient); zero rows changing nothing; planted bugs (the key mask dropped in the
backend, mean instead of max pooling) that the comparison catches.
"""

from __future__ import annotations

import numpy as np
import pytest

import tests.test_actor_critic_loss_reference as losses
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.relational_reference import relational_actor_critic

DIM, HEADS, BLOCKS, N, F = 4, 2, 2, 5, 3
MODEL = {
    "hidden_sizes": [4],
    "relational": True,
    "relational_dim": DIM,
    "relational_heads": HEADS,
    "relational_blocks": BLOCKS,
    "relational_mlp_dim": 6,
}
IMAGE_SHAPE, IMAGE_FILTERS = (4, 5, 2), [[3, 2, 1]]  # 3 x 4 cells of 3 channels (+ x, y)

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def entity_space(n: int = N) -> Box:
    return Box(np.full((n, F), -np.inf, np.float32), np.full((n, F), np.inf, np.float32))


def image_space() -> Box:
    return Box(np.zeros(IMAGE_SHAPE, np.float32), np.ones(IMAGE_SHAPE, np.float32))


def build(tmp_path, backend, space, shared=False, algorithm="a2c", training=None, **model):
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, **(training or {})},
        {**MODEL, "relational_shared_weights": shared, **model}, backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, space, CARTPOLE_ACT)
    weights = random_weights(policy.get_weights(), gain=1.5)
    for name in weights:  # layer-norm scales near 1, as trained ones are (random_weights draws ~0)
        if name.endswith("/scale"):
            weights[name] = (1.0 + weights[name]).astype(np.float32)
    policy.set_weights(weights)
    return policy


def entity_obs(rng, batch: int, n: int = N) -> np.ndarray:
    """Entity sets with absent rows (all zero) in varying places, one set with a single entity."""
    obs = rng.normal(size=(batch, n, F))
    obs[rng.random(size=(batch, n)) < 0.35] = 0.0
    obs[0, 1:] = 0.0
    return obs.reshape(batch, n * F).astype(np.float32)


def model_outputs(policy, backend, obs):
    if backend == "torch":
        import torch

        with torch.no_grad():
            out = policy.model(torch.from_numpy(obs))
        return out[0].numpy(), out[1].numpy()
    import tensorflow as tf

    out = policy.model(tf.constant(obs))
    return out[0].numpy(), out[1].numpy()


def entity_layout():
    return {"heads": HEADS, "blocks": BLOCKS, "entity_shape": (N, F)}


def image_layout():
    return {"heads": HEADS, "blocks": BLOCKS, "image": (IMAGE_SHAPE, [1], 1.0)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared"])
def test_entity_outputs_match_the_float64_reference(tmp_path, backend, shared):
    policy = build(tmp_path, backend, entity_space(), shared)
    names = set(policy.get_weights())
    assert ("relational/block_1/mlp_0/kernel" in names) is not shared
    obs = entity_obs(np.random.default_rng(0), 7)
    dist_inputs, values = model_outputs(policy, backend, obs)
    ref = relational_actor_critic(policy.get_weights(), obs, **entity_layout())
    np.testing.assert_allclose(dist_inputs, ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, ref[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared"])
def test_conv_cell_outputs_with_coordinates_match_the_float64_reference(tmp_path, backend, shared):
    policy = build(tmp_path, backend, image_space(), shared, conv_filters=IMAGE_FILTERS)
    assert policy.get_weights()["relational/input/kernel"].shape == (3 + 2, DIM)
    obs = np.random.default_rng(1).random(size=(5, int(np.prod(IMAGE_SHAPE)))).astype(np.float32)
    dist_inputs, values = model_outputs(policy, backend, obs)
    ref = relational_actor_critic(policy.get_weights(), obs, **image_layout())
    np.testing.assert_allclose(dist_inputs, ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, ref[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rows_are_absent_entities_and_change_nothing(tmp_path, backend):
    """The same weights on 5 and on 8 entity slots: 3 zero rows inserted anywhere change no output."""
    small = build(tmp_path, backend, entity_space())
    large = build(tmp_path, backend, entity_space(N + 3))
    large.set_weights(small.get_weights())
    rng = np.random.default_rng(2)
    obs = entity_obs(rng, 6).reshape(6, N, F)
    padded = np.zeros((6, N + 3, F), np.float32)
    for row in range(6):
        slots = np.sort(rng.choice(N + 3, size=N, replace=False))
        padded[row, slots] = obs[row]
    out_small = model_outputs(small, backend, obs.reshape(6, -1))
    out_large = model_outputs(large, backend, padded.reshape(6, -1))
    for a, b in zip(out_small, out_large, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    empty = model_outputs(small, backend, np.zeros((1, N * F), np.float32))
    assert all(np.isfinite(x).all() for x in empty)  # no entity at all: pooled zeros, not NaN


CASES = {
    "entities-separate": (entity_space, False, {}, entity_layout),
    "image-shared": (image_space, True, {"conv_filters": IMAGE_FILTERS}, image_layout),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a2c_loss_and_gradients_through_the_module_match_the_reference(tmp_path, backend, case, monkeypatch):
    """The A2C loss reference with the relational reference as its network; every weight's gradient."""
    space, shared, model, layout = CASES[case]
    policy = build(tmp_path, backend, space(), shared, training={"entropy_coeff": 0.04}, **model)
    rng = np.random.default_rng(3)
    n = 6
    if case.startswith("entities"):
        obs = entity_obs(rng, n)
    else:
        obs = rng.random(size=(n, int(np.prod(IMAGE_SHAPE)))).astype(np.float32)
    batch = SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: rng.integers(2, size=n).astype(np.int64),
            SB.ADVANTAGES: (0.5 + 1.5 * rng.normal(size=n)).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )
    monkeypatch.setattr(losses, "actor_critic", lambda w, o: relational_actor_critic(w, o, **layout()))
    training = policy.config.training
    normalize = training.normalize_advantages
    weights = policy.get_weights()
    _, expected = losses.reference(weights, batch, training, False, True, normalize)
    grads = finite_difference_gradient(
        lambda w: losses.reference(w, batch, training, False, True, normalize)[0], weights
    )
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    blocks = 1 if shared else BLOCKS
    for block in range(blocks):  # the gradient reaches every block's attention
        assert np.abs(grads[f"relational/block_{block}/attention/key/kernel"]).max() > 1e-4
    assert_update_is_sgd_on(update, grads, training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_catches_absent_entities_left_unmasked(tmp_path, backend, monkeypatch):
    """A planted bug: every row counts as present, so zero rows join the keys and the max pooling."""
    policy = build(tmp_path, backend, entity_space())
    obs = entity_obs(np.random.default_rng(4), 7)
    ref = relational_actor_critic(policy.get_weights(), obs, **entity_layout())
    np.testing.assert_allclose(model_outputs(policy, backend, obs)[0], ref[0], rtol=1e-4, atol=1e-5)
    encoder = type(policy.model.encoder)
    if backend == "torch":
        import torch

        monkeypatch.setattr(
            encoder, "present_entities", staticmethod(lambda e: torch.ones_like(e[..., 0]).bool())
        )
    else:
        import tensorflow as tf

        monkeypatch.setattr(encoder, "present_entities", staticmethod(lambda e: tf.ones_like(e[..., 0]) > 0))
    buggy = model_outputs(policy, backend, obs)[0]
    assert np.abs(buggy - ref[0]).max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_reference_tells_max_pooling_from_mean_pooling(tmp_path, backend):
    """The other planted bug, on the reference side: a mean over entities is far from the backend's max."""
    policy = build(tmp_path, backend, entity_space())
    obs = entity_obs(np.random.default_rng(5), 7)
    outputs = model_outputs(policy, backend, obs)[0]
    mean = relational_actor_critic(policy.get_weights(), obs, **entity_layout(), pool="mean")
    assert np.abs(outputs - mean[0]).max() > 1e-3
