"""Learning tests of the attention memory (``model.attention``): PPO on DelayedCue, both backends,
with the shipped ``configs/ppo-attention-delayed-cue.yaml`` (so CI proves that file learns).

DelayedCue (:mod:`rlgear.plugins.envs.delayed_cue`) shows one of two cues at step 0 and asks for it
20 to 24 steps later (+1 right, -1 wrong), so only a policy that remembers the first step for 20+
steps scores above 0. ``max_seq_len`` 20 is shorter than that delay: the learner never sees the cue
and the query in one sequence, so the cue reaches the query only through the memory carried in the
recurrent state (``state_in_<k>``) across sequence and fragment boundaries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rlgear
from rlgear.config import read_yaml

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ppo-attention-delayed-cue.yaml"

#: Mean return of the last 100 episodes that counts as solved (1 is always right, 0 is chance).
BAR = 0.9
#: Env steps to reach BAR, measured on 29 Nov 2026 (seed 0, acting through the numpy twin, the
#: default): torch 14,726 (0.94 there; the same count in two runs, 24 s of training on this shared
#: 2-core machine, 57 s with another run beside it), tf 9,817 (0.94; the same count in two runs,
#: 22-56 s); seeds 1 and 2 on torch: 5,890 and 11,782. The budget is the slowest figure, 14,726, with ~35%
#: margin.
BUDGET = read_yaml(CONFIG)["stop"]["timesteps_total"]  # 20,000
#: The memoryless control's budget (over 3x what attention needs); it scored -0.02 there (torch, seed 0).
CONTROL_BUDGET = 50_000
SEED = 0
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def delayed_cue_config(tmp_path, backend: str, attention: bool, stop: dict) -> dict[str, Any]:
    """The shipped config (PPO with 8 envs x 32 steps, one minibatch of 256 rows, 10 epochs; a
    32-unit MLP trunk, then 2 GTrXL blocks of 32 units remembering 32 steps) on ``backend`` with the
    test's seed, the memory on or off, ``stop``, no checkpoints, the run folder under ``tmp_path``."""
    config = read_yaml(CONFIG)
    config["backend"] = backend
    config["seed"] = SEED
    config["model"] = {**config["model"], "attention": attention}
    config["stop"] = stop
    config["checkpoint"] = {"every": 0, "at_end": False}
    config["logging"] = {"dir": str(tmp_path), "tensorboard": False, "progress": "none"}
    return config


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_attention_ppo_recalls_a_cue_20_steps_back_within_20k_env_steps(tmp_path, backend):
    if backend == "tf":
        pytest.importorskip("tensorflow")
    config = delayed_cue_config(
        tmp_path, backend, True, {"episode_return_mean": BAR, "timesteps_total": BUDGET}
    )
    result = rlgear.train(config)
    print(f"{backend}: {result['episode_return_mean']:.2f} at {result['timesteps_total']} env steps, "
          f"{result['time_total_s']:.0f} s of training")  # fmt: skip
    assert result["episode_return_mean"] >= BAR, result
    assert result["timesteps_total"] <= BUDGET + 256


@pytest.mark.slow
def test_the_same_ppo_without_memory_stays_at_chance(tmp_path):
    """The memory is what solves it: the MLP alone, same config and seed, over ``CONTROL_BUDGET``."""
    config = delayed_cue_config(tmp_path, "torch", False, {"timesteps_total": CONTROL_BUDGET})
    result = rlgear.train(config)
    print(f"no memory: {result['episode_return_mean']:.2f} at {result['timesteps_total']} env steps")
    assert result["timesteps_total"] >= CONTROL_BUDGET
    assert abs(result["episode_return_mean"]) < 0.25, result
