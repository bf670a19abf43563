"""The contracts an algorithm without gradient steps leans on (issue 16): a numpy policy that needs no
backend, a training config holding only the loop's keys, scoring a population in one vectorized pass,
and episode summaries returned by sampling."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.config import BaseTrainingConfig, TrainingConfig
from rlgear.discovery import registry
from rlgear.distributed.rollout_ops import synchronous_parallel_sample_with_episodes
from rlgear.errors import ConfigError
from rlgear.numpy_policy import FlatLayout, NumpyMLPPolicy
from rlgear.plugins.families.evolution.population import evaluate_population
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

ES = registry.load_algorithm("es")


def es_config(tmp_path, **sections):
    config = {
        "algorithm": "es",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 4},
        "training": {"num_perturbations": 4, "perturbations_per_task": 2, "noise_table_size": 100_000},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


# --- the training config ---------------------------------------------------------------------
PRE_SPLIT_TRAINING_KEYS = [  # TrainingConfig's fields, in order, before BaseTrainingConfig existed
    # (clip_rewards: added since, issue 34, at the end of the gradient keys)
    "gamma", "lr", "lr_schedule", "optimizer", "optimizer_kwargs", "optimizer_epsilon", "grad_clip",
    "max_nonfinite_updates", "train_batch_size", "clip_rewards", "min_time_s_per_iteration",
    "min_env_steps_per_iteration",
    "metrics_window", "evaluation_interval", "evaluation_episodes", "evaluation_video_every", "eager",
]  # fmt: skip


def test_training_config_keeps_its_keys_in_their_order_and_derives_from_the_small_base():
    assert [f.name for f in dataclasses.fields(TrainingConfig)] == PRE_SPLIT_TRAINING_KEYS
    assert issubclass(TrainingConfig, BaseTrainingConfig)
    base = {f.name for f in dataclasses.fields(BaseTrainingConfig)}
    assert base.isdisjoint({"lr", "gamma", "optimizer", "grad_clip", "lr_schedule", "train_batch_size"})
    assert "metrics_window" in base and "evaluation_interval" in base


def test_es_refuses_a_gradient_key_with_did_you_mean(tmp_path):
    with pytest.raises(ConfigError) as err:
        config_mod.resolve(es_config(tmp_path, training={"lr": 0.01}))
    assert "training.lr: unknown key" in str(err.value)
    with pytest.raises(ConfigError, match="did you mean 'stepsize'"):
        config_mod.resolve(es_config(tmp_path, training={"stepsiz": 0.01}))


def test_es_config_has_only_loop_and_es_keys(tmp_path):
    config = config_mod.resolve(es_config(tmp_path))
    assert not isinstance(config.training, TrainingConfig)
    assert not hasattr(config.training, "gamma") and not hasattr(config.training, "train_batch_size")
    assert config.rollout_fragment_length() == config_mod.AUTO_FRAGMENT_LENGTH


# --- a framework-free policy runs under any backend name, loading none ------------------------------
@pytest.mark.parametrize("backend", ["torch", "tf", "jax-not-installed"])
def test_a_star_policy_is_used_under_every_backend_name(tmp_path, backend):
    assert ES.policy_class(backend) is ES.policy_class("*")
    trainer = ES(es_config(tmp_path, backend=backend))
    try:
        assert type(trainer.backend).__name__ == "NoFrameworkBackend"
        assert trainer.train()["timesteps_total"] > 0
        assert trainer.save_to_object()["metadata"]["backend"] == "numpy"
    finally:
        trainer.stop()


def test_a_framework_free_run_imports_neither_torch_nor_tensorflow(tmp_path):
    code = textwrap.dedent(
        f"""
        import json, sys
        import rlgear
        result = rlgear.train({es_config(tmp_path, backend="tf", stop={"training_iteration": 2})!r})
        print(json.dumps({{"iterations": result["training_iteration"],
                          "frameworks": [m for m in ("torch", "tensorflow") if m in sys.modules]}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"iterations": 2, "frameworks": []}


def test_plugins_matrix_shows_numpy_for_a_framework_free_algorithm(monkeypatch, capsys):
    from rlgear import cli

    monkeypatch.setenv("COLUMNS", "200")  # in process: a subprocess would pay torch's and TF's import again
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("es ", "ars "))]
    assert {row[0] for row in rows} >= {"es", "ars"}
    for row in rows:  # name, 4 action-space columns, one column per installed backend, 3 flags
        backend_cells = row[5:-3]
        assert backend_cells and backend_cells == ["numpy"] * len(backend_cells), row


# --- population evaluation ------------------------------------------------------------------------
def make_policy(observation_space, action_space, hidden_sizes, seed=0):
    config = config_mod.resolve(
        {
            "algorithm": "es",
            "seed": seed,
            "env": {"name": "CartPole-v1"},
            "model": {"hidden_sizes": hidden_sizes},
        }
    )
    return NumpyMLPPolicy(observation_space, action_space, config)


@pytest.mark.parametrize("action_space", [Discrete(3), Box(-np.ones(2), np.ones(2))])
def test_population_forward_matches_one_policy_per_row(action_space):
    policy = make_policy(Box(-np.ones(4), np.ones(4)), action_space, [5, 3])
    rng = np.random.default_rng(1)
    params = rng.standard_normal((6, policy.layout.size)).astype(np.float32)
    obs = rng.standard_normal((6, 4)).astype(np.float32)
    ts = TimeStep(np.full(6, StepType.MID, np.int32), np.zeros(6), np.ones(6), obs, np.zeros(6), np.arange(6))
    batched = policy.compute_population_actions(ts, params)
    for row in range(6):
        policy.set_weights(policy.layout.unflatten(params[row]))
        single, _, _ = policy.compute_actions(
            TimeStep(ts.step_type[row : row + 1], ts.reward[:1], ts.discount[:1], obs[row : row + 1],
                     ts.prev_action[:1], ts.env_id[:1])
        )  # fmt: skip
        np.testing.assert_allclose(batched[row], single[0], rtol=1e-5, atol=1e-6)


def test_flat_layout_round_trips_in_the_policys_order():
    weights = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([7.0, 8.0], np.float32)}
    layout = FlatLayout(weights)
    flat = layout.flatten(weights)
    np.testing.assert_array_equal(flat, [0, 1, 2, 3, 4, 5, 7, 8])  # insertion order, not sorted
    back = layout.unflatten(flat)
    assert list(back) == ["b", "a"] and all(np.array_equal(back[k], weights[k]) for k in weights)
    np.testing.assert_array_equal(layout.batched(np.stack([flat, flat + 1]))["a"], [[7, 8], [8, 9]])


def local_evaluator(tmp_path, num_envs=3):
    config = config_mod.resolve(es_config(tmp_path, workers={"num_envs_per_worker": num_envs}))
    return RolloutWorker(config, ES.policy_class("*"), registry.load_env_adapter("gymnasium"))


def test_evaluate_population_scores_each_candidate_by_whole_episodes(tmp_path):
    evaluator = local_evaluator(tmp_path, num_envs=3)
    try:
        size = evaluator.policy.layout.size
        # candidate 0 always pushes left (logit bias), candidate 1 always right, 2 and 3 random-ish
        params = np.zeros((4, size), np.float32)
        bias = [evaluator.policy.layout.names.index("policy/output/bias")]
        params[0, evaluator.policy.layout.offsets[bias[0]]] = 1.0
        params[1, evaluator.policy.layout.offsets[bias[0]] + 1] = 1.0
        params[2:] = np.random.default_rng(0).standard_normal((2, size)) * 0.1
        evaluator.pop_metrics()
        result = evaluate_population(evaluator, params, episodes_per_candidate=2)
        assert result.returns.shape == (4, 2) and result.lengths.shape == (4, 2)
        # CartPole pays 1 per step, the final one included: return == length for every episode
        np.testing.assert_array_equal(result.returns, result.lengths)
        assert (result.lengths[:2] < 30).all()  # one-sided pushing falls within a few dozen steps
        assert result.env_steps >= result.lengths.sum()  # idle slots step too, and count
        metrics = evaluator.pop_metrics()
        assert metrics["env_steps"] == result.env_steps
        assert metrics["episodes"] == []  # not reported unless asked
        reported = evaluate_population(evaluator, params[:1], episodes_per_candidate=3, report_episodes=True)
        episodes = evaluator.pop_metrics()["episodes"]
        assert sorted(e["episode_return"] for e in episodes) == sorted(reported.returns[0].tolist())
    finally:
        evaluator.stop()


def test_population_fitness_is_the_wrapped_return_and_the_reported_return_the_envs_own(tmp_path):
    # training (ES's fitness) sees the clipped rewards; the run reports CartPole's own return (issue 37)
    clip = {"name": "gymnasium.wrappers.ClipReward", "kwargs": {"max_reward": 0.5}}
    config = config_mod.resolve(es_config(tmp_path, env={"wrappers": [clip]}))
    evaluator = RolloutWorker(config, ES.policy_class("*"), registry.load_env_adapter("gymnasium"))
    try:
        params = np.random.default_rng(0).standard_normal((2, evaluator.policy.layout.size)) * 0.1
        result = evaluate_population(evaluator, params, episodes_per_candidate=2, report_episodes=True)
        np.testing.assert_array_equal(result.returns, 0.5 * result.lengths)
        episodes = evaluator.pop_metrics()["episodes"]
        assert sorted(e["episode_return"] for e in episodes) == sorted(result.lengths.ravel().tolist())
        assert sorted(e["wrapped_return"] for e in episodes) == sorted(result.returns.ravel().tolist())
    finally:
        evaluator.stop()


def test_sampling_returns_episode_summaries_with_the_final_reward(tmp_path):
    config = config_mod.resolve(
        {"algorithm": "pg", "seed": 0, "env": {"name": "CartPole-v1"}, "backend": "torch",
         "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 100},
         "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"}}
    )  # fmt: skip
    pytest.importorskip("torch")
    from rlgear.distributed.worker_set import WorkerSet

    pg = registry.load_algorithm("pg")
    workers = WorkerSet(
        config, pg.policy_class("torch"), registry.load_env_adapter("gymnasium"), pg.postprocess
    )
    try:
        batch, steps, episodes = synchronous_parallel_sample_with_episodes(workers, 400)
        assert len(batch) > 0
        assert steps > 300 and episodes  # 2 rounds of 2 x 100 rows, less the reset rows
        for episode in episodes:  # CartPole: 1 per step, the final step's included
            assert episode["episode_return"] == episode["length"] > 0
        assert len(workers.local_worker.pop_metrics()["episodes"]) == len(episodes)  # metrics see them too
    finally:
        workers.stop()
