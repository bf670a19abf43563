"""``rlgear export --format savedmodel``: every policy kind the torch exporters cover, as a SavedModel.

Each case trains a tiny checkpoint (1-2 iterations), exports it with
``rlgear.export.export(run, "savedmodel", out)`` and asserts ``rlgear.export.check(out)``: the
SavedModel, played through its ``serving_default`` signature, gives the same greedy actions as
rlgear's own acting on 1000 random observations (continuous ones within 1e-4). Plus: a
torch-trained checkpoint as a SavedModel and a TF-trained one as ONNX (any checkpoint exports,
whichever backend trained it), the signature against the ONNX graph's inputs and outputs,
``--explore`` sampling in the graph, the refusals torch also makes, and that exporting leaves
the live policy untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_tf

pytestmark = needs_tf

ONPOLICY = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1}
REPLAY = {"learning_starts": 32, "train_batch_size": 16}
EVOLUTION = {"num_perturbations": 2, "report_episodes": 1}
LSTM = {"hidden_sizes": [16], "lstm": True, "lstm_cell_size": 8}
#: 3 memory slots: the checker's 8 steps slide the window (each block remembers its last 3 inputs)
ATTENTION = {"hidden_sizes": [16], "attention": True, "attention_dim": 8, "attention_heads": 2,
             "attention_layers": 2, "attention_memory": 3, "max_seq_len": 4}  # fmt: skip

#: name -> (algorithm, env, training, model, stop)
KINDS = {
    "ppo": ("ppo", "CartPole-v1", ONPOLICY, {"hidden_sizes": [16, 16]}, None),
    "a2c": ("a2c", "CartPole-v1", {"train_batch_size": 64}, {"hidden_sizes": [16]}, None),
    "pg": ("pg", "CartPole-v1", {"train_batch_size": 64}, {"hidden_sizes": [16]}, None),
    "impala": ("impala", "CartPole-v1", {"train_batch_size": 64}, {"hidden_sizes": [16]}, None),
    "appo": ("appo", "CartPole-v1", {"train_batch_size": 64}, {"hidden_sizes": [16]}, None),
    "box_filter": (
        "ppo",
        "Pendulum-v1",
        ONPOLICY,
        {"hidden_sizes": [16], "observation_filter": "mean_std"},
        None,
    ),
    "conv_dict_image": (
        "ppo",
        "tests.dict_image_env:DictImageEnv",
        ONPOLICY,
        {"conv_filters": [[4, 3, 2], [4, 2, 1]], "hidden_sizes": [16], "activation": "relu"},
        None,
    ),
    "conv_image": (
        "ppo",
        "tests.image_env:QuadrantEnv",
        ONPOLICY,
        {"conv_filters": [[4, 3, 2], [4, 2, 1]], "hidden_sizes": [16], "activation": "relu"},
        None,
    ),
    "lstm": (
        "ppo",
        "CartPole-v1",
        ONPOLICY,
        {**LSTM, "lstm_use_prev_action": True, "lstm_use_prev_reward": True},
        None,
    ),
    "lstm_box": ("ppo", "Pendulum-v1", ONPOLICY, {**LSTM, "lstm_use_prev_action": True}, None),
    "attention": ("ppo", "CartPole-v1", ONPOLICY, ATTENTION, None),
    "attention_box": ("ppo", "Pendulum-v1", ONPOLICY, ATTENTION, None),
    "masked": ("ppo", "tests.spaces_envs:MaskedChoiceEnv", ONPOLICY, {"hidden_sizes": [16]}, None),
    "tuple_obs": ("ppo", "tests.spaces_envs:TupleObsEnv", ONPOLICY, {"hidden_sizes": [16]}, None),
    "multidiscrete": ("ppo", "tests.spaces_envs:JointTargetEnv", ONPOLICY, {"hidden_sizes": [16]}, None),
    "tuple_action": ("ppo", "tests.spaces_envs:TupleActionEnv", ONPOLICY, {"hidden_sizes": [16]}, None),
    "dict_action": ("ppo", "tests.spaces_envs:DictActionEnv", ONPOLICY, {"hidden_sizes": [16]}, None),
    "es": ("es", "CartPole-v1", EVOLUTION, {"hidden_sizes": [16]}, None),
    "ars_box_filter": (
        "ars",
        "Pendulum-v1",
        EVOLUTION,
        {"hidden_sizes": [16], "observation_filter": "mean_std"},
        None,
    ),
    "dqn": ("dqn", "CartPole-v1", REPLAY, {"hidden_sizes": [16]}, 64),
    "rainbow": (
        "dqn",
        "tests.spaces_envs:MaskedChoiceEnv",
        {**REPLAY, "noisy": True, "num_atoms": 11, "dueling": True},
        {"hidden_sizes": [16]},
        64,
    ),
    "qrdqn": ("qrdqn", "CartPole-v1", {**REPLAY, "num_quantiles": 7}, {"hidden_sizes": [16]}, 64),
    "sac": ("sac", "Pendulum-v1", REPLAY, {"hidden_sizes": [16]}, 64),
    "td3": ("td3", "Pendulum-v1", REPLAY, {"hidden_sizes": [16]}, 64),
    "ddpg": ("ddpg", "Pendulum-v1", REPLAY, {"hidden_sizes": [16]}, 64),
}
#: run with the slow tests only: the same head and preprocessing as a faster case (actor-critic MLP,
#: conv, LSTM, composite actions, Q-values), or the file would exceed ~90 s on 2 cores
SLOW = {
    "a2c",
    "pg",
    "impala",
    "appo",
    "conv_image",
    "lstm_box",
    "attention_box",
    "dict_action",
    "multidiscrete",
    "dqn",
    "qrdqn",
    "td3",
    "ddpg",
}

_RUNS: dict = {}


def train(tmp_path_factory, kind: str, backend: str = "tf"):
    """The run folder of a tiny checkpoint of ``kind`` trained with ``backend`` (once per session)."""
    import rlgear

    key = (kind, backend)
    if key not in _RUNS:
        algorithm, env, training, model, steps = KINDS[kind]
        folder = tmp_path_factory.mktemp(f"{kind}-{backend}")
        rlgear.train(
            {
                "algorithm": algorithm,
                "backend": backend,
                "seed": 0,
                "env": {"name": env, "vectorization": "sync"},
                "workers": {"num_envs_per_worker": 2},
                "training": dict(training),
                "model": dict(model),
                "stop": {"timesteps_total": steps} if steps else {"training_iteration": 1},
                "logging": {"dir": str(folder), "tensorboard": False, "progress": "none"},
            }
        )
        (_RUNS[key],) = folder.iterdir()
    return _RUNS[key]


def export_and_check(run, tmp_path, fmt="savedmodel", explore=False):
    from rlgear.export import check, export

    exported = export(run, fmt, tmp_path / f"policy.{fmt}", explore=explore)
    report = check(exported.path)
    assert report.ok, report.problems
    assert report.observations >= 992 and report.actions_equal == report.observations
    return exported


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in KINDS])
def test_a_tf_checkpoint_exports_as_a_savedmodel_that_acts_as_rlgear_does(tmp_path_factory, tmp_path, kind):
    exported = export_and_check(train(tmp_path_factory, kind), tmp_path)
    assert exported.sidecar["format"] == "savedmodel" and exported.sidecar["trained_with_backend"] == "tf"
    assert (exported.path / "saved_model.pb").is_file()


def test_a_torch_checkpoint_exports_as_a_savedmodel(tmp_path_factory, tmp_path):
    exported = export_and_check(train(tmp_path_factory, "masked", "torch"), tmp_path)
    assert exported.sidecar["trained_with_backend"] == "torch"
    assert exported.sidecar["exported_with"].startswith("tensorflow")


@pytest.mark.parametrize("kind", ["masked", pytest.param("lstm", marks=pytest.mark.slow)])
def test_the_savedmodel_takes_and_gives_what_the_onnx_graph_does(tmp_path_factory, tmp_path, kind):
    """A TF-trained checkpoint as ONNX too (checked with onnxruntime), and the SavedModel takes and gives
    what the ONNX graph does: the same input and output names, dtypes and shapes (the SignatureDef's
    keys are the sidecar's names, dots included, batch dimension -1), the same outputs for the same feeds."""
    pytest.importorskip("onnxruntime")
    from rlgear.export import player, random_observations
    from rlgear.export.checking import _recurrent_feeds, feeds_for
    from rlgear.plugins.backends.tf.runtime import tf
    from rlgear.spaces import space_from_json

    run = train(tmp_path_factory, kind)
    saved = export_and_check(run, tmp_path)
    onnx = export_and_check(run, tmp_path, fmt="onnx")
    assert onnx.sidecar["trained_with_backend"] == "tf" and onnx.sidecar["exported_with"].startswith("torch")
    assert saved.sidecar["inputs"] == onnx.sidecar["inputs"]
    assert saved.sidecar["outputs"] == onnx.sidecar["outputs"]

    # The SignatureDef as TF Serving and the C API read it (saved_model_cli shows the same).
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved.path / "saved_model.pb").read_bytes())
    (graph,) = proto.meta_graphs
    signature = graph.signature_def["serving_default"]
    for side, specs in (("inputs", saved.sidecar["inputs"]), ("outputs", saved.sidecar["outputs"])):
        infos = getattr(signature, side)
        assert set(infos) == {spec["name"] for spec in specs}, side
        for spec in specs:
            info = infos[spec["name"]]
            assert tf.dtypes.as_dtype(info.dtype).name == spec["dtype"], spec["name"]
            shape = [dim.size for dim in info.tensor_shape.dim]  # -1: any size
            assert len(shape) == len(spec["shape"]) and shape[0] == -1, (spec["name"], shape)
            assert all(d is None or d == s for d, s in zip(spec["shape"][1:], shape[1:], strict=True)), spec[
                "name"
            ]

    rng = np.random.default_rng(1)
    space = space_from_json(saved.sidecar["observation_space"])
    feeds = feeds_for(saved.sidecar, random_observations(space, 64, rng))
    if saved.sidecar["recurrent"]:
        feeds.update(_recurrent_feeds(saved.sidecar, {}, 64, True))
        for name in ("state_in.0", "state_in.1"):
            feeds[name] = rng.standard_normal(feeds[name].shape).astype(np.float32)
    ours, theirs = player(saved.path)(feeds), player(onnx.path)(feeds)
    assert list(ours) == [spec["name"] for spec in saved.sidecar["outputs"]]
    for spec in saved.sidecar["outputs"]:
        name = spec["name"]
        assert ours[name].dtype == np.dtype(spec["dtype"]), name
        if spec["dtype"] == "int64":
            np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
        else:
            np.testing.assert_allclose(ours[name], theirs[name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "kind", ["ppo", "box_filter", "tuple_action", pytest.param("sac", marks=pytest.mark.slow)]
)
def test_explore_samples_inside_the_savedmodel(tmp_path_factory, tmp_path, kind):
    """``--explore``: actions drawn in the graph, in the action space, different on one observation."""
    from rlgear.export import player, random_observations
    from rlgear.export.checking import exported_actions, feeds_for
    from rlgear.spaces import space_from_json

    exported = export_and_check(train(tmp_path_factory, kind), tmp_path, explore=True)
    assert exported.sidecar["explore"] is True
    space = space_from_json(exported.sidecar["observation_space"])
    one = random_observations(space, 1, np.random.default_rng(0))
    feeds = {k: np.repeat(v, 256, axis=0) for k, v in feeds_for(exported.sidecar, one).items()}
    actions = exported_actions(exported.sidecar, player(exported.path)(feeds))
    first = actions[0] if isinstance(actions, tuple) else actions
    assert len(np.unique(np.asarray(first), axis=0)) > 1  # sampled, not the argmax/mean


@pytest.mark.parametrize("kind", ["rainbow", "es", pytest.param("td3", marks=pytest.mark.slow)])
def test_explore_is_refused_where_the_exploration_lives_outside_the_graph(tmp_path_factory, tmp_path, kind):
    from rlgear.errors import RLGearError
    from rlgear.export import export

    with pytest.raises(RLGearError, match="--explore") as info:
        export(train(tmp_path_factory, kind), "savedmodel", tmp_path / "policy", explore=True)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "policy").exists() and not (tmp_path / "policy.json").exists()


def test_exporting_leaves_the_live_policy_untouched(tmp_path_factory, tmp_path):
    """A noisy DQN acting with noise: the export zeroes the noise of its copy only."""
    from rlgear.export.exporting import write_policy
    from rlgear.run import agent

    loaded = agent.load(train(tmp_path_factory, "rainbow"), overrides=["backend=tf"])
    policy = loaded.policy
    policy.set_noise(True)
    before = {name: var.numpy().copy() for name, var in policy.named_variables}
    noise = [layer.noise_out.numpy().copy() for layer in policy.model.noisy_layers()]
    assert any(np.any(n != 0) for n in noise)
    write_policy(loaded, "savedmodel", tmp_path / "policy", explore=False)
    for name, var in policy.named_variables:
        np.testing.assert_array_equal(var.numpy(), before[name], err_msg=name)
    for layer, values in zip(policy.model.noisy_layers(), noise, strict=True):
        np.testing.assert_array_equal(layer.noise_out.numpy(), values)


def test_input_names_that_would_clash_as_python_keywords_are_refused_in_one_line():
    from rlgear.errors import RLGearError
    from rlgear.export.signature import TensorSpec
    from rlgear.plugins.backends.tf.export import _check_names

    _check_names([TensorSpec("obs.a", "float32", (None,)), TensorSpec("obs.b_c", "float32", (None,))])
    with pytest.raises(RLGearError, match=r"savedmodel.*'obs\.a_b' and 'obs\.a\.b'") as info:
        _check_names([TensorSpec("obs.a_b", "float32", (None,)), TensorSpec("obs.a.b", "float32", (None,))])
    assert "\n" not in str(info.value)
