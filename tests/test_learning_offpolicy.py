"""Learning tests: SAC, TD3 and DDPG swing Pendulum-v1 up (greedy evaluation), fixed seed, torch (and SAC on TF).

Each trainer is built from its tuned config in ``configs/`` and trained until the greedy evaluation
(10 episodes on separate envs every 1000 env steps, not counted in ``timesteps_total``) reaches the
threshold or the env-step budget runs out, with **64x64 networks** instead of the files' 256x256.
Why: the learner is compute-bound (one gradient step of 256 rows per env step), and at 256x256 SAC
alone took 100-360 s depending on the machine's load, the largest item of CI's learning tests.
These tests prove that each algorithm's learner learns on both backends; what the shipped 256x256
files reach, and how fast, is measured against SB3 by ``bench/offpolicy.py`` (docs/benchmarks.md).

Measured on 29 Nov 2026 (seed 0, evaluation every 1000 env steps, one other job on the 2-core
machine): with 64x64, SAC -198.3 at 4,012 env steps in 18 s (256x256: -167.5 at 8,024 in 102 s);
TD3 -204.9 at 7,021 in 18 s; DDPG -172.5 at 5,015 in 11 s; on TF: SAC -185.7 at 4k in 66 s (loaded),
TD3 -225.1 at 6,018 in 19 s, DDPG -227.9 at 4,012 in 12 s.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.ddpg import DDPG, TD3
from rlgear.plugins.algorithms.sac import SAC
from tests.conftest import needs_tf, train_until_stop

pytest.importorskip("torch")

#: The overrides of every test here: seed 0, greedy evaluation every 1000 env steps, 64x64 networks.
SMALL = ("seed=0", "training.evaluation_interval=1", "model.hidden_sizes=[64,64]")


@pytest.mark.slow
def test_sac_swings_pendulum_up_greedy_evaluation_within_20k_env_steps():
    result = train_until_stop(SAC, "sac-pendulum.yaml", *SMALL)
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 20_000 + 1_000


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", pytest.param("tf", marks=needs_tf)])
@pytest.mark.parametrize(
    ("trainer_cls", "config_name"), [(TD3, "td3-pendulum.yaml"), (DDPG, "ddpg-pendulum.yaml")]
)
def test_td3_and_ddpg_swing_pendulum_up_greedy_evaluation_within_30k_env_steps(
    trainer_cls, config_name, backend
):
    result = train_until_stop(trainer_cls, config_name, *SMALL, f"backend={backend}")
    assert result["evaluation/episode_return_mean"] >= -250, result
    assert result["timesteps_total"] <= 30_000 + 1_000


@pytest.mark.slow
@needs_tf
def test_sac_on_tf_swings_pendulum_up_greedy_evaluation_within_20k_env_steps():
    """The same tuned config on the TF backend (its compiled learner step and the same numpy twin)."""
    result = train_until_stop(SAC, "sac-pendulum.yaml", *SMALL, "backend=tf")
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 20_000 + 1_000
