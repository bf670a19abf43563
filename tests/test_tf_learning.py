"""Learning on the TF backend: the tuned PPO CartPole config with ``backend=tf`` solves CartPole.

The same criterion as the torch run in test_learning.py (mean return >= 475
over the last 100 episodes within 150k env steps, fixed seed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rlgear
from tests.conftest import needs_tf

# Earlier tests in the same process may have started TF with its default thread pools.
pytestmark = [pytest.mark.filterwarnings("ignore:TensorFlow was already initialized"), needs_tf]

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.slow
def test_ppo_on_tf_solves_cartpole_within_150k_env_steps(tmp_path):
    result = rlgear.train(
        CONFIGS / "ppo-cartpole.yaml",
        overrides=[
            "backend=tf",
            "seed=0",
            f"logging.dir={tmp_path}",
            "logging.tensorboard=false",
            "logging.progress=none",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
            "stop={episode_return_mean: 475, timesteps_total: 150000}",
        ],
    )
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000 + 2048
    assert "learner/grad_gnorm" in result
