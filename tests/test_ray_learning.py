"""PPO learns with its sampling on two remote workers (a real local Ray with 2 CPUs)."""

from __future__ import annotations

import pytest

from rlgear.discovery import registry
from tests.conftest import needs_ray, train_until_stop

# Every test here trains on remote workers: each is skipped, with the reason, without Ray.
pytestmark = [needs_ray, pytest.mark.usefixtures("ray_session")]  # one local Ray for the module


@pytest.mark.slow
def test_ppo_with_two_remote_workers_solves_cartpole_within_150k_env_steps():
    # 2 workers x 4 envs: the same 8 envs x 32 steps per batch as the single-process config.
    # Batches are laid out in worker order, so this seeded run repeats exactly (solved at 66,558).
    result = train_until_stop(
        registry.load_algorithm("ppo"),
        "ppo-cartpole.yaml",
        "seed=0",
        "workers.num_workers=2",
        "workers.num_envs_per_worker=4",
        "stop={episode_return_mean: 475, timesteps_total: 150000}",
    )
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000 + 2048
    assert result["num_worker_restarts"] == 0
