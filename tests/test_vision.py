"""Conv nets for image observations (``model.conv_filters``): layers, config errors, portable weights.

The conv trunk's contract (``rlgear.config.conv``): images ``[H, W, C]`` arrive flat in
HWC order, uint8 is scaled by 1/255, conv layers have no padding and ReLU, the
output is flattened in HWC order; neutral conv kernels are ``[kh, kw, in, out]``.
A plain-numpy forward pass written from that contract must reproduce each
backend's outputs from the exported weights, and weights, gradients and
checkpoints must move between the backends unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.config.conv import MINATAR_FILTERS, NATURE_FILTERS, conv_layers
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete
from tests.conftest import needs_tf
from tests.numpy_reference import dense, make_policy, mlp_body, resolve

QUADRANT_ENV = "tests.image_env:QuadrantEnv"
IMAGE_OBS = Box(np.zeros((12, 12, 3)), np.full((12, 12, 3), 255), np.uint8)
BOOL_OBS = Box(np.zeros((10, 10, 4)), np.ones((10, 10, 4)), np.bool_)
ACTIONS = Discrete(4)
FILTERS = [[6, 3, 2], [5, 2, 1]]  # 12x12 -> 5x5 -> 4x4: a stride and two layers, so order errors show


class ModelStub:
    def __init__(self, conv_filters):
        self.conv_filters = conv_filters


# ----------------------------------------------------------------------------- numpy reference


def conv2d(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """``[B, H, W, C]`` -> ``[B, H', W', out]``: no padding, kernel ``[kh, kw, in, out]``, by loops."""
    kh, kw, _, out = kernel.shape
    batch, height, width, _ = x.shape
    oh, ow = (height - kh) // stride + 1, (width - kw) // stride + 1
    y = np.zeros((batch, oh, ow, out))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            y[:, i, j, :] = np.einsum("bhwc,hwco->bo", patch, kernel)
    return y + bias


def conv_trunk(weights, scope: str, images: np.ndarray, scale: float) -> np.ndarray:
    """``{scope}/conv_<i>`` layers with ReLU, flattened in HWC order, from neutral weights (float64)."""
    x = np.asarray(images, np.float64) * scale
    index = 0
    while f"{scope}/conv_{index}/kernel" in weights:
        kernel = np.asarray(weights[f"{scope}/conv_{index}/kernel"], np.float64)
        bias = np.asarray(weights[f"{scope}/conv_{index}/bias"], np.float64)
        stride = STRIDES[index]
        x = np.maximum(conv2d(x, kernel, bias, stride), 0.0)
        index += 1
    assert index == len(FILTERS)
    return x.reshape(len(x), -1)


STRIDES = [stride for _, _, stride in FILTERS]


def reference_actor_critic(weights, images, shared_mlp: bool):
    features = conv_trunk(weights, "shared", images, 1 / 255)
    if shared_mlp:
        policy_h = value_h = mlp_body(weights, "shared", features, "relu")
    else:
        policy_h, value_h = (
            mlp_body(weights, "policy", features, "relu"),
            mlp_body(weights, "value", features, "relu"),
        )
    return dense(weights, "policy/output", policy_h), dense(weights, "value/output", value_h)[:, 0]


def reference_q_values(weights, images):
    features = mlp_body(weights, "q", conv_trunk(weights, "q", images, 1 / 255), "relu")
    return dense(weights, "q/output", features)


def perturbed(weights, seed=1):
    """Every weight moved off its initial value (biases and all), so each one matters."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in sorted(weights.items()):
        fan_in = np.prod(value.shape[:-1]) if name.endswith("kernel") else 1
        out[name] = (value + rng.normal(size=value.shape) * 0.5 / np.sqrt(fan_in)).astype(np.float32)
    return out


def images(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, size=(n, 12, 12, 3)) * (rng.random((n, 12, 12, 3)) < 0.5)).astype(np.uint8)


def image_policy(tmp_path, backend, algorithm="ppo", shared_mlp=False, training=None):
    model = {
        "conv_filters": FILTERS,
        "hidden_sizes": [8],
        "activation": "relu",
        "vf_share_layers": shared_mlp,
    }
    if algorithm == "dqn":
        training = {"dueling": False, **(training or {})}
    config = resolve(tmp_path, algorithm, training, model, env=QUADRANT_ENV, backend=backend)
    return make_policy(config, backend, IMAGE_OBS, ACTIONS)


BACKENDS = ["torch", pytest.param("tf", marks=needs_tf)]


# ----------------------------------------------------------------------------- layers and config errors


def test_default_filters_are_nature_dqn_for_atari_frames_and_minatar_for_10x10():
    atari = conv_layers(Box(np.zeros((84, 84, 4)), np.full((84, 84, 4), 255), np.uint8), ModelStub(None))
    assert [[layer.out_channels, layer.kernel, layer.stride] for layer in atari.layers] == NATURE_FILTERS
    assert atari.output_shape == (7, 7, 64) and atari.output_dim == 3136 and atari.scale == 1 / 255
    minatar = conv_layers(BOOL_OBS, ModelStub(None))
    assert [[layer.out_channels, layer.kernel, layer.stride] for layer in minatar.layers] == MINATAR_FILTERS
    assert minatar.output_shape == (8, 8, 16) and minatar.scale == 1.0  # bool/float images are not scaled
    assert conv_layers(Box(np.zeros(4), np.ones(4)), ModelStub(None)) is None  # flat: no conv trunk


def test_a_filter_stack_that_shrinks_the_image_below_one_pixel_names_the_layer_and_sizes():
    with pytest.raises(ConfigError) as err:
        conv_layers(BOOL_OBS, ModelStub([[16, 3, 2], [32, 3, 2], [32, 3, 1]]))  # 10 -> 4 -> 1 -> (3 > 1)
    message = str(err.value)
    assert "model.conv_filters[2]" in message and "1x1 input of layer 2" in message and "10x10x4" in message


@pytest.mark.parametrize("entry", [[16, 3], [16, 0, 1], [16, 3.0, 1], "16x3"])
def test_a_malformed_filter_is_refused_naming_its_index(entry):
    with pytest.raises(
        ConfigError, match=r"model\.conv_filters\[1\]: expected \[out_channels, kernel, stride\]"
    ):
        conv_layers(BOOL_OBS, ModelStub([[16, 3, 1], entry]))


def test_conv_filters_on_a_flat_observation_space_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.conv_filters: set, but the observation space"):
        conv_layers(Box(np.zeros(4), np.ones(4)), ModelStub([[16, 3, 1]]))


def test_a_run_with_a_bad_filter_stack_fails_with_the_config_error(tmp_path):
    import rlgear

    with pytest.raises(ConfigError, match=r"model\.conv_filters\[0\]: kernel 13 does not fit the 12x12"):
        rlgear.train(
            {
                "algorithm": "ppo",
                "env": {"name": QUADRANT_ENV},
                "model": {"conv_filters": [[8, 13, 1]]},
                "stop": {"training_iteration": 1},
                "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
            }
        )


# ----------------------------------------------------------------------------- the numpy contract


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared_mlp", [False, True])
def test_numpy_forward_from_neutral_weights_reproduces_the_actor_critic(tmp_path, backend, shared_mlp):
    policy = image_policy(tmp_path, backend, shared_mlp=shared_mlp)
    weights = perturbed(policy.get_weights())
    assert weights["shared/conv_0/kernel"].shape == (3, 3, 3, 6)  # [kh, kw, in, out]
    assert weights["shared/conv_1/kernel"].shape == (2, 2, 6, 5)
    body = "shared" if shared_mlp else "policy"
    assert weights[f"{body}/hidden_0/kernel"].shape == (4 * 4 * 5, 8)
    assert policy.fast_actor is not None and policy.fast_actor.trunk is not None  # acts in numpy
    policy.set_weights(weights)
    obs = images()
    expected_logits, expected_values = reference_actor_critic(weights, obs, shared_mlp)
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected_logits, rtol=1e-5, atol=1e-5)
    _, _, extras = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(extras[SB.VF_PREDS], expected_values, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_forward_from_neutral_weights_reproduces_the_q_network(tmp_path, backend):
    policy = image_policy(tmp_path, backend, "dqn")
    weights = perturbed(policy.get_weights())
    assert sorted(weights) == sorted(
        [f"q/conv_{i}/{p}" for i in range(2) for p in ("kernel", "bias")]
        + ["q/hidden_0/kernel", "q/hidden_0/bias", "q/output/kernel", "q/output/bias"]
    )
    policy.set_weights(weights)
    obs = images()
    expected = reference_q_values(weights, obs)
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected, rtol=1e-5, atol=1e-5)
    actions, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_array_equal(actions, expected.argmax(axis=1))


def timestep_of(obs):
    from rlgear.timestep import StepType, TimeStep

    n = len(obs)
    return TimeStep(
        np.full(n, StepType.MID, np.int32),
        np.zeros(n, np.float32),
        np.ones(n, np.float32),
        obs,
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int32),
    )


# ----------------------------------------------------------------------------- across backends


@needs_tf
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
@pytest.mark.parametrize("direction", ["torch->tf", "tf->torch"])
def test_image_weights_moved_between_backends_act_identically(tmp_path, algorithm, direction):
    torch_policy, tf_policy = (
        image_policy(tmp_path, "torch", algorithm),
        image_policy(tmp_path, "tf", algorithm),
    )
    source, target = (torch_policy, tf_policy) if direction == "torch->tf" else (tf_policy, torch_policy)
    source.set_weights(perturbed(source.get_weights(), seed=5))
    target.set_weights(source.get_weights())
    obs = images(64, seed=2)
    np.testing.assert_allclose(
        target.action_distribution_inputs(obs), source.action_distribution_inputs(obs), rtol=1e-5, atol=1e-5
    )
    greedy = [p.compute_actions(timestep_of(obs), explore=False)[0] for p in (source, target)]
    np.testing.assert_array_equal(greedy[0], greedy[1])
    back = target.get_weights()
    for name, value in source.get_weights().items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


@needs_tf
def test_a3c_conv_gradients_cross_backends_in_the_neutral_layout(tmp_path):
    training = {"optimizer": "sgd", "lr": 0.1, "grad_clip": None, "entropy_coeff": 0.01}
    torch_policy = image_policy(tmp_path, "torch", "a3c", training=training)
    tf_policy = image_policy(tmp_path, "tf", "a3c", training=training)
    weights = perturbed(torch_policy.get_weights(), seed=7)
    torch_policy.set_weights(weights)
    tf_policy.set_weights(weights)
    rng = np.random.default_rng(3)
    n = 24
    batch = SB(
        {
            SB.OBS: images(n, seed=4),
            SB.ACTIONS: rng.integers(4, size=n).astype(np.int64),
            SB.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )
    torch_grads, _ = torch_policy.compute_gradients(batch)
    tf_grads, _ = tf_policy.compute_gradients(batch)
    assert torch_grads.keys() == tf_grads.keys()
    for name in torch_grads:
        assert torch_grads[name].shape == weights[name].shape, name
        assert np.abs(torch_grads[name]).max() > 0, name  # every conv weight is reached
        np.testing.assert_allclose(tf_grads[name], torch_grads[name], rtol=1e-4, atol=1e-5, err_msg=name)
    # A learner on the other backend applies a worker's gradients: the same update as applying its own.
    torch_policy.apply_gradients(tf_grads)
    tf_policy.apply_gradients(torch_grads)
    for name, value in torch_policy.get_weights().items():
        np.testing.assert_allclose(tf_policy.get_weights()[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
        expected = weights[name] - 0.1 * torch_grads[name]
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5, err_msg=name)


# ----------------------------------------------------------------------------- runs and checkpoints


def train_on_images(tmp_path, backend, algorithm="ppo", iterations=2):
    import rlgear

    training = {
        "ppo": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
        "dqn": {"learning_starts": 32, "train_batch_size": 16, "min_env_steps_per_iteration": 64},
    }[algorithm]
    result = rlgear.train(
        {
            "algorithm": algorithm,
            "backend": backend,
            "seed": 0,
            "env": {"name": QUADRANT_ENV},
            "workers": {"num_envs_per_worker": 2},
            "training": training,
            "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "activation": "relu"},
            "stop": {"training_iteration": iterations},
            "logging": {"dir": str(tmp_path / backend), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == iterations and result["timesteps_total"] >= 64
    assert np.isfinite(result["episode_return_mean"])
    (run_dir,) = (tmp_path / backend).iterdir()
    return run_dir


@needs_tf
@pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_an_image_checkpoint_of_one_backend_is_evaluated_identically_by_the_other(
    tmp_path, capsys, trained_with, evaluated_with
):
    from rlgear.cli import main as cli_main
    from rlgear.run import agent

    run_dir = train_on_images(tmp_path, trained_with)
    code = cli_main(["evaluate", str(run_dir), "--episodes", "2", "--set", f"backend={evaluated_with}"])
    out = capsys.readouterr().out
    assert code == 0 and "episodes 2 | return mean" in out, out
    original, moved = agent.load(run_dir), agent.load(run_dir, [f"backend={evaluated_with}"])
    assert type(moved.policy).__module__.endswith(f"{evaluated_with}_policy")
    obs = images(32, seed=9)
    np.testing.assert_allclose(
        moved.policy.action_distribution_inputs(obs),
        original.policy.action_distribution_inputs(obs),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(moved.compute_actions(obs), original.compute_actions(obs))


@needs_tf
@pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
def test_dqn_conv_policy_trains_on_tf(tmp_path):
    """A short TF run (no learning claim): replay, target network and the TD step run with a conv net."""
    run_dir = train_on_images(tmp_path, "tf", "dqn", iterations=2)
    from rlgear.run import agent

    loaded = agent.load(run_dir)
    assert "q/conv_1/kernel" in loaded.policy.get_weights()


def test_a_minatar_id_resolves_through_its_gymnasium_entry_point():
    pytest.importorskip("minatar", reason="needs MinAtar: pip install 'rlgear[minatar]'")
    from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter

    env = GymnasiumAdapter().make("MinAtar/Breakout-v1", 2, kwargs={})
    try:
        assert env.observation_space.shape == (10, 10, 4) and env.observation_space.dtype == bool
        assert env.action_space == Discrete(3)
        assert env.reset(seed=0).observation.shape == (2, 10, 10, 4)
    finally:
        env.close()


def test_the_yaml_examples_of_the_models_page_are_valid_configs(tmp_path):
    """docs/models.md's config snippets resolve (and the conv and filter keys mean what the page says)."""
    import re
    from pathlib import Path

    import yaml

    from rlgear import config as config_mod

    page = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", page, flags=re.S)]
    assert len(blocks) == 4
    resolved = [config_mod.resolve({"algorithm": "ppo", **block}) for block in blocks]
    assert resolved[0].model.conv_filters == MINATAR_FILTERS and resolved[0].env.name == "MinAtar/Breakout-v1"
    assert resolved[1].model.conv_filters == [
        [16, 4, 2],
        [32, 3, 2],
    ]  # tests/test_dict_image_layout.py runs it
    assert (
        resolved[2].model.observation_filter == "mean_std"
        and resolved[2].model.observation_filter_clip == 5.0
    )
    assert resolved[3].env.wrappers_vector[0].name == "gymnasium.wrappers.vector.NormalizeObservation"


@pytest.mark.parametrize("algorithm", ["pg", "a2c", "a3c", "impala"])
def test_every_actor_critic_algorithm_trains_a_conv_policy(tmp_path, algorithm):
    """One short torch run each (no learning claim): their batches and losses take image observations."""
    import rlgear

    result = rlgear.train(
        {
            "algorithm": algorithm,
            "seed": 0,
            "env": {"name": QUADRANT_ENV},
            "workers": {"num_envs_per_worker": 2},
            "training": {"train_batch_size": 64},
            "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "activation": "relu"},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 2 and result["timesteps_total"] >= 64
    assert np.isfinite(result["learner/total_loss"]), result
