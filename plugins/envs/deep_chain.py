"""DeepChain (``rlgear/DeepChain-v0``): a hard-exploration env, for exploration plugins and their tests.

A chain of ``length`` steps. At each depth one of the two actions goes one step deeper, the other
drops the agent into a "fell off" state it stays in; which action is right at each depth is a fixed
random choice drawn from ``layout_seed`` (so "always action 1" is not the answer). Every episode
lasts exactly ``length`` steps and only the one that never fell pays 1, at its last step. The
observation is a one-hot vector of ``length + 2``: the depth ``0 .. length`` (the end is
``length``), or the last entry once fallen.

A uniform random policy reaches the end with probability ``2 ** -length`` (about one episode in a
million for the default 20), and no reward reaches an agent before that: dithering exploration
(epsilon-greedy, a policy's entropy) does not solve it, a novelty bonus does, since every new depth
is a new observation. It is the combination lock of Osband et al.'s "deep sea" (bsuite), without
the action cost, and like deep sea it has a fixed horizon: an earlier version ended the episode at
a wrong step, and that end alone told a bootstrapping learner which action was wrong (a terminal
target of exactly 0 against an over-estimated bootstrap), so plain DQN walked the chain without
ever seeing the reward in 3 of 5 seeds (bench/exploration.py, 40k env steps).

Registered through the ``gymnasium.envs`` entry point ``rlgear`` (as MinAtar registers its ids), so
``env.name: rlgear/DeepChain-v0`` works with ``env.kwargs: {length: 30, layout_seed: 3}``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "rlgear/DeepChain-v0"


class DeepChain(gym.Env):
    """The chain; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 20, layout_seed: int = 0):
        if int(length) != length or length < 1:
            raise ValueError(f"DeepChain length must be a positive integer, got {length!r}")
        self.length = int(length)
        #: the right action at each depth, fixed by layout_seed (not by reset's seed)
        self.correct = np.random.default_rng(layout_seed).integers(0, 2, size=self.length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.length + 2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.depth = 0
        self.steps = 0
        self.fell = False

    def _obs(self, index: int) -> np.ndarray:
        obs = np.zeros(self.length + 2, np.float32)
        obs[index] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.depth = 0
        self.steps = 0
        self.fell = False
        return self._obs(0), {}

    def step(self, action: Any):
        self.steps += 1
        if not self.fell:
            if int(action) == self.correct[self.depth]:
                self.depth += 1
            else:
                self.fell = True
        done = self.steps == self.length  # a fixed horizon: falling off ends nothing early
        reward = float(done and not self.fell)
        return (
            self._obs(self.length + 1 if self.fell else self.depth),
            reward,
            done,
            False,
            {"depth": self.depth},
        )


def register_envs() -> None:
    """Register ``rlgear/DeepChain-v0`` (the ``gymnasium.envs`` entry point ``rlgear``)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=DeepChain)
