"""Ray: the Ray trial executor (trials as actors, PENDING while the cluster is full) and Ray Tune
interop (an rlgear Trainer runs, checkpoints and restores as a ray.tune Trainable). Real local Ray, 2 CPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rlgear
from rlgear.scheduler import TrialStatus
from rlgear.tune.experiment import run
from tests.conftest import needs_ray, small_config


@pytest.mark.slow
def test_ray_executor_runs_trials_as_actors_and_queues_what_does_not_fit(tmp_path, ray_session):
    config = small_config(tmp_path, training={"lr": {"grid_search": [1e-3, 3e-4, 1e-4]}})
    config["stop"] = {"training_iteration": 3}
    config["tune"] = {"executor": "ray", "checkpoint_freq": 2}
    result = run(config, progress="none")
    assert [t.status for t in result.trials] == [TrialStatus.TERMINATED] * 3
    rows = {
        t.trial_id: [
            json.loads(line) for line in (Path(t.logdir) / "progress.jsonl").read_text().splitlines()
        ]
        for t in result.trials
    }
    assert all([r["training_iteration"] for r in rs] == [1, 2, 3] for rs in rows.values())
    # 2 CPUs, 1 CPU per trial: the third trial waited until one of the first two had finished
    first_done = min(rows["trial_000"][-1]["timestamp"], rows["trial_001"][-1]["timestamp"])
    assert rows["trial_002"][0]["timestamp"] >= first_done
    assert Path(result.best_checkpoint).name == "checkpoint_000003"


@pytest.mark.slow
def test_tuner_runs_an_rlgear_trainer_and_its_checkpoint_restores(tmp_path, ray_session):
    from ray import tune

    param_space = small_config(tmp_path)
    del param_space["algorithm"]  # get_trainable("ppo") fixes the algorithm
    param_space["training"]["lr"] = tune.loguniform(1e-4, 1e-2)
    tuner = tune.Tuner(
        rlgear.get_trainable("ppo"),
        param_space=param_space,
        run_config=tune.RunConfig(
            name="interop",
            storage_path=str(tmp_path / "ray_results"),
            stop={"training_iteration": 2},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1, checkpoint_at_end=True),
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert len(results) == 1 and not results.errors
    result = results[0]
    assert result.metrics["training_iteration"] == 2
    assert result.metrics["timesteps_total"] > 0
    assert 1e-4 <= result.config["training"]["lr"] <= 1e-2
    assert result.checkpoint is not None

    # The checkpoint Tune kept restores into a fresh rlgear trainer, counters included.
    trainer_cls = rlgear.discovery.registry.load_algorithm("ppo")
    with result.checkpoint.as_directory() as folder:
        trainer = trainer_cls(small_config(tmp_path))
        try:
            trainer.restore(f"{folder}/rlgear_checkpoint")
            assert trainer.iteration == 2
            assert trainer.timesteps_total == result.metrics["timesteps_total"]
        finally:
            trainer.stop()


@needs_ray
def test_get_trainable_is_a_tune_trainable_with_reset_config():
    from ray import tune

    cls = rlgear.get_trainable("ppo")
    assert issubclass(cls, tune.Trainable)
    assert rlgear.get_trainable("ppo") is cls
    assert cls.reset_config is not tune.Trainable.reset_config


def test_get_trainable_names_an_unknown_algorithm():
    with pytest.raises(rlgear.PluginError, match=r"unknown algorithm 'ppoo'.*did you mean 'ppo'"):
        rlgear.get_trainable("ppoo")
