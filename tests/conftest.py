"""Shared fixtures: small configs that train in a fraction of a second."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# Hooks registered by other installed packages must not change what the tests measure.
os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")


def small_config(tmp_path, **sections):
    """A tiny PPO CartPole config as a raw mapping; ``sections`` replace or extend keys."""
    config = {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@pytest.fixture
def tiny_config(tmp_path):
    return small_config(tmp_path)


CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def train_until_stop(trainer_cls: type, config_name: str, *overrides: str) -> dict[str, Any]:
    """Train a tuned config from ``configs/`` in-process (no run folder) until its stop criterion."""
    from rlgear import config as config_mod
    from rlgear.runner import should_stop

    config = config_mod.load(
        CONFIGS / config_name,
        ["logging.tensorboard=false", "logging.progress=none", *overrides],
        training_class=trainer_cls.config_class,
    )
    assert config.stop, "a learning test needs a stop criterion"
    trainer = trainer_cls(config)
    try:
        while True:
            result = trainer.train()
            if should_stop(result, config.stop):
                return result
    finally:
        trainer.stop()
