"""Learning on the TF backend: the tuned PPO and A3C CartPole configs with ``backend=tf``.

PPO: the same criterion as the torch run in test_learning.py (mean return >= 475
over the last 100 episodes within 150k env steps, fixed seed). A3C: its worker
gradient path (compute_gradients on the evaluator, apply_gradients on the
learner) in one process, seeded and synchronous; the Ray transport of those
gradients is backend-neutral arrays and is trained through by the torch run in
test_learning_impala_a3c.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rlgear
from rlgear.plugins.algorithms.a3c import A3C
from tests.conftest import needs_tf, train_until_stop

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


@pytest.mark.slow
def test_a3c_on_tf_reaches_400_on_cartpole_within_150k_env_steps():
    """configs/a3c-cartpole.yaml on TF without Ray: 8 envs x 5 steps per gradient, RMSprop.

    Measured: 419 at 79k env steps (seed 0). It ran with two remote workers until stop 22,
    where on a loaded 2-core CI machine it took longer than the rest of the Ray tests together.
    """
    result = train_until_stop(
        A3C, "a3c-cartpole.yaml", "seed=0", "backend=tf", "workers.num_workers=0",
        "stop={episode_return_mean: 400, timesteps_total: 150000}",
    )  # fmt: skip
    assert result["episode_return_mean"] >= 400, result
    assert result["timesteps_total"] <= 150_000 + 2_000
    # every 40 env steps one gradient, computed by the evaluator and applied by the learner
    assert result["learner/num_grad_updates"] >= result["timesteps_total"] // 40 - 10
