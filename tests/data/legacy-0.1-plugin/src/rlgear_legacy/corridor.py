"""The ``corridor`` env adapter: a pure-numpy vectorized env, no gymnasium.

A 1-D corridor of ``length`` cells numbered ``0 .. length-1``. Each episode
starts in a random cell left of the goal (drawn from the env's own seeded
numpy Generator); the goal is the right-most cell. Actions are Discrete(2):
0 moves left (the left wall stops the agent at cell 0), 1 moves right. The
observation is a one-hot float32 vector of the agent's cell.

Rewards: every step costs 0.01; the step that reaches the goal also pays 1.
The episode then ends with LAST and discount 0 (a true terminal). After
``max_steps`` steps, or after the run's ``horizon`` steps if that is smaller,
it ends with LAST and discount 1 (a time limit: values bootstrap through it).

Config::

    env:
      adapter: corridor
      name: corridor
      kwargs: {length: 10, max_steps: 100}

This module shows the :class:`rlgear.env.VectorEnv` contract implemented
directly, step types and all. An env that already speaks gymnasium does not
need this: the built-in ``gymnasium`` adapter takes any ``module:Class``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import EnvAdapter, VectorEnv
from rlgear.errors import ConfigError, did_you_mean
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

LEFT, RIGHT = 0, 1
STEP_COST = 0.01
GOAL_REWARD = 1.0


class CorridorVectorEnv(VectorEnv):
    """``num_envs`` corridors stepped together, all state in numpy arrays of shape ``[num_envs]``.

    Args:
        num_envs: corridors in the batch.
        length: cells per corridor (at least 2); the goal is cell ``length - 1``.
        max_steps: the corridor's own time limit (truncation).
        horizon: the run's ``workers.horizon`` (truncation), or None.
    """

    def __init__(self, num_envs: int, length: int = 10, max_steps: int = 100, horizon: int | None = None):
        self.num_envs = num_envs
        self.length = length
        # The earlier of the two time limits wins; both truncate (discount 1).
        self.time_limit = max_steps if horizon is None else min(max_steps, horizon)
        self.observation_space = Box(np.zeros(length), np.ones(length), np.float32)
        self.action_space = Discrete(2)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        # One Generator per env, so env i's episodes depend only on its own seed (seed + i).
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._position = np.zeros(num_envs, dtype=np.int64)
        self._elapsed = np.zeros(num_envs, dtype=np.int64)  # steps taken in the current episode
        self._prev_last = np.zeros(num_envs, dtype=bool)  # the previous TimeStep was LAST

    def _start(self, envs: np.ndarray) -> None:
        """Begin a new episode in each env of ``envs`` (indices)."""
        for i in envs:
            self._position[i] = self._rngs[i].integers(0, self.length - 1)  # any cell but the goal
        self._elapsed[envs] = 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, self.length), dtype=np.float32)
        obs[np.arange(self.num_envs), self._position] = 1.0
        return obs

    def reset(self, seed: int | None = None) -> TimeStep:
        if seed is not None:
            self._rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        self._start(np.arange(self.num_envs))
        self._prev_last[:] = False
        n = self.num_envs
        return TimeStep(
            step_type=np.full(n, StepType.FIRST, dtype=np.int32),
            reward=np.zeros(n, dtype=np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=self._observe(),
            prev_action=np.zeros(n, dtype=np.int64),
            env_id=self._env_ids,
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"corridor: expected actions of shape ({self.num_envs},), got {actions.shape}")
        if not np.isin(actions, (LEFT, RIGHT)).all():
            raise ValueError(f"corridor: actions must be 0 (left) or 1 (right), got {actions}")
        actions = actions.astype(np.int64)
        # Envs whose previous step was LAST start a new episode and ignore their action
        # (next-step autoreset, as the contract in rlgear.env says).
        first = self._prev_last
        moving = ~first
        self._start(np.flatnonzero(first))

        step = np.where(actions == RIGHT, 1, -1)
        self._position[moving] = np.clip(self._position[moving] + step[moving], 0, self.length - 1)
        self._elapsed[moving] += 1
        terminated = moving & (self._position == self.length - 1)
        truncated = moving & ~terminated & (self._elapsed >= self.time_limit)
        last = terminated | truncated

        reward = np.where(moving, -STEP_COST + GOAL_REWARD * terminated, 0.0).astype(np.float32)
        step_type = np.where(first, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID))
        self._prev_last = last
        return TimeStep(
            step_type=step_type.astype(np.int32),
            reward=reward,
            discount=np.where(terminated, 0.0, 1.0).astype(np.float32),
            observation=self._observe(),  # at LAST: the final observation
            prev_action=np.where(first, 0, actions),
            env_id=self._env_ids,
        )


class CorridorAdapter(EnvAdapter):
    """What the ``corridor`` entry point resolves to; rlgear instantiates it with no arguments."""

    description = "a 1-D corridor (pure numpy, example plugin): walk right to the goal"

    #: The env names this adapter builds (the value of ``env.name``).
    names = ("corridor",)
    #: Accepted ``env.kwargs`` and their defaults.
    defaults = {"length": 10, "max_steps": 100}

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> VectorEnv:
        # Errors a user can cause are ConfigErrors that name the key: rlgear prints them
        # as one line, without a traceback. `vectorization` is irrelevant here: every env
        # lives in one numpy array, stepped in this process either way.
        if name not in self.names:
            raise ConfigError(
                f"env.name: the corridor adapter has no env '{name}'{did_you_mean(name, self.names)} "
                f"(available: {', '.join(self.names)})"
            )
        for key in kwargs:
            if key not in self.defaults:
                raise ConfigError(
                    f"env.kwargs.{key}: unknown corridor option{did_you_mean(key, self.defaults)} "
                    f"(options: {', '.join(self.defaults)})"
                )
        options = {**self.defaults, **kwargs}
        for key, minimum in (("length", 2), ("max_steps", 1)):
            value = options[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"env.kwargs.{key}: expected an integer >= {minimum}, got {value!r}")
        return CorridorVectorEnv(num_envs, options["length"], options["max_steps"], horizon)
