"""A tiny gymnasium env that reports facts in ``info``, for the ``episode.last_info`` tests.

Action 1 reaches the goal: the episode terminates with ``info = {"is_success": True,
"bonus": 7}``. Action 0 waits; after ``max_steps`` the episode is truncated with
``{"is_success": False}`` (no ``bonus`` key). Every other step reports ``{"step": t}``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class GoalEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, max_steps: int = 3):
        self.max_steps = max_steps
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(1, np.float32)
        if int(action) == 1:
            return obs, 1.0, True, False, {"is_success": True, "bonus": 7}
        if self.t >= self.max_steps:
            return obs, 0.0, False, True, {"is_success": False}
        return obs, 0.0, False, False, {"step": self.t}
