"""PettingZoo Parallel API envs (every live agent acts at each step) as a MultiAgentVectorEnv.

Per env slot, PettingZoo's dicts become rows of the MultiAgentTimeStep table
(:class:`rlgear.env.MultiAgentTimeStep`):

* an agent that appears in the observations for the first time in an episode gets FIRST
  (reward 0: what it was given on arrival is dropped); one that appears and leaves in the
  same step never takes part;
* an agent that is live but absent from a step's observations is inactive there and sends no
  action at the next step (it had nothing to act on); the reward it gets meanwhile is added to
  its next step's;
* an agent that is terminated gets LAST with discount 0, truncated LAST with discount 1;
  it is then inactive until the episode ends (a reward reaching it later is dropped);
* the episode ends when the env has no agent left, or when the run's ``horizon`` cuts it:
  every agent still going then gets LAST with discount 1 (and one the env dropped without
  a flag gets LAST with discount 0 and a zero observation);
* the slot's next step is a reset (its actions ignored), seeded by the env's own generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep
from rlgear.timestep import StepType

from .pettingzoo_common import PettingZooVectorEnv, StepArrays, action_row, flat_action, zero_row


class ParallelVectorEnv(PettingZooVectorEnv):
    """``num_envs`` copies of a PettingZoo ``ParallelEnv``."""

    def __init__(self, envs: list[Any], name: str, horizon: int | None, mask_in_info: bool) -> None:
        super().__init__(envs, name, horizon, mask_in_info)
        n = self.num_envs
        self._steps = np.zeros(n, dtype=np.int64)
        self._ended = np.zeros(n, dtype=bool)
        #: per slot: agents that had their FIRST this episode, and those that had their LAST
        self._joined: list[set[str]] = [set() for _ in range(n)]
        self._finished: list[set[str]] = [set() for _ in range(n)]
        #: per slot: reward of agents that sat steps out (no observation), paid at their next step
        self._pending: list[dict[str, float]] = [{} for _ in range(n)]
        #: per slot: the agents active (FIRST or MID) at the last step, and each agent's last action
        self._acted: list[set[str]] = [set() for _ in range(n)]
        self._last_action: list[dict[str, Any]] = [{} for _ in range(n)]

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        arrays = StepArrays(self)
        for row in range(self.num_envs):
            self._reset_slot(row, None if seed is None else seed + row, arrays)
        return arrays.build()

    def _reset_slot(self, row: int, seed: int | None, arrays: StepArrays) -> None:
        env = self.envs[row]
        observations, infos = env.reset(seed=seed)
        self._steps[row] = 0
        self._ended[row] = False
        self._joined[row] = set()
        self._finished[row] = set()
        self._pending[row] = {}
        self._acted[row] = set()
        self._last_action[row] = {}
        for agent in env.agents:
            if agent in observations:
                observation = self.observe(agent, observations[agent], infos.get(agent))
                arrays.put(agent, row, StepType.FIRST, observation, info=infos.get(agent))
                self._joined[row].add(agent)
                self._acted[row].add(agent)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        arrays = StepArrays(self)
        for row in range(self.num_envs):
            if self._ended[row]:
                self._reset_slot(row, None, arrays)
            else:
                self._step_slot(row, actions, arrays)
        return arrays.build()

    def _step_slot(self, row: int, actions: dict[str, np.ndarray], arrays: StepArrays) -> None:
        env = self.envs[row]
        joined, finished, acted = self._joined[row], self._finished[row], self._acted[row]
        # the agents active at the previous step act; one that sat it out (no observation) sends nothing
        sent = {
            agent: action_row(self.action_spaces[agent], actions[agent], row)
            for agent in env.agents
            if agent in acted
        }
        last_action = self._last_action[row]
        for agent, action in sent.items():
            last_action[agent] = flat_action(self.action_spaces[agent], action)
        observations, rewards, terminations, truncations, infos = env.step(sent)
        self._steps[row] += 1
        cut = self.horizon is not None and self._steps[row] >= self.horizon
        over = cut or not env.agents
        pending = self._pending[row]
        acted.clear()
        for agent in self.possible_agents:
            if agent in finished:
                continue  # already had its LAST: what reaches it now is dropped
            terminated = bool(terminations.get(agent, False))
            truncated = bool(truncations.get(agent, False)) or cut
            if agent not in joined:
                if agent in observations and not (terminated or truncated or over):
                    observation = self.observe(agent, observations[agent], infos.get(agent))
                    arrays.put(agent, row, StepType.FIRST, observation, info=infos.get(agent))  # reward 0
                    joined.add(agent)
                    acted.add(agent)
                continue  # one that arrives and leaves in the same step never takes part
            reward = self.check_reward(agent, row, rewards.get(agent, 0.0)) + pending.pop(agent, 0.0)
            if agent in observations:
                observation = self.observe(agent, observations[agent], infos.get(agent))
            elif terminated or truncated:
                observation = zero_row(arrays.observation[agent])
            else:  # sits this step out: inactive, its reward waits for its next step
                pending[agent] = reward
                continue
            if terminated or truncated:
                discount = 0.0 if terminated else 1.0
                arrays.put(
                    agent,
                    row,
                    StepType.LAST,
                    observation,
                    reward,
                    discount,
                    last_action.get(agent),
                    infos.get(agent),
                )
                finished.add(agent)
            else:
                arrays.put(
                    agent,
                    row,
                    StepType.MID,
                    observation,
                    reward,
                    1.0,
                    last_action.get(agent),
                    infos.get(agent),
                )
                acted.add(agent)
        if over:
            for agent in sorted(joined - finished):  # the env dropped them unflagged, or gave no observation
                zeros = zero_row(arrays.observation[agent])
                reward = pending.pop(agent, 0.0)
                arrays.put(
                    agent, row, StepType.LAST, zeros, reward, 1.0 if cut else 0.0, last_action.get(agent)
                )
                finished.add(agent)
            arrays.episode_end[row] = True
            self._ended[row] = True
