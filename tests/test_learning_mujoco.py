"""Learning test: SAC on MuJoCo's InvertedPendulum-v5 (``pip install 'rlgear[mujoco]'``), fixed seed, torch.

Random play (SAC's first 1000 env steps, uniform actions) balances the pole for 4.9 steps on
average (164 episodes, seed 0); the best return is 1000 (the time limit). The test stops at
its target or at its env-step budget and asserts a greedy evaluation return (5 episodes) of
at least 50, 10x random play's.
Measured (seed 0, configs/sac-invertedpendulum.yaml): evaluation returns of 77.2 at 2016 env
steps (the first evaluation) and 87.4 at 4037, on the loaded 2-core machine at about 20 s per
1000 env steps (one gradient step per env step); the file's 100k-step budget is not measured.
"""

from __future__ import annotations

import pytest

from rlgear.plugins.algorithms.sac import SAC
from tests.conftest import train_until_stop

pytest.importorskip("mujoco", reason="needs MuJoCo: pip install 'rlgear[mujoco]'")

RANDOM_PLAY_RETURN = 4.9


@pytest.mark.slow
def test_sac_balances_inverted_pendulum_10x_longer_than_random_play_within_4000_env_steps(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory on warnings
    result = train_until_stop(
        SAC,
        "sac-invertedpendulum.yaml",
        "seed=0",
        "stop={evaluation/episode_return_mean: 50, timesteps_total: 4000}",
    )
    assert result["evaluation/episode_return_mean"] >= 50 >= 10 * RANDOM_PLAY_RETURN, result
    assert result["timesteps_total"] <= 4000 + 1000
