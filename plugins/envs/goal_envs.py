"""Two small goal-conditioned envs for hindsight experience replay (``training.her_strategy``).

Both follow gymnasium-robotics' GoalEnv convention: a Dict observation with ``observation``,
``achieved_goal`` and ``desired_goal``, and ``compute_reward(achieved_goal, desired_goal, info)``
/ ``compute_terminated(...)`` vectorized over leading rows, so HER can recompute the reward and
termination of a transition under another goal. Why they ship in the package: gymnasium-robotics
(MuJoCo) is heavy, and a config must be able to name a goal env from any folder; these need
numpy only. Registered as gymnasium ids ``rlgear/BitFlipping-v0`` and ``rlgear/PointReach-v0``
(through the ``gymnasium.envs`` entry point ``rlgear``, which the gymnasium adapter loads), and
reachable as ``rlgear.plugins.envs.goal_envs:BitFlippingEnv`` / ``:PointReachEnv``.

* :class:`BitFlippingEnv` - Andrychowicz et al. 2017's n-bit flipping (section 3.1): the state
  and the goal are random n-bit strings, action ``i`` flips bit ``i``, reward -1 until the state
  equals the goal (then 0 and the episode terminates), n steps at most. With n >= ~10 random
  exploration practically never sees a reward of 0 (probability ~2**-n per episode), so DQN
  learns nothing without HER.
* :class:`PointReachEnv` - a point in the plane moved by 2-D continuous actions towards a goal:
  reward -1 while farther than ``distance_threshold`` from the goal, 0 (and termination) within
  it. The continuous-action analogue for SAC, TD3 and DDPG.

``info["is_success"]`` says whether the goal was reached, as gymnasium-robotics reports it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: The gymnasium ids :func:`register_envs` registers (namespace ``rlgear``).
BIT_FLIPPING_ID = "rlgear/BitFlipping-v0"
POINT_REACH_ID = "rlgear/PointReach-v0"


class BitFlippingEnv(gym.Env):
    """n-bit flipping (Andrychowicz et al. 2017, section 3.1); ``n_bits`` steps per episode at most.

    Observations are float32 0/1 vectors (``observation`` and ``achieved_goal`` are the state).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_bits: int = 10, max_steps: int | None = None):
        if n_bits < 1:
            raise ValueError(f"n_bits must be at least 1, got {n_bits}")
        self.n_bits = int(n_bits)
        self.max_steps = self.n_bits if max_steps is None else int(max_steps)
        bits = gym.spaces.Box(0.0, 1.0, (self.n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, np.float32)
        self._goal = np.zeros(self.n_bits, np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state
        while np.array_equal(self._goal, self._state):  # a goal reached at reset is no task
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action: Any):
        self._state = self._state.copy()
        self._state[int(action)] = 1.0 - self._state[int(action)]
        self._steps += 1
        reward = float(self.compute_reward(self._state, self._goal, {}))
        success = reward == 0.0
        truncated = not success and self._steps >= self.max_steps
        return self._obs(), reward, success, truncated, {"is_success": success}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """0 where the achieved bits equal the desired ones, else -1 (over any leading rows)."""
        equal = np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)
        return np.where(equal, 0.0, -1.0).astype(np.float32)

    def compute_terminated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """An episode ends when the goal is reached."""
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)


class PointReachEnv(gym.Env):
    """A point in ``[-1, 1]^2`` moved by ``step_size * action`` (actions in ``[-1, 1]^2``) to a goal.

    Start and goal are uniform in the square (at least ``2 * distance_threshold`` apart);
    ``observation`` is the position and ``achieved_goal`` the same position.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, max_steps: int = 20, step_size: float = 0.2, distance_threshold: float = 0.1):
        self.max_steps = int(max_steps)
        self.step_size = float(step_size)
        self.distance_threshold = float(distance_threshold)
        square = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": square, "achieved_goal": square, "desired_goal": square}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._position = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._position.copy(),
            "achieved_goal": self._position.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._goal = self._position
        while np.linalg.norm(self._goal - self._position) < 2 * self.distance_threshold:
            self._goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action: Any):
        move = np.clip(np.asarray(action, np.float32), -1.0, 1.0) * self.step_size
        self._position = np.clip(self._position + move, -1.0, 1.0).astype(np.float32)
        self._steps += 1
        reward = float(self.compute_reward(self._position, self._goal, {}))
        success = reward == 0.0
        truncated = not success and self._steps >= self.max_steps
        return self._obs(), reward, success, truncated, {"is_success": success}

    def _reached(self, achieved_goal: Any, desired_goal: Any) -> np.ndarray:
        distance = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return distance < self.distance_threshold

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """0 within ``distance_threshold`` of the goal, else -1 (gymnasium-robotics' sparse reward)."""
        return np.where(self._reached(achieved_goal, desired_goal), 0.0, -1.0).astype(np.float32)

    def compute_terminated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """An episode ends when the goal is reached."""
        return self._reached(achieved_goal, desired_goal)


def register_envs() -> None:
    """Register ``rlgear/BitFlipping-v0`` and ``rlgear/PointReach-v0`` (the ``gymnasium.envs`` entry point)."""
    if BIT_FLIPPING_ID not in gym.registry:
        gym.register(BIT_FLIPPING_ID, entry_point=BitFlippingEnv)
    if POINT_REACH_ID not in gym.registry:
        gym.register(POINT_REACH_ID, entry_point=PointReachEnv)
