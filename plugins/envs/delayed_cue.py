"""DelayedCue: recall a cue shown at the first step, many steps later; a memory task.

The first observation shows one of ``num_cues`` cues (one-hot). The next ``delay - 1`` to
``delay + delay_jitter - 1`` observations show no cue, only noise; then a query step (its
flag set) asks for the cue: the action there scores +1 if it names the cue, -1 otherwise,
and ends the episode. Actions before the query do nothing. So a memoryless policy scores
``(2 / num_cues) - 1`` on average (0 for two cues), and a policy that remembers the first step
for ``delay`` steps scores 1. The jittered delay keeps the query's distance from the cue from
being a constant a policy could count to without looking back. It ships in the package, as
StatelessCartPole does, so a config can name it
(``env.name: rlgear.plugins.envs.delayed_cue:DelayedCue``).

Observation ``[cue one-hot (num_cues), query flag, noise]``, Box in [-1, 1]; actions
Discrete(num_cues).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class DelayedCue(gym.Env):
    """The cue at step 0, the query at step ``delay`` .. ``delay + delay_jitter`` (uniform)."""

    def __init__(self, delay: int = 20, delay_jitter: int = 4, num_cues: int = 2):
        if delay < 1 or delay_jitter < 0 or num_cues < 2:
            raise ValueError(
                f"DelayedCue: expected delay >= 1, delay_jitter >= 0, num_cues >= 2; "
                f"got {delay}, {delay_jitter}, {num_cues}"
            )
        self.delay, self.delay_jitter, self.num_cues = delay, delay_jitter, num_cues
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (num_cues + 2,), np.float32)
        self.action_space = gym.spaces.Discrete(num_cues)
        self.cue = self.query_at = self.t = 0

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 2, np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        obs[self.num_cues] = float(self.t == self.query_at)
        obs[-1] = self.np_random.uniform(-1.0, 1.0)
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue = int(self.np_random.integers(self.num_cues))
        self.query_at = self.delay + int(self.np_random.integers(self.delay_jitter + 1))
        self.t = 0
        return self._observation(), {}

    def step(self, action):
        if self.t == self.query_at:
            reward = 1.0 if int(action) == self.cue else -1.0
            return self._observation(), reward, True, False, {}
        self.t += 1
        return self._observation(), 0.0, False, False, {}
