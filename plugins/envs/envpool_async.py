"""envpool's asynchronous mode: the envs step while the policy acts on the ones that came back.

With ``env.kwargs.batch_size`` below ``workers.num_envs_per_worker`` the envpool adapter builds
its pool in envpool's async mode (``send``/``recv``): each step sends the actions of the
``batch_size`` envs the policy just acted on and receives the ``batch_size`` envs that finish
stepping first, so the other envs keep stepping in envpool's C++ threads while the policy acts.
Where env stepping costs about as much as acting (Atari), that overlaps the two.

The pool is shown to the sampler as a one-agent :class:`~rlgear.env.MultiAgentVectorEnv` whose
``active`` mask and :attr:`~rlgear.env.MultiAgentTimeStep.stepped` are the received envs: the
sampler acts on those rows only, records each env slot's own steps and compacts them per slot at
the fragment cut, as it does for agents that wait their turn. The run stays single-agent
(:attr:`~rlgear.env.MultiAgentVectorEnv.one_agent`: one policy, the env's spaces, single-agent
results). An env slot's stream follows the single-agent ALF table on its own: envpool resets in
next-step mode, so the env's next receipt after its LAST is its FIRST (reward 0, the action sent
at the LAST ignored).
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.errors import ConfigError
from rlgear.sampling.agents import OneAgentEnv
from rlgear.spaces import Discrete, MultiDiscrete, Space
from rlgear.timestep import StepType, TimeStep

from .gymnasium_env import convert_space

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class EnvPoolAsyncEnv(MultiAgentVectorEnv):
    """An envpool pool in async mode (``batch_size < num_envs``) as a one-agent env stepping
    ``batch_size`` of its ``num_envs`` slots per call.

    ``build(seed)`` makes the pool (``envpool.make_gymnasium(..., batch_size=...)``); envpool takes
    its seed when the pool is built, so a seeded reset builds it again, as the sync adapter does.
    """

    one_agent = True
    idle_slots = True  # a slot whose env did not come back has no agent acting at that call

    def __init__(self, name: str, num_envs: int, batch_size: int, build: Any, seed: int = 0):
        self.name = name
        self.num_envs = num_envs
        self.steps_per_call = batch_size
        self._build = build
        self.pool = build(seed)
        self.possible_agents = (OneAgentEnv.AGENT,)
        with warnings.catch_warnings():  # envpool's float64 bounds: "precision lowered to float32"
            warnings.simplefilter("ignore")
            pool_space = self.pool.observation_space
            #: envpool's frame stacks (Atari) are channels first; rlgear's conv trunk reads [H, W, C]
            self.channels_last = len(pool_space.shape) == 3 and "stack_num" in self.pool.config
            if self.channels_last:
                pool_space = gym.spaces.Box(
                    np.moveaxis(pool_space.low, 0, -1),
                    np.moveaxis(pool_space.high, 0, -1),
                    dtype=pool_space.dtype,
                )
            self.observation_space: Space = convert_space(pool_space, "observation", name)
            self.action_space: Space = convert_space(self.pool.action_space, "action", name)
        self.observation_spaces = {OneAgentEnv.AGENT: self.observation_space}
        self.action_spaces = {OneAgentEnv.AGENT: self.action_space}
        space = self.action_space
        action_dtype = np.int64 if isinstance(space, Discrete | MultiDiscrete) else np.float32
        self._actions = np.zeros((num_envs, *space.shape), action_dtype)  # the last sent, per slot
        self._observations: np.ndarray | None = None
        self._ended = np.zeros(num_envs, dtype=bool)  # its last receipt was a LAST: the next is its FIRST
        self._pending = np.zeros(0, dtype=np.int64)  # the slots the policy acts on now
        self._env_ids = np.arange(num_envs, dtype=np.int32)

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        """Every env's first observation: ``num_envs / batch_size`` receipts after an async reset."""
        if seed is not None:
            self.pool.close()
            self.pool = self._build(seed)
        self.pool.async_reset()
        n = self.num_envs
        self._ended[:] = False
        self._actions[:] = 0
        seen = np.zeros(n, dtype=bool)
        while not seen.all():
            obs, _, _, _, info = self.pool.recv()
            ids = np.asarray(info["env_id"], dtype=np.int64)
            self._write_observations(ids, obs)
            seen[ids] = True
        self._pending = np.arange(n)
        step_types = np.full(n, _FIRST, dtype=np.int32)
        return self._timestep(step_types, np.zeros(n, np.float32), np.ones(n, np.float32), seen)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        """Send the actions of the slots acted on, then receive the ``batch_size`` envs done first."""
        pending = self._pending
        sent = np.asarray(actions[OneAgentEnv.AGENT])[pending]
        self._actions[pending] = sent
        self.pool.send(sent, pending.astype(np.int32))
        obs, reward, terminated, truncated, info = self.pool.recv()
        ids = np.asarray(info["env_id"], dtype=np.int64)
        self._write_observations(ids, obs)
        first = self._ended[ids]
        ended = (np.asarray(terminated) | np.asarray(truncated)) & ~first
        n = self.num_envs
        step_types = np.full(n, _LAST, dtype=np.int32)
        step_types[ids] = np.where(first, _FIRST, np.where(ended, _LAST, _MID))
        rewards = np.zeros(n, np.float32)
        rewards[ids] = np.where(first, 0.0, reward)
        discounts = np.zeros(n, np.float32)
        discounts[ids] = np.where(ended & np.asarray(terminated), 0.0, 1.0)
        self._ended[ids] = ended
        self._actions[ids[first]] = 0  # an episode's FIRST has no previous action
        stepped = np.zeros(n, dtype=bool)
        stepped[ids] = True
        self._pending = ids
        return self._timestep(step_types, rewards, discounts, stepped)

    def _write_observations(self, ids: np.ndarray, obs: np.ndarray) -> None:
        obs = np.moveaxis(obs, 1, -1) if self.channels_last else obs
        if self._observations is None:
            self._observations = np.zeros((self.num_envs, *obs.shape[1:]), obs.dtype)
        self._observations[ids] = obs

    def _timestep(
        self, step_types: np.ndarray, rewards: np.ndarray, discounts: np.ndarray, stepped: np.ndarray
    ) -> MultiAgentTimeStep:
        assert self._observations is not None
        observations = self._observations.copy()
        observations[~stepped] = 0  # a row whose env did not step carries nothing
        prev_actions = np.where(
            stepped.reshape(-1, *([1] * (self._actions.ndim - 1))), self._actions, 0
        ).astype(self._actions.dtype)
        ts = TimeStep(step_types, rewards, discounts, observations, prev_actions, self._env_ids)
        episode_end = stepped & (step_types == _LAST)
        return MultiAgentTimeStep(
            {OneAgentEnv.AGENT: ts}, {OneAgentEnv.AGENT: stepped}, episode_end, stepped=stepped
        )

    def close(self) -> None:
        self.pool.close()


def check_batch_size(batch_size: Any, num_envs: int) -> int | None:
    """``env.kwargs.batch_size`` as the async batch (None: sync mode, every env steps at once)."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= num_envs:
        raise ConfigError(
            f"env.kwargs.batch_size: expected an integer from 1 to workers.num_envs_per_worker ({num_envs}): "
            f"the envs the policy acts on per step in envpool's async mode; got {batch_size!r}"
        )
    if num_envs % batch_size:
        raise ConfigError(
            f"env.kwargs.batch_size: workers.num_envs_per_worker ({num_envs}) must be a multiple of it "
            f"(got {batch_size}): the async pool's first observations come back batch_size at a time"
        )
    return None if batch_size == num_envs else batch_size
