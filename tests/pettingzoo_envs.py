"""Small PettingZoo envs for the adapter's tests: agents that join late, finish early, take turns.

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

``TurnsAECEnv`` is a turn-based (AEC) env where rewards reach an agent during the other's turn:
see its docstring.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv

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


class TurnsAECEnv(AECEnv):
    """Agents ``a`` and ``b`` take turns, ``a`` first. A move with action ``k`` gives the mover ``k``
    and the other agent 10. ``b`` is terminated by its ``b_moves``-th move, and ``a`` plays on alone;
    after ``length`` moves in all, every agent left is truncated. Observations: ``[moves so far]``.
    """

    metadata = {"name": "turns_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, b_moves: int = 2, length: int = 7) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.b_moves = b_moves
        self.length = length
        self._observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
        self._action_space = spaces.Discrete(3)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.t], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.t = 0
        self.moves = dict.fromkeys(self.agents, 0)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self.agent_selection = "a"
        self._skip_agent_selection = None

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.t += 1
        self.moves[agent] += 1
        self.rewards = {other: float(action) if other == agent else 10.0 for other in self.agents}
        if agent == "b" and self.moves["b"] >= self.b_moves:
            self.terminations["b"] = True
        if self.t >= self.length:
            self.truncations = dict.fromkeys(self.agents, True)
        live = [o for o in self.agents if o != agent and not (self.terminations[o] or self.truncations[o])]
        self.agent_selection = live[0] if live else agent
        self._accumulate_rewards()
        self._deads_step_first()


class BrittleStateParallelEnv(ParallelEnv):
    """Two agents with a global state ``[step, 7]`` that ``state()`` cannot give once the episode has
    terminated (as PettingZoo's multiwalker, which removes a fallen walker's body), nor at step
    ``break_at`` when it is set. Every agent is terminated at step ``end_at``; observations ``[step]``.
    """

    metadata = {"name": "brittle_state_v0", "render_modes": []}

    def __init__(self, end_at: int = 3, break_at: int | None = None) -> None:
        self.possible_agents = ["a", "b"]
        self.end_at, self.break_at = end_at, break_at
        self.state_space = spaces.Box(-100.0, 100.0, (2,), np.float32)
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 100.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def state(self) -> np.ndarray:
        if not self.agents or self.t == self.break_at:
            raise AttributeError("'NoneType' object has no attribute 'position'")
        return np.array([self.t, 7.0], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        done = self.t >= self.end_at
        observations = {a: np.array([self.t], np.float32) for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        terminations = {a: done for a in self.agents}
        truncations = {a: False for a in self.agents}
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos
