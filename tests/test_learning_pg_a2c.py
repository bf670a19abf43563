"""Learning tests: ``pg`` and ``a2c`` reach the stated return within the stated env-step budget, fixed seeds.

The trainers are built directly from the tuned configs in ``configs/`` (the
registry learns ``pg`` and ``a2c`` from the package's entry points), and
trained iteration by iteration until a stop criterion is met, as the runner does.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.a2c import A2C
from rlgear.plugins.algorithms.pg import PG
from tests.conftest import train_until_stop


@pytest.mark.slow
def test_a2c_solves_cartpole_within_500k_env_steps():
    result = train_until_stop(
        A2C, "a2c-cartpole.yaml", "seed=0", "stop={episode_return_mean: 475, timesteps_total: 500000}"
    )
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 500_000 + 2_000


@pytest.mark.slow
def test_pg_reaches_400_on_cartpole_within_500k_env_steps():
    result = train_until_stop(
        PG, "pg-cartpole.yaml", "seed=0", "stop={episode_return_mean: 400, timesteps_total: 500000}"
    )
    assert result["episode_return_mean"] >= 400, result
    assert result["timesteps_total"] <= 500_000 + 4_000


@pytest.mark.slow
def test_pg_without_baseline_reaches_400_on_cartpole_within_500k_env_steps():
    result = train_until_stop(
        PG,
        "pg-cartpole.yaml",
        "seed=0",
        "training.use_baseline=false",
        "stop={episode_return_mean: 400, timesteps_total: 500000}",
    )
    assert result["episode_return_mean"] >= 400, result
    assert result["timesteps_total"] <= 500_000 + 4_000
