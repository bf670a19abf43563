"""gridworld: a pure-numpy vectorized env written against rlgear's VectorEnv contract (an env adapter plugin).

A ``size`` x ``size`` grid; every episode starts in the top-left cell and the
goal is the bottom-right one. Actions ``Discrete(4)``: 0 up, 1 right, 2 down,
3 left (walls stop the agent). The observation is the cell index,
``Discrete(size * size)`` (policies one-hot it). Each step costs 0.01;
reaching the goal pays 1 and terminates (LAST, discount 0). After
``max_steps`` steps, or the run's ``workers.horizon`` if smaller, the episode
is truncated (LAST, discount 1).

Every TimeStep carries ``info={"reached_goal": bool array}``: hooks read the
value at an episode's final step as ``episode.last_info["reached_goal"]``.

Registered with ``rlgear.envs = gridworld = my_gridworld:GridworldAdapter``; config::

    env: {adapter: gridworld, name: gridworld, kwargs: {size: 5, max_steps: 50}}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import EnvAdapter, VectorEnv
from rlgear.errors import ConfigError, did_you_mean
from rlgear.spaces import Discrete
from rlgear.timestep import StepType, TimeStep

MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # up, right, down, left as (row, column) deltas


class GridworldVectorEnv(VectorEnv):
    def __init__(self, num_envs: int, size: int, max_steps: int, horizon: int | None):
        self.num_envs = num_envs
        self.size = size
        self.time_limit = max_steps if horizon is None else min(max_steps, horizon)
        self.observation_space = Discrete(size * size)
        self.action_space = Discrete(4)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        self._cell = np.zeros((num_envs, 2), dtype=np.int64)  # (row, column) of each env's agent
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._prev_last = np.zeros(num_envs, dtype=bool)

    def _observe(self) -> np.ndarray:
        return self._cell[:, 0] * self.size + self._cell[:, 1]

    def reset(self, seed: int | None = None) -> TimeStep:
        # Deterministic dynamics: the seed has nothing to draw (an env with randomness seeds env i with seed + i).
        self._cell[:] = 0
        self._elapsed[:] = 0
        self._prev_last[:] = False
        n = self.num_envs
        return TimeStep(
            step_type=np.full(n, StepType.FIRST, dtype=np.int32),
            reward=np.zeros(n, dtype=np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=self._observe(),
            prev_action=np.zeros(n, dtype=np.int64),
            env_id=self._env_ids,
            info={"reached_goal": np.zeros(n, dtype=bool)},
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        actions = np.asarray(actions, dtype=np.int64)
        first = self._prev_last  # these envs ended last step: they start over and ignore their action
        moving = ~first
        self._cell[first] = 0
        self._elapsed[first] = 0
        moved = np.clip(self._cell + MOVES[actions], 0, self.size - 1)
        self._cell[moving] = moved[moving]
        self._elapsed[moving] += 1
        terminated = moving & (self._cell == self.size - 1).all(axis=1)
        truncated = moving & ~terminated & (self._elapsed >= self.time_limit)
        last = terminated | truncated
        self._prev_last = last
        return TimeStep(
            step_type=np.where(first, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID)).astype(
                np.int32
            ),
            reward=np.where(moving, terminated - 0.01, 0.0).astype(np.float32),
            discount=np.where(terminated, 0.0, 1.0).astype(np.float32),
            observation=self._observe(),  # at LAST: the final cell
            prev_action=np.where(first, 0, actions),
            env_id=self._env_ids,
            info={"reached_goal": terminated},
        )


class GridworldAdapter(EnvAdapter):
    description = "a size x size gridworld in numpy: walk to the far corner"
    default_env = "gridworld"  # what `rlgear plugins --check gridworld` builds

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
        if name != "gridworld":
            raise ConfigError(f"env.name: the gridworld adapter builds only 'gridworld', got '{name}'")
        options = {"size": 5, "max_steps": 50}
        for key, value in kwargs.items():
            if key not in options:
                raise ConfigError(f"env.kwargs.{key}: unknown gridworld option{did_you_mean(key, options)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ConfigError(f"env.kwargs.{key}: expected an integer >= 2, got {value!r}")
            options[key] = value
        return GridworldVectorEnv(num_envs, options["size"], options["max_steps"], horizon)
