"""``rlgear evaluate CHECKPOINT`` of an offline run that had no ``env`` section: it evaluates in the
env the dataset was recorded in (Minari's ``env_spec``, or rlgear's ``rlgear_env`` with its kwargs)
and says so in one line; without any, a one-line error names ``env.name`` and ``--set``."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlgear
from rlgear.cli.main import main
from rlgear.discovery import registry
from tests.conftest import small_config

minari = pytest.importorskip("minari", reason="needs Minari: pip install 'rlgear[offline]'")


@pytest.fixture
def datasets_path(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def write_pendulum(dataset_id: str, with_env: bool) -> None:
    """Minari's create_dataset_from_buffers: random Pendulum episodes of 40 steps, with the env's
    spec (its id and max_episode_steps=40 in the metadata) or with its spaces only (no env)."""
    from minari.data_collector import EpisodeBuffer

    env = gym.make("Pendulum-v1", max_episode_steps=40)
    env.action_space.seed(0)
    buffers = []
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        observations, actions, rewards = [obs], [], []
        for _ in range(40):
            action = env.action_space.sample()
            obs, reward, *_ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
        buffers.append(EpisodeBuffer(observations=np.stack(observations), actions=np.stack(actions),
                                     rewards=rewards, terminations=[False] * 40, truncations=[False] * 39 + [True]))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            dataset_id, buffers, env=env.spec if with_env else None,
            observation_space=env.observation_space, action_space=env.action_space, algorithm_name="random",
        )  # fmt: skip


def bc_checkpoint(tmp_path: Path, dataset: str) -> Path:
    """A bc checkpoint after one iteration on ``dataset``, from a config without an env section."""
    raw = {
        "algorithm": "bc",
        "seed": 0,
        "offline": {"input": dataset},
        "model": {"hidden_sizes": [16]},
        "training": {"num_gradient_steps_per_iteration": 3, "train_batch_size": 16, "ope_interval": 0},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm("bc")(raw)
    try:
        assert not trainer.config.has_env
        trainer.train()
        return Path(trainer.save(tmp_path / f"ckpt-{dataset.replace('/', '-')}"))
    finally:
        trainer.stop()


def evaluate(capsys, *args: str) -> tuple[int, list[str], str]:
    code = main(["evaluate", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_falls_back_to_the_env_of_a_minari_dataset_env_spec(tmp_path, datasets_path, capsys):
    write_pendulum("made/pendulum-v0", with_env=True)
    checkpoint = bc_checkpoint(tmp_path, "made/pendulum-v0")
    code, out, err = evaluate(capsys, str(checkpoint), "--episodes", "2")
    assert code == 0, err
    note = [line for line in out if line.startswith("env:")]
    assert note == [
        "env: the run had no env section; evaluating in 'Pendulum-v1' with kwargs {'max_episode_steps': 40}, "
        "the env its dataset was recorded in (--set env.name=... for another)"
    ]
    assert "episodes 2 |" in out[-1] and "length mean 40.0" in out[-1]  # the recorded 40-step limit
    code, out, err = evaluate(
        capsys, str(checkpoint), "--episodes", "1", "--set", "env.kwargs.max_episode_steps=7"
    )
    assert code == 0 and "length mean 7.0" in out[-1], (out, err)  # --set still applies on top


def test_falls_back_to_the_env_an_rlgear_recording_ran_with_its_kwargs(tmp_path, capsys):
    dataset = tmp_path / "recorded"
    rlgear.train(
        small_config(
            tmp_path,
            env={"name": "CartPole-v1", "kwargs": {"max_episode_steps": 12}},
            offline={"output": str(dataset)},
            stop={"timesteps_total": 300},
        )
    )
    checkpoint = bc_checkpoint(tmp_path, str(dataset))
    code, out, err = evaluate(capsys, str(checkpoint), "--episodes", "3")
    assert code == 0, err
    assert (
        "env: the run had no env section; evaluating in 'CartPole-v1' with kwargs {'max_episode_steps': 12}"
        in out[1]
    )
    lengths = float(out[-1].rsplit("length mean", 1)[1])
    assert lengths <= 12  # the recording's env, not CartPole-v1's 500-step default


def test_without_a_recorded_env_the_error_names_env_name_and_set(tmp_path, datasets_path, capsys):
    write_pendulum("made/no-env-v0", with_env=False)
    checkpoint = bc_checkpoint(tmp_path, "made/no-env-v0")
    code, out, err = evaluate(capsys, str(checkpoint), "--episodes", "1")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rlgear: error: env.name: ") and "no env" in lines[0]
    assert "--set env.name=<gymnasium id or module:Class>" in lines[0]
    code, out, err = evaluate(capsys, str(checkpoint), "--episodes", "1", "--set", "env.name=Pendulum-v1")
    assert code == 0, err
    assert not [line for line in out if line.startswith("env:")] and "length mean 200.0" in out[-1]
