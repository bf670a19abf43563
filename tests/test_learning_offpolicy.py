"""Learning tests: SAC, TD3 and DDPG swing Pendulum-v1 up (greedy evaluation), fixed seed, torch (and SAC on TF).

Each trainer is built from its tuned config in ``configs/`` and trained until the
greedy evaluation (10 episodes on separate envs every 1000 env steps, not counted in
``timesteps_total``) reaches the threshold or the env-step budget runs out. The
learner is compute-bound (256x256 networks, one gradient step of 256 rows per env
step), so the time follows the machine's load. Measured on the 2-core machine with
evaluation every 2000 env steps, seed 0: SAC -167 at 8k env steps (130 s with other
helpers' jobs running, 360 s with bench/offpolicy.py running beside it too); TD3 -220
at 6k (85 s / 141 s); DDPG -209 at 4k (82 s / 83 s). With evaluation every 1000 env steps,
the three run side by side (``-n 2``, load average about 4): SAC 222 s, TD3 172 s, DDPG 20 s.
SAC is above the ~3 minute budget on a loaded machine (130 s in the first measurement above).
SAC on the TF backend (same config, ``backend=tf``, evaluation every 1000 env steps): -182 at
5k env steps in 61 s (load average 2-4); the whole test took 156 s at load average about 8.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.ddpg import DDPG, TD3
from rlgear.plugins.algorithms.sac import SAC
from tests.conftest import needs_tf, train_until_stop

pytest.importorskip("torch")


@pytest.mark.slow
def test_sac_swings_pendulum_up_greedy_evaluation_within_20k_env_steps():
    result = train_until_stop(SAC, "sac-pendulum.yaml", "seed=0", "training.evaluation_interval=1")
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 20_000 + 1_000


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer_cls", "config_name"), [(TD3, "td3-pendulum.yaml"), (DDPG, "ddpg-pendulum.yaml")]
)
def test_td3_and_ddpg_swing_pendulum_up_greedy_evaluation_within_30k_env_steps(trainer_cls, config_name):
    result = train_until_stop(trainer_cls, config_name, "seed=0", "training.evaluation_interval=1")
    assert result["evaluation/episode_return_mean"] >= -250, result
    assert result["timesteps_total"] <= 30_000 + 1_000


@pytest.mark.slow
@needs_tf
def test_sac_on_tf_swings_pendulum_up_greedy_evaluation_within_20k_env_steps():
    """The same tuned config on the TF backend (its compiled learner step and the same numpy twin),
    with 64x64 networks: the torch test proves the shipped 256x256 file learns, this one that TF's
    learner does, at a quarter of the time (29 Nov 2026, seed 0: -185.7 at 4k env steps in 66 s on a
    loaded machine, against -182 at 5k in 61-156 s with 256x256)."""
    result = train_until_stop(
        SAC, "sac-pendulum.yaml", "seed=0", "training.evaluation_interval=1", "backend=tf",
        "model.hidden_sizes=[64,64]",
    )  # fmt: skip
    assert result["evaluation/episode_return_mean"] >= -200, result
    assert result["timesteps_total"] <= 20_000 + 1_000
