"""Learning tests: ``appo`` on CartPole-v1 with two remote workers on a real local Ray, and in-process.

The tuned config runs as it is (``configs/appo-cartpole.yaml``: 2 workers x 8 envs, fixed
seed) until ``episode_return_mean >= 475`` (last 100 episodes) within 300k env steps, the
issue's target. Remote workers make the arrival order depend on timing, so the step count
may vary between runs of one seed (see the config's comment for measured figures).
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.appo import APPO
from tests.conftest import needs_ray, train_until_stop


@pytest.mark.slow
@needs_ray
@pytest.mark.usefixtures("ray_session")
def test_appo_with_two_remote_workers_reaches_475_on_cartpole_within_300k_env_steps():
    """About 65 s on a loaded 2-core machine (Ray start included)."""
    result = train_until_stop(APPO, "appo-cartpole.yaml", "seed=0")
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 300_000 + 7_000  # the last iteration may overshoot by one
    assert result["learner/num_target_updates"] > 0
    assert result["learner/policy_lag"] >= 1  # the samples really came from lagging remote workers


@pytest.mark.slow
def test_appo_in_process_reaches_475_on_cartpole_within_150k_env_steps():
    """About 25 s alone, 2 min on a loaded 2-core machine. No workers: the driver's evaluator samples
    with the learner's weights (so V-trace's weights are 1 and the ratio is PPO's
    pi / pi_before_this_batch); deterministic, 475 at 113,756 env steps."""
    result = train_until_stop(
        APPO, "appo-cartpole.yaml", "seed=0", "workers.num_workers=0",
        "stop={episode_return_mean: 475, timesteps_total: 150000}",
    )  # fmt: skip
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000
