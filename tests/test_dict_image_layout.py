"""Images nested in Dict/Tuple observations reach the conv net; the other parts join its features.

The layout (``rlgear.config.conv.ImageVectorBox``): the preprocessor writes one flat
float32 row per observation, the image's ``H * W * C`` values first (HWC order,
unscaled), then the other parts flattened as for any Dict/Tuple. The conv trunk
takes the image part; the hidden layers see ``[conv features, vector part]``. Checked
here: the row by hand, the models of both backends against a numpy forward pass from
the neutral weights, the numpy acting twin against the framework, weights moved
between backends, the observation filter (vector part only), and short runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.config.conv import ImageVectorBox, conv_layers
from rlgear.errors import ConfigError
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.observation_filter import make_observation_filter
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, Tuple
from tests.conftest import needs_tf
from tests.numpy_reference import dense, make_policy, mlp_body, resolve
from tests.test_conv_inference import perturbed as seeded_weights
from tests.test_vision import FILTERS, IMAGE_OBS, conv_trunk, images, timestep_of

DICT_IMAGE_ENV = "tests.dict_image_env:DictImageEnv"
ACTIONS = Discrete(4)
BACKENDS = ["torch", pytest.param("tf", marks=needs_tf)]
VECTOR_SIZE = 3  # the rows' vector part in the model tests


def box(*shape, low=-1.0, high=1.0, dtype=np.float32):
    return Box(np.full(shape, low), np.full(shape, high), np.dtype(dtype))


# ----------------------------------------------------------------------------- the preprocessor


def test_an_image_nested_in_a_tuple_heads_the_row_and_the_other_parts_follow_in_order():
    image_space = box(2, 2, 2, low=0, high=255, dtype=np.uint8)
    space = Dict({"z": box(2), "a": Discrete(2), "b": Tuple([box(1), image_space])})
    prep = ObservationPreprocessor(space, Discrete(3))
    layout = prep.observation_space
    assert isinstance(layout, ImageVectorBox) and layout.image == image_space
    assert layout.shape == (13,) and layout.vector_size == 5  # image 8 | a one-hot 2 | b[0] 1 | z 2
    observations = {
        "z": np.array([[0.5, -0.5], [1.0, 2.0]], np.float32),
        "a": np.array([1, 0]),
        "b": (np.array([[7.0], [-3.0]], np.float32), np.arange(16, dtype=np.uint8).reshape(2, 2, 2, 2)),
    }
    expected = np.array(
        [
            # image, HWC order (8)    | a (2) | b[0] | z (2)
            [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 7.0, 0.5, -0.5],
            [8, 9, 10, 11, 12, 13, 14, 15, 1, 0, -3.0, 1.0, 2.0],
        ],
        np.float32,
    )
    out = prep.transform(observations)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


def test_the_action_mask_leaves_the_layout_and_is_read_as_the_mask():
    space = Dict({"action_mask": MultiBinary(3), "pixels": box(1, 2, 1, low=0, high=1), "speed": box(1)})
    prep = ObservationPreprocessor(space, Discrete(3))
    assert isinstance(prep.observation_space, ImageVectorBox) and prep.observation_space.vector_size == 1
    obs = {
        "action_mask": np.array([[1, 0, 1]], np.int8),
        "pixels": np.array([[[[0.25], [0.75]]]], np.float32),
        "speed": np.array([[-2.0]], np.float32),
    }
    np.testing.assert_array_equal(prep.transform(obs), [[0.25, 0.75, -2.0]])
    np.testing.assert_array_equal(prep.action_mask(obs), [[True, False, True]])


def test_an_image_alone_beside_the_action_mask_still_passes_through_as_a_plain_image():
    prep = ObservationPreprocessor(Dict({"action_mask": MultiBinary(4), "observation": IMAGE_OBS}), ACTIONS)
    assert prep.observation_space == IMAGE_OBS and not isinstance(prep.observation_space, ImageVectorBox)


def test_two_images_are_refused_naming_both():
    space = Dict({"left": IMAGE_OBS, "more": Tuple([box(2), IMAGE_OBS])})
    with pytest.raises(ConfigError, match=r"2 images .*observation\['left'\], observation\['more'\]\[1\]"):
        ObservationPreprocessor(space, ACTIONS, env_name="twin-cams")


def test_the_conv_spec_of_the_layout_is_the_images_with_the_vector_appended():
    class Model:
        conv_filters = FILTERS

    layout = ObservationPreprocessor(Dict({"image": IMAGE_OBS, "v": box(VECTOR_SIZE)})).observation_space
    spec, plain = conv_layers(layout, Model()), conv_layers(IMAGE_OBS, Model())
    assert spec.layers == plain.layers and spec.scale == plain.scale == 1 / 255
    assert (spec.vector_size, spec.conv_dim, spec.output_dim) == (VECTOR_SIZE, 80, 80 + VECTOR_SIZE)


def test_the_layout_space_survives_pickling_and_differs_from_a_plain_box_of_its_size():
    import pickle

    layout = ObservationPreprocessor(Dict({"image": IMAGE_OBS, "v": box(VECTOR_SIZE)})).observation_space
    again = pickle.loads(pickle.dumps(layout))  # Ray workers receive it so
    assert again == layout and hash(again) == hash(layout) and again.image == IMAGE_OBS
    plain = Box(layout.low, layout.high)
    assert layout != plain and plain != layout  # the layout is part of what the model reads


# ----------------------------------------------------------------------------- the observation filter


def test_mean_std_normalises_the_vector_part_only_and_keeps_its_statistics_in_the_vectors_shape():
    class Model:
        observation_filter = "mean_std"
        observation_filter_clip = 10.0

    layout = ObservationPreprocessor(
        Dict({"image": box(1, 1, 2, low=0, high=255, dtype=np.uint8), "v": box(1)})
    ).observation_space
    obs_filter = make_observation_filter(Model(), layout)
    rows = np.array([[200, 3, 1.0], [100, 5, 3.0]], np.float32)
    out = obs_filter(rows)
    assert obs_filter.shape == (1,) and obs_filter.get_state()["mean"].tolist() == [2.0]
    # v: mean 2, population variance 1 -> -1 and +1; the pixels are untouched
    np.testing.assert_allclose(out, [[200, 3, -1.0], [100, 5, 1.0]], atol=1e-6)


# ----------------------------------------------------------------------------- models against numpy


def layout_space() -> ImageVectorBox:
    space = ObservationPreprocessor(Dict({"image": IMAGE_OBS, "v": box(VECTOR_SIZE)})).observation_space
    assert isinstance(space, ImageVectorBox)
    return space


def layout_rows(n=16, seed=0) -> np.ndarray:
    """Rows ``[image (12 * 12 * 3) | vector (3)]`` with vector values large enough to move the outputs."""
    vectors = np.random.default_rng(seed + 100).normal(size=(n, VECTOR_SIZE)) * 2
    return np.concatenate([images(n, seed).reshape(n, -1), vectors], axis=1).astype(np.float32)


def features(weights, scope, rows):
    """The layout's contract in numpy: conv features of the image part, then the vector part."""
    image_size = 12 * 12 * 3
    conv = conv_trunk(weights, scope, rows[:, :image_size].reshape(-1, 12, 12, 3), 1 / 255)
    return np.concatenate([conv, rows[:, image_size:].astype(np.float64)], axis=1)


def layout_policy(tmp_path, backend, algorithm="ppo", twin=True, shared_mlp=False):
    model = {
        "conv_filters": FILTERS,
        "hidden_sizes": [8],
        "activation": "relu",
        "vf_share_layers": shared_mlp,
        "numpy_inference": twin,
    }
    training = {"dueling": False} if algorithm == "dqn" else None
    config = resolve(tmp_path, algorithm, training, model, env=DICT_IMAGE_ENV, backend=backend)
    return make_policy(config, backend, layout_space(), ACTIONS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared_mlp", [False, True])
def test_the_actor_critic_reads_the_image_through_the_conv_net_and_the_vector_beside_it(
    tmp_path, backend, shared_mlp
):
    policy = layout_policy(tmp_path, backend, shared_mlp=shared_mlp)
    weights = seeded_weights(policy.get_weights())
    body = "shared" if shared_mlp else "policy"
    assert weights["shared/conv_0/kernel"].shape == (3, 3, 3, 6)
    assert weights[f"{body}/hidden_0/kernel"].shape == (4 * 4 * 5 + VECTOR_SIZE, 8)
    policy.set_weights(weights)
    rows = layout_rows()
    x = features(weights, "shared", rows)
    policy_h = mlp_body(weights, body, x, "relu")
    value_h = policy_h if shared_mlp else mlp_body(weights, "value", x, "relu")
    expected_logits, expected_values = (
        dense(weights, "policy/output", policy_h),
        dense(weights, "value/output", value_h)[:, 0],
    )
    logits = policy.action_distribution_inputs(rows)
    assert logits.shape == (16, 4)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    _, _, extras = policy.compute_actions(timestep_of(rows), explore=False)
    np.testing.assert_allclose(extras[SB.VF_PREDS], expected_values, rtol=1e-5, atol=1e-5)
    # The vector part is read: changing it alone changes the logits.
    moved = rows.copy()
    moved[:, -VECTOR_SIZE:] += 1.0
    assert np.abs(policy.action_distribution_inputs(moved) - logits).max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_dqn_q_network_reads_the_same_layout(tmp_path, backend):
    policy = layout_policy(tmp_path, backend, "dqn")
    weights = seeded_weights(policy.get_weights())
    assert weights["q/hidden_0/kernel"].shape == (80 + VECTOR_SIZE, 8)
    policy.set_weights(weights)
    rows = layout_rows()
    expected = dense(weights, "q/output", mlp_body(weights, "q", features(weights, "q", rows), "relu"))
    np.testing.assert_allclose(policy.action_distribution_inputs(rows), expected, rtol=1e-5, atol=1e-5)
    actions, _, _ = policy.compute_actions(timestep_of(rows), explore=False)
    np.testing.assert_array_equal(actions, expected.argmax(axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_numpy_twin_acts_as_the_framework_on_the_layout(tmp_path, backend):
    fast, framework = (
        layout_policy(tmp_path, backend, twin=True),
        layout_policy(tmp_path, backend, twin=False),
    )
    assert fast.fast_actor is not None and fast.fast_actor.trunk is not None and framework.fast_actor is None
    weights = seeded_weights(framework.get_weights(), seed=3)
    fast.set_weights(weights)
    framework.set_weights(weights)
    rows = layout_rows(24, seed=5)
    fast.fast_actor.load(fast.get_weights(), fast.weights_version)
    expected = framework.action_distribution_inputs(rows)
    np.testing.assert_allclose(fast.fast_actor.dist_inputs(rows), expected, rtol=1e-5, atol=1e-5)
    actions, _, extras = fast.compute_actions(timestep_of(rows), explore=False)
    expected_actions, _, expected_extras = framework.compute_actions(timestep_of(rows), explore=False)
    np.testing.assert_array_equal(actions, expected_actions)
    assert len(set(expected_actions.tolist())) > 1  # not one constant action
    for key in (SB.VF_PREDS, SB.ACTION_LOGP):
        np.testing.assert_allclose(extras[key], expected_extras[key], rtol=1e-5, atol=1e-5, err_msg=key)


@needs_tf
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
@pytest.mark.parametrize("direction", ["torch->tf", "tf->torch"])
def test_layout_weights_moved_between_backends_act_identically(tmp_path, algorithm, direction):
    torch_policy, tf_policy = (
        layout_policy(tmp_path, "torch", algorithm),
        layout_policy(tmp_path, "tf", algorithm),
    )
    source, target = (torch_policy, tf_policy) if direction == "torch->tf" else (tf_policy, torch_policy)
    source.set_weights(seeded_weights(source.get_weights(), seed=5))
    target.set_weights(source.get_weights())
    rows = layout_rows(64, seed=2)
    np.testing.assert_allclose(
        target.action_distribution_inputs(rows), source.action_distribution_inputs(rows), rtol=1e-5, atol=1e-5
    )
    greedy = [p.compute_actions(timestep_of(rows), explore=False)[0] for p in (source, target)]
    np.testing.assert_array_equal(greedy[0], greedy[1])


# ----------------------------------------------------------------------------- an LSTM on top

LSTM_MODEL = {"lstm": True, "lstm_cell_size": 6, "max_seq_len": 4}


def lstm_layout_policy(tmp_path, backend, twin=True):
    model = {"conv_filters": FILTERS, "hidden_sizes": [8], "activation": "relu", "numpy_inference": twin}
    config = resolve(tmp_path, "ppo", None, {**model, **LSTM_MODEL}, env=DICT_IMAGE_ENV, backend=backend)
    policy = make_policy(config, backend, layout_space(), ACTIONS)
    assert policy.recurrent
    return policy


def recurrent_timestep(rows, first):
    from rlgear.timestep import StepType, TimeStep

    n = len(rows)
    return TimeStep(
        np.where(first, StepType.FIRST, StepType.MID).astype(np.int32),
        np.zeros(n, np.float32),
        np.ones(n, np.float32),
        rows,
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int32),
    )


def reference_lstm_step(weights, rows, h, c):
    """conv features + vector -> shared/hidden_0 (relu) -> one LSTM step (gates i, f, g, o) -> heads."""
    x = mlp_body(weights, "shared", features(weights, "shared", rows), "relu")
    z = x @ weights["lstm/kernel"] + h @ weights["lstm/recurrent_kernel"] + weights["lstm/bias"]
    cell = h.shape[1]
    sigmoid = 1 / (1 + np.exp(-z))
    c = sigmoid[:, cell : 2 * cell] * c + sigmoid[:, :cell] * np.tanh(z[:, 2 * cell : 3 * cell])
    h = sigmoid[:, 3 * cell :] * np.tanh(c)
    return dense(weights, "policy/output", h), dense(weights, "value/output", h)[:, 0], h, c


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_lstm_over_the_layout_runs_the_conv_net_first_in_the_framework_and_the_twin(tmp_path, backend):
    framework = lstm_layout_policy(tmp_path, backend, twin=False)
    fast = lstm_layout_policy(tmp_path, backend, twin=True)
    assert fast.fast_actor is not None and fast.fast_actor.conv is not None
    weights = seeded_weights(framework.get_weights(), seed=4)
    assert weights["shared/conv_0/kernel"].shape == (3, 3, 3, 6)
    assert weights["shared/hidden_0/kernel"].shape == (80 + VECTOR_SIZE, 8)
    framework.set_weights(weights)
    fast.set_weights(weights)
    n = 5
    h = c = np.zeros((n, 6))
    state_a = state_b = framework.get_initial_state(n)
    for step in range(3):
        rows = layout_rows(n, seed=10 + step)
        first = np.full(n, step == 0)
        dist_inputs, values, _ = framework.recurrent_step(recurrent_timestep(rows, first), state_a)
        logits, expected_values, h, c = reference_lstm_step(weights, rows.astype(np.float64), h, c)
        np.testing.assert_allclose(np.asarray(dist_inputs), logits, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(values), expected_values, rtol=1e-4, atol=1e-5)
        actions_a, state_a, extras_a = framework.compute_actions(
            recurrent_timestep(rows, first), state_a, False
        )
        actions_b, state_b, extras_b = fast.compute_actions(recurrent_timestep(rows, first), state_b, False)
        np.testing.assert_array_equal(actions_a, actions_b)
        for key in (SB.ACTION_LOGP, SB.VF_PREDS):
            np.testing.assert_allclose(extras_a[key], extras_b[key], rtol=1e-5, atol=1e-5, err_msg=key)
        for x, y, ref in zip(state_a, state_b, (h, c), strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5)
            np.testing.assert_allclose(x, ref, rtol=1e-4, atol=1e-5)
    assert np.abs(h).max() > 1e-2  # the state moves: the comparisons mean something


@needs_tf
def test_lstm_layout_weights_move_between_backends(tmp_path):
    torch_policy = lstm_layout_policy(tmp_path, "torch", twin=False)
    tf_policy = lstm_layout_policy(tmp_path, "tf", twin=False)
    torch_policy.set_weights(seeded_weights(torch_policy.get_weights(), seed=6))
    tf_policy.set_weights(torch_policy.get_weights())
    rows = layout_rows(4, seed=3)
    state = torch_policy.get_initial_state(4)
    ts = recurrent_timestep(rows, np.ones(4, bool))
    for a, b in zip(torch_policy.recurrent_step(ts, state), tf_policy.recurrent_step(ts, state), strict=True):
        a, b = (np.asarray(a), np.asarray(b)) if not isinstance(a, list) else (np.stack(a), np.stack(b))
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
@pytest.mark.parametrize(
    ("algorithm", "backend"),
    [("ppo", "torch"), ("impala", "torch"), pytest.param("ppo", "tf", marks=needs_tf)],
)
def test_an_lstm_policy_trains_on_a_dict_image_env(tmp_path, algorithm, backend):
    """A short run (no learning claim): sequences of layout rows reach the conv net and the LSTM."""
    import rlgear

    training = {"train_batch_size": 64}
    if algorithm == "ppo":
        training.update(sgd_minibatch_size=32, num_sgd_iter=1)
    result = rlgear.train(
        {
            "algorithm": algorithm,
            "backend": backend,
            "seed": 0,
            "env": {"name": DICT_IMAGE_ENV},
            "workers": {"num_envs_per_worker": 2},
            "training": training,
            "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "activation": "relu", **LSTM_MODEL},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 2 and np.isfinite(result["episode_return_mean"])


# ----------------------------------------------------------------------------- runs and checkpoints


def train_on_dict_images(tmp_path, backend, algorithm="ppo"):
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
            "env": {"name": DICT_IMAGE_ENV},
            "workers": {"num_envs_per_worker": 2},
            "training": training,
            "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "activation": "relu"},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / backend), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 2 and np.isfinite(result["episode_return_mean"])
    (run_dir,) = (tmp_path / backend).iterdir()
    return run_dir


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_run_on_a_dict_image_env_builds_the_conv_net_over_the_image(tmp_path, algorithm):
    from rlgear.run import agent

    loaded = agent.load(train_on_dict_images(tmp_path, "torch", algorithm))
    scope = "q" if algorithm == "dqn" else "shared"
    body = "q" if algorithm == "dqn" else "policy"
    weights = loaded.policy.get_weights()
    assert weights[f"{scope}/conv_0/kernel"].shape == (3, 3, 3, 6)
    assert weights[f"{body}/hidden_0/kernel"].shape == (80 + 1, 16)  # conv features + the shift


@needs_tf
@pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
def test_a_torch_dict_image_checkpoint_is_evaluated_identically_by_tf(tmp_path, capsys):
    from rlgear.cli import main as cli_main
    from rlgear.run import agent

    run_dir = train_on_dict_images(tmp_path, "torch")
    code = cli_main(["evaluate", str(run_dir), "--episodes", "2", "--set", "backend=tf"])
    out = capsys.readouterr().out
    assert code == 0 and "episodes 2 | return mean" in out, out
    original, moved = agent.load(run_dir), agent.load(run_dir, ["backend=tf"])
    rng = np.random.default_rng(4)
    lit = images(32, seed=9)
    raw = {"image": lit, "shift": rng.choice([-1.0, 1.0], size=(32, 1)).astype(np.float32)}
    np.testing.assert_array_equal(moved.compute_actions(raw), original.compute_actions(raw))
    rows = original.preprocessor.transform(raw)
    np.testing.assert_allclose(
        moved.policy.action_distribution_inputs(rows),
        original.policy.action_distribution_inputs(rows),
        rtol=1e-5,
        atol=1e-5,
    )


def test_the_models_page_example_trains_on_a_dict_image_env(tmp_path):
    """docs/models.md's Dict-image YAML, with its placeholder env swapped for DictImageEnv, runs."""
    import re
    from pathlib import Path

    import yaml

    import rlgear

    page = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    section = page.split("## Images inside Dict and Tuple observations")[1].split("\n## ")[0]
    (block,) = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, flags=re.S)]
    assert block["env"]["name"] == "my_robot_env:RobotEnv"
    block["env"]["name"] = DICT_IMAGE_ENV
    result = rlgear.train(
        {
            **block,
            "seed": 0,
            "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1},
            "workers": {"num_envs_per_worker": 2},
            "stop": {"training_iteration": 1},
            "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
        }
    )
    assert result["training_iteration"] == 1 and result["timesteps_total"] > 0
    (run_dir,) = tmp_path.iterdir()
    from rlgear.run import agent

    weights = agent.load(run_dir).policy.get_weights()
    assert weights["shared/conv_1/kernel"].shape == (3, 3, 16, 32)  # 12x12 -> 5x5 -> 2x2
    assert weights["policy/hidden_0/kernel"].shape == (2 * 2 * 32 + 1, 256)
