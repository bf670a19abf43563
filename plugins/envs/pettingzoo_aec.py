"""PettingZoo AEC envs (turn-based games: connect_four, tictactoe ...) as a MultiAgentVectorEnv.

Turn-aware, through the AEC API itself (not ``aec_to_parallel``, which would make every agent
act at every step): one rlgear step of a slot is one move, by the agent PettingZoo selects.

* In a slot, the agent to move is the only one active (with the agents getting LAST at that
  step). Its first move of an episode is its FIRST (reward 0); later ones are MID, with the
  reward PettingZoo accumulated for it since its previous move (``last()``'s reward: what the
  other agents' moves gave it too).
* A terminated or truncated agent gets LAST (discount 0, or 1 if truncated) with its
  accumulated reward at the step where PettingZoo selects it dead; the adapter then steps it
  out (``step(None)``), as the AEC loop does. At a game's end every agent that moved gets its
  LAST in that step (connect_four: the winner +1, the loser -1, discount 0).
* The run's ``horizon`` counts moves: when a slot reaches it, every agent still going gets LAST
  with discount 1 and the reward accumulated since its last move.
* An agent selected dead before its first move never took part (its reward is dropped).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep
from rlgear.timestep import StepType

from .pettingzoo_common import PettingZooVectorEnv, StepArrays, action_row, flat_action, zero_row


class AECVectorEnv(PettingZooVectorEnv):
    """``num_envs`` copies of a PettingZoo ``AECEnv``, one move per slot and step."""

    def __init__(self, envs: list[Any], name: str, horizon: int | None, mask_in_info: bool) -> None:
        super().__init__(envs, name, horizon, mask_in_info)
        n = self.num_envs
        self._moves = np.zeros(n, dtype=np.int64)
        self._ended = np.zeros(n, dtype=bool)
        #: per slot: the agent to move, the agents that moved / had their LAST, each one's last action
        self._to_move: list[str | None] = [None] * n
        self._joined: list[set[str]] = [set() for _ in range(n)]
        self._finished: list[set[str]] = [set() for _ in range(n)]
        self._last_action: list[dict[str, Any]] = [{} for _ in range(n)]

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        arrays = StepArrays(self)
        for row in range(self.num_envs):
            self._reset_slot(row, None if seed is None else seed + row, arrays)
        return arrays.build()

    def _reset_slot(self, row: int, seed: int | None, arrays: StepArrays) -> None:
        self.envs[row].reset(seed=seed)
        self._moves[row] = 0
        self._ended[row] = False
        self._to_move[row] = None
        self._joined[row] = set()
        self._finished[row] = set()
        self._last_action[row] = {}
        self._next_turn(row, arrays, cut=False)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        arrays = StepArrays(self)
        for row in range(self.num_envs):
            if self._ended[row]:
                self._reset_slot(row, None, arrays)
                continue
            agent = self._to_move[row]
            assert agent is not None  # a slot that is not over always has an agent to move
            space = self.action_spaces[agent]
            action = action_row(space, actions[agent], row)
            self.envs[row].step(action)
            self._last_action[row][agent] = flat_action(space, action)
            self._moves[row] += 1
            self._next_turn(row, arrays, cut=self.horizon is not None and self._moves[row] >= self.horizon)
        return arrays.build()

    def _next_turn(self, row: int, arrays: StepArrays, cut: bool) -> None:
        """Give LAST to the agents PettingZoo now selects dead, then the agent to move its step (or end)."""
        env = self.envs[row]
        joined, finished, last_action = self._joined[row], self._finished[row], self._last_action[row]
        while env.agents:
            agent = env.agent_selection
            observation, reward, terminated, truncated, info = env.last()
            if terminated or truncated:
                if agent in joined and agent not in finished:
                    reward = self.check_reward(agent, row, reward)
                    discount = 0.0 if terminated else 1.0
                    observation = self.observe(agent, observation, info)
                    arrays.put(
                        agent, row, StepType.LAST, observation, reward, discount, last_action[agent], info
                    )
                    finished.add(agent)
                env.step(None)
                continue
            if cut:
                self._cut(row, arrays)
                return
            observation = self.observe(agent, observation, info)
            if agent in joined:
                reward = self.check_reward(agent, row, reward)
                arrays.put(agent, row, StepType.MID, observation, reward, 1.0, last_action[agent], info)
            else:
                arrays.put(agent, row, StepType.FIRST, observation, info=info)
                joined.add(agent)
            self._to_move[row] = agent
            return
        # no agent left: the game is over (an agent that left without being selected dead ends terminated)
        for agent in sorted(joined - finished):
            arrays.put(
                agent,
                row,
                StepType.LAST,
                zero_row(arrays.observation[agent]),
                0.0,
                0.0,
                last_action.get(agent),
            )
            finished.add(agent)
        self._end(row, arrays)

    def _cut(self, row: int, arrays: StepArrays) -> None:
        """The run's horizon: every agent still going gets LAST, discount 1, with its pending reward."""
        env = self.envs[row]
        pending = env._cumulative_rewards  # what last() would give each agent: reward since its last move
        for agent in self.possible_agents:
            if agent in self._joined[row] and agent not in self._finished[row]:
                info = env.infos.get(agent)
                observation = self.observe(agent, env.observe(agent), info)
                reward = self.check_reward(agent, row, pending.get(agent, 0.0))
                arrays.put(
                    agent,
                    row,
                    StepType.LAST,
                    observation,
                    reward,
                    1.0,
                    self._last_action[row].get(agent),
                    info,
                )
                self._finished[row].add(agent)
        self._end(row, arrays)

    def _end(self, row: int, arrays: StepArrays) -> None:
        arrays.episode_end[row] = True
        self._ended[row] = True
        self._to_move[row] = None
