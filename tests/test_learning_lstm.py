"""Learning tests of recurrent policies: LSTM PPO on StatelessCartPole (positions only), both backends.

Without the velocities no memoryless policy balances the pole for long; an LSTM
can recover them from consecutive positions. The config is the shipped
``configs/ppo-lstm-stateless-cartpole.yaml`` (its header says where its numbers come
from: rl-baselines3-zoo's RecurrentPPO ``CartPoleNoVel-v1`` entry, with the value loss
weighed down for rlgear's shared LSTM), so CI proves that file learns; the tests only
pick the backend and seed, the LSTM on or off, the stop, and where the run folder goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rlgear
from rlgear.config import read_yaml

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ppo-lstm-stateless-cartpole.yaml"
#: The config's env-step budget (its stop, and where its lr and clip schedules reach 0).
BUDGET = read_yaml(CONFIG)["stop"]["timesteps_total"]
#: The seed of each backend's learning test. Env steps at the first mean of 400 with seed 2: torch
#: 268,642, tf 308,752 (measured when the config moved to configs/, and again on 29 Nov 2026: the same
#: counts); on the code of 26 Nov 2026: torch 259,528, tf 331,720; seed 0: torch 472,497,
#: tf 208,969. Both act through the same numpy LSTM twin, so the spread over seeds comes from the
#: training trajectory (float32 rounding alone moved one set of initial weights from 111k to 472k),
#: not from a backend; docs/recurrent.md has the table. Runs are deterministic per backend and seed
#: here. Learning peaks near 400-450 and can fall back afterwards.
#: Env steps to pass BAR on tf (30 Nov 2026): seed 0 76,316, seed 1 73,621, seed 2 90,310, seed 3
#: 46,614, seed 4 47,634. Every seed passes well inside the budget; tf runs seed 3 because tf's steps
#: cost twice torch's and this was CI's slowest test (62.7 s on seed 2).
SEEDS = {"torch": 2, "tf": 3}
#: The tests' bar: five times what the same PPO without the LSTM scores (about 45). Seed 2 passed it
#: at 51,944 env steps on torch and 90,310 on tf (29 Nov 2026), where the last stretch to the
#: config's own stop of 400 takes another 217k (torch) and 218k (tf) env steps: that stretch is 3/4
#: of the tests' time and proves nothing more about the memory, so CI stops at 250 (the 400 figures
#: are in docs/recurrent.md).
BAR = 250
#: The memoryless control's budget: more than either backend's LSTM needs to pass BAR (90,310 env
#: steps at most, above). The MLP's mean is about 45 at 100k and at 150k alike.
CONTROL_BUDGET = 100_000
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def stateless_cartpole_config(tmp_path, backend: str, lstm: bool, stop: dict | None = None) -> dict[str, Any]:
    """The shipped config on ``backend`` with its test seed, the LSTM on or off, ``stop`` (default:
    the config's own), no checkpoints, and the run folder under ``tmp_path``."""
    config = read_yaml(CONFIG)
    config["backend"] = backend
    config["seed"] = SEEDS[backend]
    config["model"] = {**config["model"], "lstm": lstm}
    if stop is not None:
        config["stop"] = stop
    config["checkpoint"] = {"every": 0, "at_end": False}
    config["logging"] = {"dir": str(tmp_path), "tensorboard": False, "progress": "none"}
    return config


def test_the_shipped_config_names_an_env_of_the_installed_package():
    """``rlgear train configs/ppo-lstm-stateless-cartpole.yaml`` works outside a clone too: its env is
    importable from rlgear itself (tests/ is not installed), and observes positions only."""
    from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter

    name = read_yaml(CONFIG)["env"]["name"]
    assert name.partition(":")[0].split(".")[0] == "rlgear", name
    env = GymnasiumAdapter().make(name, 2, kwargs={})
    try:
        assert env.reset(seed=0).observation.shape == (2, 2)  # cart position and pole angle: no velocities
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_lstm_ppo_reaches_250_on_stateless_cartpole_within_500k_env_steps(tmp_path, backend):
    """The shipped config (its schedules run over its 500k env-step budget), stopped at ``BAR``."""
    if backend == "tf":
        pytest.importorskip("tensorflow")
    config = stateless_cartpole_config(
        tmp_path, backend, True, {"episode_return_mean": BAR, "timesteps_total": BUDGET}
    )
    result = rlgear.train(config)
    print(f"{backend}: {result['episode_return_mean']:.1f} at {result['timesteps_total']} env steps, "
          f"{result['time_total_s']:.0f} s of training")  # fmt: skip
    assert result["episode_return_mean"] >= BAR, result  # mean of the last 100 episodes
    assert result["timesteps_total"] <= BUDGET + 256


@pytest.mark.slow
def test_the_same_ppo_without_the_lstm_stays_under_half_the_bar(tmp_path):
    """The memory is what solves it: the MLP, same config and seed otherwise, over ``CONTROL_BUDGET``
    env steps, more than the LSTM needs to pass ``BAR`` on either backend (it scores about 45; see
    docs/recurrent.md). This is a claim about the task, so it runs on one backend (torch); CI's time
    goes to the tests that can tell the backends apart."""
    backend = "torch"
    config = stateless_cartpole_config(tmp_path, backend, False, {"timesteps_total": CONTROL_BUDGET})
    result = rlgear.train(config)
    print(f"{backend}, no LSTM: {result['episode_return_mean']:.1f} at {result['timesteps_total']} env steps, "
          f"{result['time_total_s']:.0f} s of training")  # fmt: skip
    assert result["timesteps_total"] >= CONTROL_BUDGET
    assert result["episode_return_mean"] < BAR / 2, result
