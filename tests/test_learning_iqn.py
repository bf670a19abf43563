"""Learning tests: iqn learns CartPole-v1 (greedy evaluation) within a stated env-step budget, fixed seed.

The trainer is built from the tuned config ``configs/iqn-cartpole.yaml`` and trained until a stop
criterion, as the runner does; the greedy evaluation episodes (10, acting on K sampled taus) run on
separate envs and are not counted in ``timesteps_total``. The bars are the first evaluations of seeded
runs measured on the 2-core machine (see the config's header): they check that the implicit quantile
network learns with the quantile Huber loss on sampled taus, not that it solves CartPole.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.dqn.iqn import IQN
from tests.conftest import train_until_stop


@pytest.mark.slow
def test_iqn_reaches_200_on_cartpole_within_10k_env_steps_on_torch():
    """Budget: 10k env steps (seed 0 measured: 208.5 at 4.1k; 18-26 s at a load average of 4, 57 s at
    5.5). Seeds 1 and 2 first reached 200 at 8.1k and 6.1k env steps."""
    result = train_until_stop(
        IQN,
        "iqn-cartpole.yaml",
        "seed=0",
        "stop={evaluation/episode_return_mean: 200, timesteps_total: 10000}",
    )
    assert result["evaluation/episode_return_mean"] >= 200, result
    assert result["timesteps_total"] <= 10_000 + 2_000


@pytest.mark.slow
def test_iqn_reaches_100_on_cartpole_within_6k_env_steps_on_tf():
    """Budget: 6k env steps on TF (seed 0 measured: 109.5 at 4.0k, 236.5 at 6.1k env steps); 49 s at a
    load average of 5 (a bar of 150 within 8k took 93 s at 5.5: too slow for the 2 loaded cores)."""
    pytest.importorskip("tensorflow")
    result = train_until_stop(
        IQN,
        "iqn-cartpole.yaml",
        "seed=0",
        "backend=tf",
        "stop={evaluation/episode_return_mean: 100, timesteps_total: 6000}",
    )
    assert result["evaluation/episode_return_mean"] >= 100, result
    assert result["timesteps_total"] <= 6_000 + 2_000
