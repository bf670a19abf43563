"""rlgear export: ONNX and TorchScript files act as rlgear acts, preprocessing included.

For every algorithm family and model kind (MLP, conv, LSTM, Dict observations with an image,
action masks, Box with the observation filter, MultiDiscrete and Tuple/Dict actions, DQN with
Rainbow's parts, SAC and TD3), a tiny checkpoint is exported and played on 1000 random
observations of the env's own space (by onnxruntime for ONNX, torch.jit for TorchScript):
greedy actions identical to rlgear's acting, the distribution's inputs (logits, means and log
stds, Q-values) and values within 1e-5 of the framework's. Then the command's contract: errors
are one line naming the part, nothing is left half-written, ``--check`` catches a changed
file or a different checkpoint, and ``--explore`` samples from the policy's distribution.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import rlgear
from rlgear.errors import RLGearError
from rlgear.export import check, export, player, random_observations
from rlgear.export.checking import exported_actions, feeds_for
from rlgear.policy import flatten_observations
from rlgear.run import agent
from rlgear.timestep import StepType, TimeStep

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("onnxscript") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="needs the export extra: pip install 'rlgear[export]'",
)

ROOT = Path(__file__).resolve().parent.parent
TINY_PPO = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1}
TINY_REPLAY = {"learning_starts": 32, "train_batch_size": 16}
FILTERS = [[6, 3, 2], [5, 2, 1]]

KINDS = {
    "ppo-mlp-discrete": {"algorithm": "ppo", "env": "CartPole-v1", "training": TINY_PPO},
    "ppo-box-filter": {
        "algorithm": "ppo", "env": "Pendulum-v1", "training": TINY_PPO,
        "model": {"observation_filter": "mean_std"},
    },
    "ppo-lstm": {
        "algorithm": "ppo", "env": "CartPole-v1", "training": TINY_PPO,
        "model": {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 4,
                  "lstm_use_prev_action": True, "lstm_use_prev_reward": True},
    },
    "ppo-lstm-box": {
        "algorithm": "ppo", "env": "Pendulum-v1", "training": TINY_PPO,
        "model": {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "lstm_use_prev_action": True},
    },
    "ppo-attention": {  # 3 memory slots: the checker's 8 steps slide the window
        "algorithm": "ppo", "env": "CartPole-v1", "training": TINY_PPO,
        "model": {"attention": True, "attention_dim": 8, "attention_heads": 2, "attention_layers": 2,
                  "attention_memory": 3, "max_seq_len": 4},
    },
    "ppo-attention-box": {
        "algorithm": "ppo", "env": "Pendulum-v1", "training": TINY_PPO,
        "model": {"attention": True, "attention_dim": 8, "attention_heads": 2, "attention_layers": 1,
                  "attention_memory": 2, "max_seq_len": 4, "observation_filter": "mean_std"},
    },
    "ppo-conv": {
        "algorithm": "ppo", "env": "tests.image_env:QuadrantEnv", "training": TINY_PPO,
        "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "activation": "relu"},
    },
    "ppo-dict-image-filter": {
        "algorithm": "ppo", "env": "tests.dict_image_env:DictImageEnv", "training": TINY_PPO,
        "model": {"conv_filters": FILTERS, "hidden_sizes": [16], "observation_filter": "mean_std"},
    },
    "ppo-masked-dict": {"algorithm": "ppo", "env": "tests.spaces_envs:MaskedChoiceEnv", "training": TINY_PPO},
    "ppo-multidiscrete": {"algorithm": "ppo", "env": "tests.spaces_envs:JointTargetEnv", "training": TINY_PPO},
    "ppo-tuple-action": {"algorithm": "ppo", "env": "tests.spaces_envs:TupleActionEnv", "training": TINY_PPO},
    "ppo-dict-action": {"algorithm": "ppo", "env": "tests.spaces_envs:DictActionEnv", "training": TINY_PPO},
    "impala": {"algorithm": "impala", "env": "CartPole-v1", "training": {"train_batch_size": 64}},
    "dqn": {"algorithm": "dqn", "env": "CartPole-v1", "training": TINY_REPLAY, "steps": 200},
    "dqn-rainbow-masked": {
        "algorithm": "dqn", "env": "tests.spaces_envs:MaskedChoiceEnv", "steps": 200,
        "training": {**TINY_REPLAY, "noisy": True, "dueling": True, "num_atoms": 11},
    },
    "qrdqn-noisy-masked": {
        "algorithm": "qrdqn", "env": "tests.spaces_envs:MaskedChoiceEnv", "steps": 200,
        "training": {**TINY_REPLAY, "noisy": True, "dueling": True, "num_quantiles": 7},
    },
    "es": {"algorithm": "es", "env": "CartPole-v1", "training": {"num_perturbations": 2, "report_episodes": 1}},
    "ars-box-filter": {
        "algorithm": "ars", "env": "Pendulum-v1", "training": {"num_perturbations": 2, "report_episodes": 1},
        "model": {"observation_filter": "mean_std"},
    },
    "sac": {"algorithm": "sac", "env": "Pendulum-v1", "training": TINY_REPLAY, "steps": 200},
    "td3": {"algorithm": "td3", "env": "Pendulum-v1", "training": TINY_REPLAY, "steps": 200},
}  # fmt: skip


def train_tiny(folder: Path, kind: str, backend: str = "torch") -> Path:
    spec = KINDS[kind]
    model = {"hidden_sizes": [16, 16], **spec.get("model", {})}
    stop = {"timesteps_total": spec["steps"]} if "steps" in spec else {"training_iteration": 1}
    rlgear.train(
        {
            "algorithm": spec["algorithm"], "backend": backend, "seed": 0,
            "env": {"name": spec["env"], "vectorization": "sync"},
            "workers": {"num_envs_per_worker": 2},
            "training": spec["training"], "model": model, "stop": stop,
            "logging": {"dir": str(folder), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    (run,) = folder.iterdir()
    return run


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in cache:
            cache[kind] = train_tiny(tmp_path_factory.mktemp(kind), kind)
        return cache[kind]

    return get


def reference(loaded, observations) -> dict[str, np.ndarray]:
    """What the framework policy computes for these observations (the numpy twin off)."""
    import torch

    policy = loaded.policy
    flat = loaded.preprocessor.transform(observations)
    if loaded.obs_filter is not None:
        flat = loaded.obs_filter.apply(flat)
    if getattr(policy, "framework_free", False):  # ES/ARS: the numpy MLP's output layer
        weights = policy.get_weights()
        names = policy.layout.names
        out = flatten_observations(policy.observation_space, flat)
        for i in range(len(names) // 2):
            out = out @ weights[names[2 * i]] + weights[names[2 * i + 1]]
            if i < len(names) // 2 - 1:
                out = policy.activation(out)
        return {"output": out}
    with torch.no_grad():
        x = policy.preprocess(flat)
        name = type(policy).__name__
        if name.startswith(("DQN", "QRDQN")):  # Q-values (C51, QR-DQN: the distributions' means)
            policy.set_noise(False)
            return {"q_values": policy.q_values(policy.model(x)[0]).numpy()}
        if hasattr(policy, "actor_twin"):  # SAC, TD3, DDPG
            return {"mean": policy.model.actor(x)[:, : policy.num_actions].numpy()}
        if policy.recurrent:
            n = x.shape[0]
            timestep = TimeStep(
                step_type=np.full(n, StepType.FIRST, np.int32), reward=np.zeros(n, np.float32),
                discount=np.ones(n, np.float32), observation=flat,
                prev_action=np.zeros((n, *policy.action_space.shape), policy._action_dtype),
                env_id=np.arange(n, dtype=np.int32),
            )  # fmt: skip
            dist_inputs, values, _ = policy.recurrent_step(timestep, policy.get_initial_state(n))
        else:
            dist_inputs, values = policy.model(x)
    return {"dist_inputs": dist_inputs.numpy(), "value": values.numpy()}


def exported_dist_inputs(outputs: dict[str, np.ndarray]) -> np.ndarray:
    if "logits" in outputs:
        return outputs["logits"]
    if "mean" in outputs and "log_std" in outputs:
        return np.concatenate([outputs["mean"], outputs["log_std"]], axis=-1)
    return outputs["dist_inputs"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_export_acts_as_rlgear_on_a_thousand_observations(checkpoints, tmp_path, kind, fmt):
    run = checkpoints(kind)
    result = export(run, fmt, tmp_path / f"policy.{fmt}")
    report = check(result.path, n=1000)
    assert report.ok, report.problems
    assert report.actions_equal == report.observations == 1000
    assert report.max_action_diff <= 1e-5

    sidecar = json.loads(result.sidecar_path.read_text())
    loaded = agent.load(run, overrides=["model.numpy_inference=false"])
    observations = random_observations(loaded.observation_space, 1000, np.random.default_rng(1))
    feeds = feeds_for(sidecar, observations)
    for spec in sidecar["inputs"]:  # a recurrent policy's first step: zero state, previous action and reward
        if spec["name"] not in feeds:
            feeds[spec["name"]] = np.zeros((1000, *spec["shape"][1:]), spec["dtype"])
    outputs = player(result.path)(feeds)
    assert [spec["name"] for spec in sidecar["outputs"]] == list(outputs)
    ours = reference(loaded, observations)
    if "output" in ours:
        np.testing.assert_allclose(
            outputs.get("logits", outputs.get("output")), ours["output"], atol=1e-5, rtol=0
        )
    elif "q_values" in ours:
        np.testing.assert_allclose(outputs["q_values"], ours["q_values"], atol=1e-5, rtol=0)
    elif "mean" in ours and "dist_inputs" not in ours:
        np.testing.assert_allclose(outputs["mean"], ours["mean"], atol=1e-5, rtol=0)
    else:
        np.testing.assert_allclose(exported_dist_inputs(outputs), ours["dist_inputs"], atol=1e-5, rtol=0)
        np.testing.assert_allclose(outputs["value"], ours["value"], atol=1e-5, rtol=0)
    greedy = loaded.compute_actions(observations, explore=False, episode_start=True)
    theirs = exported_actions(sidecar, outputs)
    if isinstance(greedy, dict | tuple):
        parts = greedy.keys() if isinstance(greedy, dict) else range(len(greedy))
        for key in parts:
            np.testing.assert_allclose(np.asarray(theirs[key], np.float64), greedy[key], atol=1e-5)
    elif np.issubdtype(np.asarray(greedy).dtype, np.integer):
        np.testing.assert_array_equal(theirs, greedy)
    else:
        low, high = loaded.action_space.low, loaded.action_space.high
        np.testing.assert_allclose(theirs, np.clip(greedy, low, high), atol=1e-5)


def test_the_sidecar_names_every_input_and_output_and_the_preprocessing(checkpoints, tmp_path):
    result = export(checkpoints("ppo-masked-dict"), "onnx", tmp_path / "masked.onnx")
    sidecar = json.loads(result.sidecar_path.read_text())
    names = [spec["name"] for spec in sidecar["inputs"]]
    assert names == ["obs.action_mask", "obs.cue", "obs.noise"]  # the Dict's keys, sorted
    assert [s["dtype"] for s in sidecar["inputs"]] == ["float32", "int64", "float32"]
    assert [s["name"] for s in sidecar["outputs"]] == ["action", "logits", "value", "action_logp"]
    prep = sidecar["preprocessing"]
    assert prep["action_mask_input"] == "obs.action_mask"
    assert [step["input"] for step in prep["flat_input"]] == ["obs.cue", "obs.noise"]
    assert prep["flat_input"][0]["encoding"] == "one_hot"
    assert sidecar["rlgear_version"] == rlgear.__version__ and sidecar["trained_with_backend"] == "torch"
    assert len(sidecar["config_sha256"]) == 64 and len(sidecar["file_sha256"]) == 64


def test_an_action_mask_is_honoured_by_the_exported_graph(checkpoints, tmp_path):
    result = export(checkpoints("ppo-masked-dict"), "onnx", tmp_path / "masked.onnx")
    sidecar = json.loads(result.sidecar_path.read_text())
    rng = np.random.default_rng(3)
    space = agent.load(result.sidecar["checkpoint"]).observation_space
    observations = random_observations(space, 500, rng)
    mask = np.zeros_like(observations["action_mask"])
    allowed = rng.integers(mask.shape[1], size=500)
    mask[np.arange(500), allowed] = 1  # one allowed action per row: the greedy action must be it
    observations["action_mask"] = mask
    outputs = player(result.path)(feeds_for(sidecar, observations))
    np.testing.assert_array_equal(outputs["action"], allowed)


def test_an_explore_export_samples_from_the_policy_distribution(checkpoints, tmp_path):
    result = export(checkpoints("ppo-mlp-discrete"), "onnx", tmp_path / "explore.onnx", explore=True)
    assert result.sidecar["explore"] is True
    obs = np.tile(np.array([[0.02, -0.3, 0.05, 0.4]], np.float32), (20000, 1))
    outputs = player(result.path)({"obs": obs})
    logits = outputs["logits"][0].astype(np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    freq = np.bincount(outputs["action"], minlength=2) / len(obs)
    np.testing.assert_allclose(freq, probs, atol=0.02)  # 20000 draws: standard error below 0.004
    chosen_logp = np.log(probs[outputs["action"]])
    np.testing.assert_allclose(outputs["action_logp"], chosen_logp, atol=1e-5)
    assert check(result.path).ok


def test_check_catches_a_changed_file_and_a_different_checkpoint(checkpoints, tmp_path):
    result = export(checkpoints("ppo-mlp-discrete"), "torchscript", tmp_path / "policy.pt")
    other = checkpoints("impala")  # another config, other weights, same spaces
    report = check(result.path, checkpoint=other)
    assert not report.ok
    assert any("config differs" in p for p in report.problems)
    data = bytearray(result.path.read_bytes())
    data[-100] ^= 0xFF
    result.path.write_bytes(bytes(data))
    report = check(result.path)
    assert not report.ok
    assert any("contents changed since it was exported" in p for p in report.problems)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "rlgear", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_command_writes_the_file_and_its_sidecar_and_checks_it(checkpoints, tmp_path):
    run = checkpoints("ppo-mlp-discrete")
    out = tmp_path / "new" / "folder" / "policy.onnx"  # a missing folder is created
    done = run_cli("export", str(run), "--format", "onnx", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.exists() and out.with_name("policy.onnx.json").exists()
    assert "inputs:  obs float32 [B, 4]" in done.stdout
    checked = run_cli("export", "--check", str(out), "--observations", "200")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok: 200 of 200 actions agree" in checked.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["policy.onnx", "policy.onnx.json"]


@pytest.mark.parametrize(
    "case",
    [
        "dqn-explore",
        "td3-explore",
        "es-explore",
        "missing-checkpoint",
        "out-under-a-file",
        "bad-format",
    ],
)
def test_bad_requests_are_one_line_errors_and_leave_nothing_behind(checkpoints, tmp_path, case):
    out = tmp_path / "out" / "policy.onnx"
    if case == "dqn-explore":
        args, expected = [str(checkpoints("dqn")), "--format", "onnx", "--explore"], "--explore: dqn explores"
    elif case == "td3-explore":
        args, expected = (
            [str(checkpoints("td3")), "--format", "onnx", "--explore"],
            "--explore: td3's exploration",
        )
    elif case == "es-explore":
        args, expected = (
            [str(checkpoints("es")), "--format", "onnx", "--explore"],
            "--explore: es's policy acts",
        )
    elif case == "missing-checkpoint":
        args, expected = [str(tmp_path / "nope"), "--format", "onnx"], "no such checkpoint or run folder"
    elif case == "out-under-a-file":
        (tmp_path / "out").write_text("a file, not a folder")
        args, expected = [str(checkpoints("dqn")), "--format", "onnx"], "exists and is not a folder"
    else:
        args, expected = [str(checkpoints("dqn")), "--format", "tflite"], "invalid choice: 'tflite'"
    done = run_cli("export", *args, "--out", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert expected in done.stderr, done.stderr
    if case != "bad-format":  # argparse prints its usage first
        assert len(lines) == 1 and lines[0].startswith("rlgear: error: ")
    leftovers = list((tmp_path / "out").iterdir()) if (tmp_path / "out").is_dir() else []
    assert leftovers == []


def test_an_exporter_failing_midway_leaves_no_file_and_keeps_the_previous_export(
    checkpoints, tmp_path, monkeypatch
):
    run = checkpoints("ppo-mlp-discrete")
    out = tmp_path / "policy.onnx"
    first = export(run, "onnx", out)
    before = out.read_bytes(), first.sidecar_path.read_text()
    from rlgear.plugins.backends.torch import export as torch_export

    def half_written(module, inputs, fmt, path, owner=None):
        Path(path).write_bytes(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch_export, "write", half_written)
    with pytest.raises(RLGearError, match="could not be written as onnx: disk full"):
        export(run, "onnx", out)
    assert (out.read_bytes(), first.sidecar_path.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx", "policy.onnx.json"]


PLAY_WITH_ONNXRUNTIME_ONLY = """
import sys, json
import numpy as np, onnxruntime, gymnasium as gym
path, episodes = sys.argv[1], int(sys.argv[2])
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
env = gym.make("CartPole-v1")
returns = []
for episode in range(episodes):
    obs, _ = env.reset(seed=1000 + episode)
    total, done = 0.0, False
    while not done:
        action = session.run(["action"], {"obs": obs[None].astype(np.float32)})[0][0]
        obs, reward, terminated, truncated, _ = env.step(int(action))
        total += reward
        done = terminated or truncated
    returns.append(total)
assert "rlgear" not in sys.modules and "torch" not in sys.modules
print(json.dumps(returns))
"""


def rlgear_returns(run: Path, episodes: int) -> list[float]:
    import gymnasium as gym

    loaded = agent.load(run)
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(loaded.compute_single_action(obs)))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_a_cartpole_run_played_by_onnxruntime_alone_scores_what_the_checkpoint_scores(tmp_path, backend):
    if backend == "tf" and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs TensorFlow: pip install 'rlgear[tf]'")
    rlgear.train(
        {
            "algorithm": "ppo", "backend": backend, "seed": 0, "env": {"name": "CartPole-v1"},
            "stop": {"episode_return_mean": 150, "timesteps_total": 60000},
            "logging": {"dir": str(tmp_path / "run"), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    (run,) = (tmp_path / "run").iterdir()
    out = export(run, "onnx", tmp_path / "cartpole.onnx").path
    script = tmp_path / "play.py"
    script.write_text(PLAY_WITH_ONNXRUNTIME_ONLY)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", str(script), str(out), "10"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    ours = rlgear_returns(run, 10)
    assert theirs == ours
    assert np.mean(ours) >= 100  # a trained policy, so equal returns are not equal failures


def test_a_live_policy_exported_again_reuses_its_graph_with_the_new_weights(checkpoints, monkeypatch):
    """A server exports its policy after every update: the second export writes the new weights (and
    observation statistics) into the first graph, without the exporter. Its outputs equal a fresh
    export's."""
    from rlgear.export import policy_onnx
    from rlgear.export.checking import OnnxPlayer
    from rlgear.plugins.backends.torch import export as torch_export
    from tests.numpy_reference import random_weights

    run = checkpoints("ppo-box-filter")
    live = agent.load(run)
    policy_onnx(live, explore=False)
    live.policy.set_weights(random_weights(live.policy.get_weights(), seed=9, gain=1.5))
    live.obs_filter.stats.mean = live.obs_filter.stats.mean + 0.5
    full_export = torch_export._write_onnx

    def no_exporter(*args, **kwargs):
        raise AssertionError("the second export of a live policy ran the exporter")

    monkeypatch.setattr(torch_export, "_write_onnx", no_exporter)
    reused, sidecar = policy_onnx(live, explore=False)
    monkeypatch.setattr(torch_export, "_write_onnx", full_export)
    fresh_policy = agent.load(run)  # another policy object: no template, a full export
    fresh_policy.policy.set_weights(live.policy.get_weights())
    fresh_policy.obs_filter.stats.mean = live.obs_filter.stats.mean
    fresh, _ = policy_onnx(fresh_policy, explore=False)
    observations = random_observations(live.observation_space, 256, np.random.default_rng(0))
    feeds = feeds_for(sidecar, observations)
    outputs = []
    for data in (reused, fresh):
        path = Path(tempfile.mkdtemp()) / "p.onnx"
        path.write_bytes(data)
        outputs.append(OnnxPlayer(path)(feeds))
    for name in outputs[1]:
        np.testing.assert_allclose(outputs[0][name], outputs[1][name], atol=1e-6, rtol=0)
    np.testing.assert_allclose(
        outputs[0]["action"], np.clip(live.compute_actions(observations), -2, 2), atol=1e-5, rtol=0
    )
