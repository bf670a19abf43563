"""A Dict-observation env whose reward needs both an image and a vector: the conv-net input layout tests.

Each step shows ``{"image": 12x12x3 uint8, "shift": Box(-1, 1, (1,))}``. The
image is black but for one bright 6x6 quadrant ``lit`` (0-3, as in
``tests.image_env.QuadrantEnv``); ``shift`` is -1 or +1. The paying action is
``(lit + 2) % 4`` when ``shift`` is +1 and ``lit`` otherwise: naming it pays 1.
Episodes last ``max_steps`` steps (truncated).

Why both parts matter: a policy that sees only the image knows ``lit`` but not
which of two actions pays, so at best it earns ``max_steps / 2``; one that sees
only the shift earns ``max_steps / 4``, as random play does. For the learning
test's control runs (same spaces): ``blind=True`` zeroes the image,
``hide_shift=True`` shows 0 as the shift.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class DictImageEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8),
            "shift": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
        }
    )
    action_space = gym.spaces.Discrete(4)

    def __init__(self, max_steps: int = 8, blind: bool = False, hide_shift: bool = False):
        self.max_steps = max_steps
        self.blind = blind
        self.hide_shift = hide_shift
        self.t = 0
        self.target = 0

    def _observe(self) -> dict[str, np.ndarray]:
        lit = int(self.np_random.integers(4))
        shift = int(self.np_random.integers(2))
        self.target = (lit + 2 * shift) % 4
        image = np.zeros((12, 12, 3), np.uint8)
        if not self.blind:
            row, col = divmod(lit, 2)
            image[6 * row : 6 * row + 6, 6 * col : 6 * col + 6, lit % 3] = 255
        shown = 0.0 if self.hide_shift else 2.0 * shift - 1.0
        return {"image": image, "shift": np.array([shown], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        self.t += 1
        reward = float(int(action) == self.target)
        return self._observe(), reward, False, self.t >= self.max_steps, {}
