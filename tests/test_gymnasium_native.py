"""``env.vectorization``: auto picks an env's native vector class, native refuses what it cannot build."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import SyncVectorEnv

from rlgear.errors import ConfigError, NonFiniteError
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter
from rlgear.timestep import StepType
from tests.test_gymnasium_timesteps import SCRIPTED_ID, ScriptedEnv, ScriptedVectorEnv

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


class SameStepVectorEnv(ScriptedVectorEnv):
    """Declares same-step autoreset, whose LAST rows would carry the next episode's first observation."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}


SAME_STEP_ID = "rlgear-test/SameStep-v0"
gym.register(SAME_STEP_ID, entry_point=ScriptedEnv, vector_entry_point=SameStepVectorEnv)


def make(name, num_envs=2, **kw):
    return GymnasiumAdapter().make(name, num_envs, kwargs=kw.pop("kwargs", {}), **kw)


def inner(env):
    return env.env.unwrapped if hasattr(env.env, "unwrapped") else env.env


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("CartPole-v1", CartPoleVectorEnv),
        ("CartPole-v0", CartPoleVectorEnv),
        (SCRIPTED_ID, ScriptedVectorEnv),
        ("Pendulum-v1", SyncVectorEnv),  # no vector entry point
        ("tests.test_gymnasium_timesteps:ScriptedEnv", SyncVectorEnv),  # a module:Class
    ],
)
def test_auto_uses_the_native_vector_env_when_the_env_registers_one(name, expected):
    env = make(name)  # vectorization defaults to auto
    assert type(inner(env)) is expected
    env.close()


def test_auto_falls_back_to_sync_when_each_env_is_wrapped():
    env = make("CartPole-v1", wrappers=[("gymnasium.wrappers.ClipReward", {"min_reward": 0.0})])
    assert type(inner(env)) is SyncVectorEnv
    env.close()


def test_native_on_an_env_without_a_vector_entry_point_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^env\.vectorization: native .*'Pendulum-v1' does not"):
        make("Pendulum-v1", vectorization="native")


def test_native_with_per_env_wrappers_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^env\.vectorization: native .*env\.wrappers"):
        make("CartPole-v1", vectorization="native", wrappers=[("gymnasium.wrappers.ClipReward", {})])


def test_native_refuses_a_vector_env_that_does_not_reset_on_the_next_step():
    with pytest.raises(ConfigError, match=r"^env\.vectorization: native: .*autoreset mode 'SameStep'"):
        make(SAME_STEP_ID, vectorization="native")


MISSING_ID = "rlgear-test/NeedsMissingModule-v0"
gym.register(MISSING_ID, entry_point=ScriptedEnv, vector_entry_point="rlgear_no_such_module:VectorEnv")


def test_a_vector_env_whose_module_is_missing_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"^env\.name: .*needs the module 'rlgear_no_such_module'"):
        make(MISSING_ID)  # auto picks native: the env registers a vector entry point


def test_an_unknown_vectorization_is_a_config_error():
    with pytest.raises(ConfigError, match=r"env\.vectorization: 'nativ' is not one of auto, sync"):
        make("CartPole-v1", vectorization="nativ")


def test_env_kwargs_and_horizon_reach_the_native_env():
    env = make("CartPole-v1", kwargs={"sutton_barto_reward": True}, horizon=7, vectorization="native")
    assert inner(env).max_episode_steps == 7
    env.reset(seed=0)
    ts = env.step(np.array([0, 1]))
    assert ts.step_type.tolist() == [StepType.MID] * 2
    assert ts.reward.tolist() == [0.0, 0.0]  # Sutton & Barto: 0 per step, -1 at failure (default: +1)
    env.close()


def test_non_finite_rewards_of_a_native_env_are_refused():
    env = make(SCRIPTED_ID, kwargs={"reward": float("nan")}, vectorization="native")
    env.reset(seed=0)
    with pytest.raises(NonFiniteError, match=r"reward .* slot\(s\) \[0, 1\]"):
        env.step(np.array([0, 0]))
    env.close()


def test_native_on_a_cli_run_names_the_config_file_and_key(capsys):
    from rlgear.cli import main

    argv = ["train", str(CONFIGS / "ppo-cartpole.yaml"), "--set", "env.name=Pendulum-v1"]
    assert main([*argv, "--set", "env.vectorization=native"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "rlgear: error: --set env.vectorization=native: env.vectorization: native needs an env that "
        "registers a vector entry point, and 'Pendulum-v1' does not"
    )
