"""The gymnasium adapter emits TimeSteps with ALF semantics."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

from rlgear.errors import ConfigError
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType


class ScriptedEnv(gym.Env):
    """Episode i ends after ``lengths[i % len]`` steps, terminated or truncated as scripted.

    The observation is [episode index, step index], the reward is 1 per step.
    """

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, lengths=(3, 2), terminated=(True, False)):
        self.lengths, self.terminated = lengths, terminated
        self.episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:  # a seeded reset starts the script over
            self.episode = -1
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.episode, self.t], dtype=np.float32)

    def step(self, action):
        self.t += 1
        k = self.episode % len(self.lengths)
        done = self.t >= self.lengths[k]
        return self._obs(), 1.0, done and self.terminated[k], done and not self.terminated[k], {}


def make(name, num_envs=1, **kw):
    return GymnasiumAdapter().make(name, num_envs, kwargs=kw.pop("kwargs", {}), **kw)


def run(env, steps, action=1):
    out = [env.reset(seed=0)]
    for _ in range(steps):
        out.append(env.step(np.full(env.num_envs, action)))
    return out


def test_terminated_maps_to_last_with_discount_zero_and_truncated_to_discount_one():
    env = make("tests.test_gymnasium_timesteps:ScriptedEnv")
    steps = run(env, 8)
    types = [int(ts.step_type[0]) for ts in steps]
    discounts = [float(ts.discount[0]) for ts in steps]
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    # episode 0: 3 steps, terminated; episode 1: 2 steps, truncated; episode 2 starts again
    assert types == [F, M, M, L, F, M, L, F, M]
    assert discounts == [1, 1, 1, 0, 1, 1, 1, 1, 1]
    env.close()


def test_step_after_last_is_first_with_zero_reward_and_zero_prev_action():
    env = make("tests.test_gymnasium_timesteps:ScriptedEnv")
    steps = run(env, 8, action=1)
    for previous, ts in itertools.pairwise(steps):
        if previous.step_type[0] == StepType.LAST:
            assert ts.step_type[0] == StepType.FIRST
            assert ts.reward[0] == 0.0
            assert ts.prev_action[0] == 0
            assert ts.observation[0, 1] == 0  # a fresh episode: step index 0
        elif ts.step_type[0] != StepType.FIRST:
            assert ts.reward[0] == 1.0
            assert ts.prev_action[0] == 1
    env.close()


def test_last_step_carries_the_final_observation():
    env = make("tests.test_gymnasium_timesteps:ScriptedEnv")
    steps = run(env, 3)
    assert steps[3].step_type[0] == StepType.LAST
    np.testing.assert_array_equal(steps[3].observation[0], [0, 3])
    env.close()


def test_horizon_truncates_regardless_of_the_envs_own_limit():
    env = make("CartPole-v1", num_envs=2, horizon=5)
    steps = []
    ts = env.reset(seed=1)
    steps.append(ts)
    for i in range(12):
        ts = env.step(np.array([i % 2, i % 2]))  # alternate: CartPole does not fall in 5 steps
        steps.append(ts)
    types = np.array([ts.step_type for ts in steps])
    assert types[5].tolist() == [StepType.LAST] * 2
    assert steps[5].discount.tolist() == [1.0, 1.0]  # a time limit, not a terminal
    assert types[6].tolist() == [StepType.FIRST] * 2
    assert types[11].tolist() == [StepType.LAST] * 2
    env.close()


def test_horizon_applies_to_module_class_envs():
    env = make("tests.test_gymnasium_timesteps:ScriptedEnv", kwargs={"lengths": (50,)}, horizon=4)
    steps = run(env, 5)
    assert steps[4].step_type[0] == StepType.LAST and steps[4].discount[0] == 1.0
    assert steps[5].step_type[0] == StepType.FIRST
    env.close()


def test_spaces_are_converted():
    env = make("Pendulum-v1")
    assert isinstance(env.action_space, Box) and env.action_space.shape == (1,)
    assert isinstance(env.observation_space, Box) and env.observation_space.shape == (3,)
    env.close()
    env = make("CartPole-v1")
    assert env.action_space == Discrete(2)
    env.close()


def test_per_env_seeding_is_reproducible_and_differs_between_envs():
    a, b = make("CartPole-v1", num_envs=3), make("CartPole-v1", num_envs=3)
    obs_a, obs_b = a.reset(seed=7).observation, b.reset(seed=7).observation
    np.testing.assert_array_equal(obs_a, obs_b)
    assert not np.array_equal(obs_a[0], obs_a[1])
    a.close(), b.close()


def test_async_vectorization_gives_the_same_timesteps_as_sync():
    sync, asynchronous = make("CartPole-v1", 2), make("CartPole-v1", 2, vectorization="async")
    try:
        s, a = sync.reset(seed=3), asynchronous.reset(seed=3)
        for i in range(30):
            np.testing.assert_allclose(s.observation, a.observation)
            assert s.step_type.tolist() == a.step_type.tolist()
            s, a = sync.step(np.array([i % 2, 1])), asynchronous.step(np.array([i % 2, 1]))
    finally:
        sync.close(), asynchronous.close()


def test_unknown_env_name_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'CartPole-v1'"):
        make("CartPol-v1")


def test_bad_env_kwargs_are_a_config_error():
    with pytest.raises(ConfigError, match=r"env\.kwargs"):
        make("CartPole-v1", kwargs={"no_such_argument": 1})


@pytest.mark.parametrize(
    ("name", "kwargs", "horizon"),
    [
        ("CartPole-v1", {}, None),
        ("Pendulum-v1", {}, 30),
        ("tests.test_gymnasium_timesteps:ScriptedEnv", {}, None),
    ],
)
def test_gymnasium_adapter_passes_the_vector_env_contract_check(name, kwargs, horizon):
    from rlgear.testing import check_vector_env

    counts = check_vector_env(make(name, num_envs=3, kwargs=kwargs, horizon=horizon), steps=400)
    assert counts["episodes_terminated"] + counts["episodes_truncated"] > 0


def test_contract_check_catches_an_env_that_skips_first():
    from rlgear.testing import ContractError, check_vector_env

    env = make("tests.test_gymnasium_timesteps:ScriptedEnv")
    original = env.step

    def broken_step(actions):
        ts = original(actions)
        ts.step_type[ts.step_type == StepType.FIRST] = StepType.MID  # forgets FIRST after LAST
        return ts

    env.step = broken_step
    with pytest.raises(ContractError, match="must be FIRST"):
        check_vector_env(env, steps=20)
