"""Learning test of the relational module (``model.relational``): PPO on a small Box-World, entity mode.

The level: a 6x6 room, one box holding the gem and one loose key that opens it
(``solution_length: 1, num_distractors: 0``), 60 steps. Solving it returns 11 (+11 for the gem);
anything else returns 0, so the mean return is 11 x the success rate. A uniform random policy
returns 1.83 on it (16.6% solved over 1000 episodes, seeds 0-999; 0.473 at size 12,
docs/boxworld.md). Observations are
Box-World's entity rows ``[present, x, y, kind one-hot, rgb]``, zero rows for vanished pixels (the
key once picked up), which the module masks.
"""

from __future__ import annotations

from typing import Any

import pytest

import rlgear

#: Mean return (last 100 episodes) that counts as learnt: 73% of the levels solved, 4.4x random's.
BAR = 8.0
#: Env steps to first reach BAR, measured on 29 Nov 2026 with these settings (torch, one run per seed,
#: this loaded 2-core machine): seed 0 47,194 (33 s of training), seed 1 77,397 (40 s), seed 2 102,899
#: (54 s); all three solve 94-100% of the levels by 120k. The budget is the slowest seed's with ~45%
#: margin. With 2 blocks instead of 1 the same PPO is slower to learn here (seed 0 first passes 5.5 at
#: 98,533, seed 1 stays at 2.64 by 150k). A plain [64, 64] MLP on the same observation with the same
#: training settings (seed 0) passes 10 by 48,597 env steps: at this size the entity rows come in a
#: fixed order, which an MLP reads directly. Neither is asserted (one run each).
BUDGET = 150_000
SEED = 0


def boxworld_config(tmp_path, backend: str, stop: dict) -> dict[str, Any]:
    """PPO with 8 envs x 64 steps, minibatches of 256 rows, 8 epochs, lr 5e-4; a relational module of
    1 block, 2 heads and 32 units, then a [64] MLP."""
    return {
        "algorithm": "ppo",
        "backend": backend,
        "seed": SEED,
        "env": {
            "name": "rlgear/BoxWorld-v0",
            "kwargs": {
                "size": 6,
                "solution_length": 1,
                "num_distractors": 0,
                "max_steps": 60,
                "observation_mode": "entities",
            },
        },
        "workers": {"num_envs_per_worker": 8, "rollout_fragment_length": 64},
        "training": {
            "train_batch_size": 512,
            "sgd_minibatch_size": 256,
            "num_sgd_iter": 8,
            "lr": 0.0005,
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "entropy_coeff": 0.01,
        },
        "model": {
            "hidden_sizes": [64],
            "relational": True,
            "relational_dim": 32,
            "relational_heads": 2,
            "relational_blocks": 1,
        },
        "stop": stop,
        "checkpoint": {"every": 0, "at_end": False},
        "logging": {"dir": str(tmp_path), "tensorboard": False, "progress": "none"},
    }


@pytest.mark.slow
def test_relational_ppo_solves_most_small_boxworld_levels_within_150k_env_steps(tmp_path):
    result = rlgear.train(
        boxworld_config(tmp_path, "torch", {"episode_return_mean": BAR, "timesteps_total": BUDGET})
    )
    print(f"relational: {result['episode_return_mean']:.2f} at {result['timesteps_total']} env steps, "
          f"{result['time_total_s']:.0f} s of training")  # fmt: skip
    assert result["episode_return_mean"] >= BAR, result
    assert result["timesteps_total"] <= BUDGET + 512
