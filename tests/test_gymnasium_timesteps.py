"""The gymnasium adapter emits TimeSteps with ALF semantics, on sync and native vector envs.

The scripted env exists twice: ``ScriptedEnv`` (one env, vectorized by gymnasium's
SyncVectorEnv) and ``ScriptedVectorEnv`` (the same script for all envs at once,
registered as the vector entry point of ``SCRIPTED_ID``), so each TimeStep rule is
checked on both paths (``vectorization`` ``sync`` and ``native``).
"""

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


class ScriptedVectorEnv(gym.vector.VectorEnv):
    """``ScriptedEnv``'s script in every env at once, resetting in next-step mode like CartPoleVectorEnv.

    ``max_episode_steps`` (the run's horizon) truncates; ``reward`` is the reward of every step.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(
        self, num_envs=1, lengths=(3, 2), terminated=(True, False), max_episode_steps=None, reward=1.0
    ):
        self.num_envs, self.lengths, self.terminated = num_envs, lengths, terminated
        self.max_episode_steps, self.reward = max_episode_steps, reward
        self.single_observation_space = ScriptedEnv.observation_space
        self.single_action_space = ScriptedEnv.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode = np.zeros(self.num_envs, dtype=np.int64)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        self.prev_done = np.zeros(self.num_envs, dtype=bool)
        return self._obs(), {}

    def _obs(self):
        return np.stack([self.episode, self.t], axis=1).astype(np.float32)

    def step(self, actions):
        self.t += 1
        k = self.episode % len(self.lengths)
        ended = self.t >= np.asarray(self.lengths)[k]
        terminated = ended & np.asarray(self.terminated)[k]
        truncated = ended & ~terminated
        if self.max_episode_steps is not None:
            truncated |= self.t >= self.max_episode_steps
        reward = np.full(self.num_envs, self.reward, dtype=np.float32)
        restart = self.prev_done  # next-step autoreset: the action sent at LAST is ignored
        self.episode[restart] += 1
        self.t[restart] = 0
        reward[restart] = 0.0
        terminated[restart] = truncated[restart] = False
        self.prev_done = terminated | truncated
        return self._obs(), reward, terminated, truncated, {}


SCRIPTED_ID = "rlgear-test/Scripted-v0"
gym.register(SCRIPTED_ID, entry_point=ScriptedEnv, vector_entry_point=ScriptedVectorEnv)

#: The scripted env on each path: a module:Class on sync vectors, the registered id on its own vector env.
SCRIPTED = pytest.mark.parametrize(
    ("scripted", "vectorization"),
    [("tests.test_gymnasium_timesteps:ScriptedEnv", "sync"), (SCRIPTED_ID, "native")],
)
BOTH = pytest.mark.parametrize("vectorization", ["sync", "native"])


def make(name, num_envs=1, **kw):
    return GymnasiumAdapter().make(name, num_envs, kwargs=kw.pop("kwargs", {}), **kw)


def run(env, steps, action=1):
    out = [env.reset(seed=0)]
    for _ in range(steps):
        out.append(env.step(np.full(env.num_envs, action)))
    return out


@SCRIPTED
def test_terminated_maps_to_last_with_discount_zero_and_truncated_to_discount_one(scripted, vectorization):
    env = make(scripted, vectorization=vectorization)
    steps = run(env, 8)
    types = [int(ts.step_type[0]) for ts in steps]
    discounts = [float(ts.discount[0]) for ts in steps]
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    # episode 0: 3 steps, terminated; episode 1: 2 steps, truncated; episode 2 starts again
    assert types == [F, M, M, L, F, M, L, F, M]
    assert discounts == [1, 1, 1, 0, 1, 1, 1, 1, 1]
    env.close()


@SCRIPTED
def test_step_after_last_is_first_with_zero_reward_and_zero_prev_action(scripted, vectorization):
    env = make(scripted, vectorization=vectorization)
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


@SCRIPTED
def test_last_step_carries_the_final_observation(scripted, vectorization):
    env = make(scripted, vectorization=vectorization)
    steps = run(env, 3)
    assert steps[3].step_type[0] == StepType.LAST
    np.testing.assert_array_equal(steps[3].observation[0], [0, 3])
    env.close()


@BOTH
def test_horizon_truncates_regardless_of_the_envs_own_limit(vectorization):
    env = make("CartPole-v1", num_envs=2, horizon=5, vectorization=vectorization)
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


@SCRIPTED
def test_horizon_applies_to_module_class_envs(scripted, vectorization):
    env = make(scripted, kwargs={"lengths": (50,)}, horizon=4, vectorization=vectorization)
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


@BOTH
def test_per_env_seeding_is_reproducible_and_differs_between_envs(vectorization):
    a, b = (make("CartPole-v1", num_envs=3, vectorization=vectorization) for _ in range(2))
    obs_a, obs_b = a.reset(seed=7).observation, b.reset(seed=7).observation
    np.testing.assert_array_equal(obs_a, obs_b)
    assert not np.array_equal(obs_a[0], obs_a[1])
    for i in range(60):  # the episodes that follow (autoresets included) repeat too
        actions = np.array([i % 2, 1, (i // 3) % 2])
        ts_a, ts_b = a.step(actions), b.step(actions)
        np.testing.assert_array_equal(ts_a.observation, ts_b.observation)
        assert ts_a.step_type.tolist() == ts_b.step_type.tolist()
    assert not np.array_equal(a.reset(seed=8).observation, b.reset(seed=7).observation)  # another worker
    a.close(), b.close()


def test_async_vectorization_gives_the_same_timesteps_as_sync():
    sync = make("CartPole-v1", 2, vectorization="sync")
    asynchronous = make("CartPole-v1", 2, vectorization="async")
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


@BOTH
def test_bad_env_kwargs_are_a_config_error(vectorization):
    with pytest.raises(ConfigError, match=r"env\.kwargs: CartPole-v1.* does not accept"):
        make("CartPole-v1", kwargs={"no_such_argument": 1}, vectorization=vectorization)


@pytest.mark.parametrize(
    ("name", "kwargs", "horizon", "vectorization"),
    [
        ("CartPole-v1", {}, None, "sync"),
        ("CartPole-v1", {}, None, "native"),
        ("CartPole-v1", {}, 15, "native"),
        ("Pendulum-v1", {}, 30, "sync"),
        ("tests.test_gymnasium_timesteps:ScriptedEnv", {}, None, "sync"),
        (SCRIPTED_ID, {"lengths": (3, 4, 2), "terminated": (True, False, True)}, None, "native"),
    ],
)
def test_gymnasium_adapter_passes_the_vector_env_contract_check(name, kwargs, horizon, vectorization):
    from rlgear.testing import check_vector_env

    env = make(name, num_envs=3, kwargs=kwargs, horizon=horizon, vectorization=vectorization)
    counts = check_vector_env(env, steps=400)
    assert counts["episodes_terminated"] + counts["episodes_truncated"] > 0


@SCRIPTED
def test_contract_check_catches_an_env_that_skips_first(scripted, vectorization):
    from rlgear.testing import ContractError, check_vector_env

    env = make(scripted, vectorization=vectorization)
    original = env.step

    def broken_step(actions):
        ts = original(actions)
        ts.step_type[ts.step_type == StepType.FIRST] = StepType.MID  # forgets FIRST after LAST
        return ts

    env.step = broken_step
    with pytest.raises(ContractError, match="must be FIRST"):
        check_vector_env(env, steps=20)
