"""A gymnasium env with a Dict observation and an action mask (docs/spaces.md).

A car arrives at a row of parking slots; some are taken. The action is the slot to park in;
taken slots are masked out (``observation["action_mask"]``), so a policy never picks one.
The slot nearest the entrance (the lowest free index) earns 1, any other free slot 0.1.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ParkingEnv(gym.Env):
    def __init__(self, slots: int = 5, cars: int = 10):
        self.slots, self.cars = slots, cars
        self.observation_space = gym.spaces.Dict(
            {
                "action_mask": gym.spaces.MultiBinary(slots),  # 1 = free: the action is allowed
                "arrival": gym.spaces.Box(0.0, 1.0, (1,), np.float32),  # the hour, as a fraction of the day
            }
        )
        self.action_space = gym.spaces.Discrete(slots)

    def _observe(self):
        free = (self.np_random.random(self.slots) < 0.5).astype(np.int8)
        free[self.np_random.integers(self.slots)] = 1  # always at least one free slot
        self.free = free
        return {"action_mask": free, "arrival": self.np_random.random(1).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.car = 0
        return self._observe(), {}

    def step(self, action):
        assert self.free[action], "a masked (taken) slot was chosen"
        reward = 1.0 if action == np.flatnonzero(self.free)[0] else 0.1
        self.car += 1
        return self._observe(), reward, False, self.car >= self.cars, {}
