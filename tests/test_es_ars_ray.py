"""es and ars on Ray workers: the same seed gives the same parameters, and a worker killed in the middle
of a training step has its perturbations re-issued (one local Ray of 2 CPUs for the module)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rlgear.discovery import registry

ES = registry.load_algorithm("es")
ARS = registry.load_algorithm("ars")


def ray_config(tmp_path, algorithm, num_workers=2):
    return {
        "algorithm": algorithm,
        "seed": 1,
        "env": {"name": "CartPole-v1"},
        "workers": {
            "num_workers": num_workers,
            "num_envs_per_worker": 3,
            "ray": {"worker_start_timeout_s": 600.0},  # see tests/conftest.py small_config
        },
        "training": {"num_perturbations": 8, "perturbations_per_task": 2, "noise_table_size": 200_000},
        "model": {"hidden_sizes": [8], "observation_filter": "mean_std"},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }


@pytest.mark.parametrize("cls", [ES, ARS], ids=["es", "ars"])
def test_two_ray_workers_give_the_same_parameters_for_the_same_seed(tmp_path, ray_session, cls):
    thetas, steps = [], []
    for run in range(2):
        trainer = cls(ray_config(tmp_path / str(run), cls.name))
        try:
            for _ in range(3):
                result = trainer.train()
            thetas.append(trainer.theta.copy())
            steps.append(result["timesteps_total"])
            assert result["num_healthy_workers"] == 2
        finally:
            trainer.stop()
    assert np.abs(thetas[0]).sum() > 0
    np.testing.assert_array_equal(thetas[0], thetas[1])
    assert steps[0] == steps[1]


def die_at_next_population(evaluator):
    """Runs in worker 1: its next perturbation task kills the process, as a crash would."""

    def crash(*args, **kwargs):
        os._exit(1)

    evaluator.policy.compute_population_actions = crash  # what population evaluation acts with


def test_a_killed_workers_perturbations_are_reissued(tmp_path, ray_session):
    import ray

    trainer = ES(ray_config(tmp_path, "es"))
    try:
        trainer.train()
        victim = trainer.workers.remote_worker(1)
        ray.get(victim.apply.remote(die_at_next_population))
        result = trainer.train()  # worker 1 dies on its first task of this step
        assert result["num_worker_restarts"] == 1
        # 8 pairs in tasks of 2: worker 1 had tasks 0 and 2; both were lost and scored elsewhere
        assert result["learner/num_reissued_tasks"] == 2
        assert result["learner/perturbation_episodes"] == 16  # every pair scored, none missing
        assert trainer.workers.remote_worker(1) is not victim
        again = trainer.train()  # the replacement takes its share again
        assert again["learner/num_reissued_tasks"] == 2 and again["num_worker_restarts"] == 1
        assert again["timesteps_this_iter"] > 0
    finally:
        trainer.stop()
