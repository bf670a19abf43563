"""Learning test: DQN solves CartPole-v1 (greedy evaluation) within the stated env-step budget, fixed seed.

The trainer is built directly from the tuned config in ``configs/`` (the
registry learns ``dqn`` from the package's entry points) and trained iteration
by iteration until a stop criterion is met, as the runner does. The greedy
evaluation episodes run on separate envs and are not counted in
``timesteps_total``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlgear import config as config_mod
from rlgear.plugins.algorithms.dqn import DQN
from rlgear.runner import should_stop

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def train_until_stop(config_name: str, *overrides: str) -> dict[str, Any]:
    """Train a config file's run in-process (no run folder) and return the last result."""
    config = config_mod.load(
        CONFIGS / config_name,
        ["logging.tensorboard=false", "logging.progress=none", *overrides],
        training_class=DQN.config_class,
    )
    assert config.stop, "a learning test needs a stop criterion"
    trainer = DQN(config)
    try:
        while True:
            result = trainer.train()
            if should_stop(result, config.stop):
                return result
    finally:
        trainer.stop()


@pytest.mark.slow
def test_dqn_solves_cartpole_greedy_evaluation_within_100k_env_steps():
    result = train_until_stop(
        "dqn-cartpole.yaml",
        "seed=0",
        "training.evaluation_interval=1",
        "stop={evaluation/episode_return_mean: 475, timesteps_total: 100000}",
    )
    assert result["evaluation/episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 100_000 + 2_000
