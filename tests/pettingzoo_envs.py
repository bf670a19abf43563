"""A small PettingZoo ParallelEnv for the adapter's tests: agents that join late and finish early.

``RelayParallelEnv`` has three agents, each acting with ``Discrete(3)``:

* ``early`` is there from the reset to the end;
* ``late`` joins at step ``join_at`` (PettingZoo gives it a reward of 5 on arrival, which the
  adapter must drop: an agent's FIRST has reward 0);
* ``quitter`` is there from the reset and is terminated at step ``quit_at``;
* at step ``episode_length`` every agent left is truncated (the env's own time limit).

Each step, an agent's reward is the action it sent, plus 10 for ``early`` when it sits a step
out (``rest_at``: it is live but gets no observation, so the adapter must add that reward to its
next step's). Observations are ``[step, offset]`` where ``offset`` is drawn from the seeded
generator at reset (seeding is visible). With ``mask_in_info`` each agent's info holds an
``action_mask`` forbidding action 2 (the form the adapter moves into a Dict observation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("early", "late", "quitter")


class RelayParallelEnv(ParallelEnv):
    metadata = {"name": "relay_v0", "render_modes": []}

    def __init__(
        self,
        episode_length: int = 6,
        join_at: int = 2,
        quit_at: int = 3,
        rest_at: int | None = None,
        mask_in_info: bool = False,
    ) -> None:
        self.possible_agents = list(AGENTS)
        self.episode_length = episode_length
        self.join_at = join_at
        self.quit_at = quit_at
        self.rest_at = rest_at
        self.mask_in_info = mask_in_info
        self._observation_space = spaces.Box(0.0, 100.0, (2,), np.float32)
        self._action_space = spaces.Discrete(3)
        self._rng = np.random.default_rng()
        self.agents: list[str] = []
        self.t = 0
        self.offset = 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def _observe(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.offset], dtype=np.float32)

    def _info(self, agent: str) -> dict[str, Any]:
        return {"action_mask": np.array([1, 1, 0], dtype=np.int8)} if self.mask_in_info else {}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.offset = float(self._rng.uniform(0.0, 1.0))
        self.agents = ["early", "quitter"]
        return {a: self._observe(a) for a in self.agents}, {a: self._info(a) for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(actions.get(a, 0)) for a in self.agents}
        terminations = {a: a == "quitter" and self.t >= self.quit_at for a in self.agents}
        truncations = {a: self.t >= self.episode_length for a in self.agents}
        if self.t == self.join_at and self.t < self.episode_length:
            self.agents.append("late")
            rewards["late"] = 5.0
            terminations["late"] = truncations["late"] = False
        resting = self.t == self.rest_at and "early" in self.agents
        if resting:
            rewards["early"] += 10.0
        observations = {a: self._observe(a) for a in self.agents if not (resting and a == "early")}
        infos = {a: self._info(a) for a in observations}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos
