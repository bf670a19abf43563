"""The offline trainer: runs without an env, counts gradient steps and epochs, stops on them,
resumes from checkpoints, evaluates in an env whose spaces it checks, shows gradient steps."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.errors import ConfigError
from rlgear.run import checkpoint as ckpt
from rlgear.run.progress import summary_line
from rlgear.run.runner import run
from rlgear.trainer import read_progress
from tests.conftest import BACKENDS
from tests.offline_data import expert_action, pendulum_action, record_cartpole, record_pendulum, use_data


@pytest.fixture(scope="module")
def expert_data():
    return record_cartpole(lambda obs, rng: expert_action(obs), episodes=2, seed=0)


def raw_config(tmp_path, algorithm="bc", env=False, **training):
    raw = {
        "algorithm": algorithm,
        "seed": 5,
        "offline": {"input": "tests/in-memory-v0"},
        "training": {"num_gradient_steps_per_iteration": 5, "train_batch_size": 32, **training},
        "model": {"hidden_sizes": [16]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    if env:
        raw["env"] = {"name": "CartPole-v1"}
        raw["training"].setdefault("evaluation_episodes", 2)
    return raw


@pytest.mark.parametrize("algorithm", ["bc", "marwil"])
def test_runs_without_env_and_counts_gradient_steps_and_epochs(tmp_path, monkeypatch, expert_data, algorithm):
    use_data(monkeypatch, expert_data)
    from rlgear.discovery import registry

    trainer = registry.load_algorithm(algorithm)(raw_config(tmp_path, algorithm))
    try:
        assert not trainer.config.has_env
        first, second = trainer.train(), trainer.train()
    finally:
        trainer.stop()
    assert first["learner/num_gradient_steps"] == 5 and second["learner/num_gradient_steps"] == 10
    assert second["timesteps_total"] == 0
    assert second["offline/dataset_epochs"] == pytest.approx(10 * 32 / expert_data.total_steps)
    assert np.isfinite(second["learner/policy_loss"])
    assert not any(key.startswith("evaluation/") for key in second)


def test_env_section_is_still_required_by_online_algorithms(tmp_path):
    raw = raw_config(tmp_path)
    raw["algorithm"] = "ppo"
    raw.pop("offline")
    raw["training"] = {}
    with pytest.raises(ConfigError, match="env: missing required key"):
        config_mod.resolve(raw)


def test_missing_dataset_names_the_key(tmp_path):
    from rlgear.discovery import registry

    raw = raw_config(tmp_path)
    raw.pop("offline")
    with pytest.raises(ConfigError, match=r"offline\.input"):
        registry.load_algorithm("bc")(raw)


def test_stop_on_gradient_steps_then_resume(tmp_path, monkeypatch, expert_data):
    use_data(monkeypatch, expert_data)
    raw = raw_config(tmp_path, "marwil")
    raw["stop"] = {"learner/num_gradient_steps": 15}
    raw["logging"]["name"] = "offline-run"
    result = run(config_mod.resolve(raw), progress="none")
    assert result["learner/num_gradient_steps"] == 15 and result["training_iteration"] == 3
    run_dir = tmp_path / "runs" / "offline-run"
    assert ckpt.latest(run_dir) is not None
    resumed_config = config_mod.resolve({**raw, "stop": {"learner/num_gradient_steps": 25}})
    result = run(resumed_config, resume=run_dir, progress="none")
    assert result["learner/num_gradient_steps"] == 25 and result["training_iteration"] == 5
    rows = read_progress(run_dir)
    assert [r["learner/num_gradient_steps"] for r in rows] == [5, 10, 15, 20, 25]
    assert rows[3]["offline/dataset_epochs"] > rows[2]["offline/dataset_epochs"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_restores_weights_and_counters(tmp_path, monkeypatch, expert_data, backend):
    use_data(monkeypatch, expert_data)
    from rlgear.discovery import registry

    cls = registry.load_algorithm("marwil")
    raw = {**raw_config(tmp_path, "marwil", moving_average_sqd_adv_norm_update_rate=0.5), "backend": backend}
    trainer = cls(raw)
    trainer.train()
    path = trainer.save(tmp_path / "ckpt")
    norm = float(trainer.policy.moving_average_sqd_adv_norm)
    weights = trainer.policy.get_weights()
    trainer.stop()
    restored = cls(raw)
    restored.restore(path)
    assert restored.num_gradient_steps == 5 and restored.iteration == 1
    assert float(restored.policy.moving_average_sqd_adv_norm) == pytest.approx(norm)
    for name, value in weights.items():
        np.testing.assert_array_equal(restored.policy.get_weights()[name], value)
    assert restored.train()["learner/num_gradient_steps"] == 10
    restored.stop()


def test_evaluates_in_env_and_checks_its_spaces(tmp_path, monkeypatch, expert_data):
    use_data(monkeypatch, expert_data)
    from rlgear.discovery import registry

    trainer = registry.load_algorithm("bc")(raw_config(tmp_path, env=True))
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert result["evaluation/episodes"] == 2 and result["evaluation/episode_return_mean"] > 0
    raw = raw_config(tmp_path, env=True)
    raw["env"] = {"name": "Pendulum-v1"}
    with pytest.raises(
        ConfigError, match=r"env .Pendulum-v1. has observations .* dataset .tests/in-memory-v0. has"
    ):
        registry.load_algorithm("bc")(raw)


@pytest.fixture(scope="module")
def pendulum_data():
    return record_pendulum(
        lambda obs, rng: pendulum_action(obs) * rng.choice([-1.0, 1.0]), episodes=2, seed=0
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["cql", "iql"])
def test_continuous_cql_and_iql_learn_on_pendulum_data(
    tmp_path, monkeypatch, pendulum_data, backend, algorithm
):
    """Box actions through either backend: a few gradient steps move the weights, the losses stay
    finite, and the greedy policy acts in Pendulum-v1 (evaluation)."""
    use_data(monkeypatch, pendulum_data)
    from rlgear.discovery import registry

    raw = raw_config(tmp_path, algorithm, ope_interval=0, evaluation_episodes=1)
    raw.update(backend=backend, env={"name": "Pendulum-v1"})
    trainer = registry.load_algorithm(algorithm)(raw)
    try:
        before = trainer.policy.get_weights()
        result = trainer.train()
        after = trainer.policy.get_weights()
    finally:
        trainer.stop()
    assert result["learner/num_gradient_steps"] == 5
    losses = ("critic_loss", "actor_loss", "cql_penalty") if algorithm == "cql" else (
        "value_loss", "critic_loss", "actor_loss")  # fmt: skip
    assert all(np.isfinite(result[f"learner/{key}"]) for key in losses), result
    assert all(not np.array_equal(before[name], after[name]) for name in before)
    assert result["evaluation/episodes"] == 1 and -2000 < result["evaluation/episode_return_mean"] <= 0


def test_progress_line_shows_gradient_steps_and_epochs():
    line = summary_line(
        {"training_iteration": 3, "timesteps_total": 0, "time_total_s": 1.0,
         "learner/num_gradient_steps": 1500.0, "offline/dataset_epochs": 2.5}
    )  # fmt: skip
    assert "grad steps     1,500" in line and "epochs 2.50" in line and "steps/s" not in line
