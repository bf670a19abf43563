"""Learning tests: ``appo`` on CartPole-v1 with two remote workers on a real local Ray, and in-process.

The tuned config runs as it is (``configs/appo-cartpole.yaml``: 2 workers x 8 envs, fixed
seed) until greedy evaluation (10 episodes after every iteration) reaches a mean of 475 within
300k env steps, the issue's target, judged as the apex and rainbow learning tests judge it.
Remote workers make the arrival order depend on timing, so the step count varies between runs
of one seed: greedy 475 came at 38k/50k/108k env steps for seeds 0/1/2 on an idle machine,
far inside the budget. The training episodes' mean (stochastic policy, last 100 episodes) is
slower and timing-dependent (204k on a loaded machine, 312 at 300k in one CI run of seed 0),
so it is not the criterion here.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.appo import APPO
from tests.conftest import needs_ray, train_until_stop


@pytest.mark.slow
@needs_ray
@pytest.mark.usefixtures("ray_session")
def test_appo_with_two_remote_workers_reaches_475_on_cartpole_within_300k_env_steps():
    """About 10 s of training on an idle 2-core machine, plus Ray's start."""
    result = train_until_stop(APPO, "appo-cartpole.yaml", "seed=0")
    assert result["evaluation/episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 300_000 + 7_000  # the last iteration may overshoot by one
    assert result["learner/num_target_updates"] > 0
    assert result["learner/policy_lag"] >= 1  # the samples really came from lagging remote workers


@pytest.mark.slow
def test_appo_in_process_reaches_475_on_cartpole_within_150k_env_steps():
    """About 25 s alone, 2 min on a loaded 2-core machine. No workers: the driver's evaluator samples
    with the learner's weights (so V-trace's weights are 1 and the ratio is PPO's
    pi / pi_before_this_batch); deterministic, 475 at 113,756 env steps."""
    result = train_until_stop(
        APPO, "appo-cartpole.yaml", "seed=0", "workers.num_workers=0", "training.evaluation_interval=0",
        "stop={episode_return_mean: 475, timesteps_total: 150000}",
    )  # fmt: skip
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000
