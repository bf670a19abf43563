"""Learning tests: SAC, TD3 and DDPG swing Pendulum-v1 up (greedy evaluation), fixed seed, torch.

Each trainer is built from its tuned config in ``configs/`` and trained until the
greedy evaluation (10 episodes on separate envs, not counted in ``timesteps_total``)
reaches the threshold or the env-step budget runs out. Measured on the loaded
2-core machine (other processes running): SAC reached -167 at 8k env steps in
~130 s; TD3 -220 at 6k env steps in ~85 s; DDPG: see the test.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.ddpg import DDPG, TD3
from rlgear.plugins.algorithms.sac import SAC
from tests.conftest import train_until_stop

pytest.importorskip("torch")


@pytest.mark.slow
def test_sac_swings_pendulum_up_greedy_evaluation_within_20k_env_steps():
    result = train_until_stop(SAC, "sac-pendulum.yaml", "seed=0")
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 20_000 + 1_000


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer_cls", "config_name"), [(TD3, "td3-pendulum.yaml"), (DDPG, "ddpg-pendulum.yaml")]
)
def test_td3_and_ddpg_swing_pendulum_up_greedy_evaluation_within_30k_env_steps(trainer_cls, config_name):
    result = train_until_stop(trainer_cls, config_name, "seed=0")
    assert result["evaluation/episode_return_mean"] >= -250, result
    assert result["timesteps_total"] <= 30_000 + 1_000
