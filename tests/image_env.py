"""A tiny uint8 image env for the conv-net tests: find the lit quadrant.

Each step shows a 12x12x3 uint8 image, black but for one bright 6x6 quadrant
(``[H, W, C]``, values 0 or 255). Action ``k`` (0-3) names a quadrant; naming
the lit one pays 1. Episodes last ``max_steps`` steps (truncated). Random play
scores ``max_steps / 4`` on average; the task needs the image's layout, so a
net that scrambled the pixel order between backends would act differently.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class QuadrantEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, max_steps: int = 8):
        self.max_steps = max_steps
        self.t = 0
        self.lit = 0

    def _observe(self) -> np.ndarray:
        self.lit = int(self.np_random.integers(4))
        image = np.zeros((12, 12, 3), np.uint8)
        row, col = divmod(self.lit, 2)
        image[6 * row : 6 * row + 6, 6 * col : 6 * col + 6, self.lit % 3] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        self.t += 1
        reward = float(int(action) == self.lit)
        return self._observe(), reward, False, self.t >= self.max_steps, {}
