"""Small cooperative multi-agent envs in numpy for qmix's and vdn's tests (``vector`` adapter factories).

- :func:`make_two_step`: the two-step game of Rashid et al. 2018 (QMIX, Sec. 6.1, Fig. 3). Two
  agents, two actions each. In the first step (state 1) agent ``a``'s action picks state 2A (action
  0) or 2B (action 1), for no reward; in the second step every joint action pays 7 in 2A, and in 2B
  the payoff is ``[[0, 1], [1, 8]]`` (row: ``a``'s action, column: ``b``'s); then the episode
  terminates. The global state is the one-hot of (1, 2A, 2B) and both agents observe it too. Each
  agent receives half the payoff, so the team's summed reward is the paper's payoff: the optimal
  greedy return is 8 (2B, both pick 1); VDN's additive values cannot represent 2B's payoff and it
  settles for 7 (2A), as in the paper.
"""

from __future__ import annotations

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.spaces import Box, Discrete
from tests.multi_agent_envs import FIRST, LAST, MID, _timestep

PAYOFF_2B = np.array([[0.0, 1.0], [1.0, 8.0]], np.float32)


class TwoStepGame(MultiAgentVectorEnv):
    """See :func:`make_two_step`. ``stage`` per slot: 0 state 1, 1 state 2A, 2 state 2B."""

    def __init__(self, num_envs: int, state: bool = True):
        self.num_envs = num_envs
        self.possible_agents = ("a", "b")
        self.observation_spaces = {x: Box(np.zeros(3), np.ones(3)) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(2) for x in self.possible_agents}
        self.state_space = Box(np.zeros(3), np.ones(3)) if state else None
        self.stage = np.zeros(num_envs, np.int64)
        self.t = np.zeros(num_envs, np.int64)

    def _mts(self, step_type, reward, discount, prev) -> MultiAgentTimeStep:
        n = self.num_envs
        obs = np.eye(3, dtype=np.float32)[self.stage]
        steps = {
            agent: _timestep(step_type, reward / 2.0, discount, obs, prev[i], n)
            for i, agent in enumerate(self.possible_agents)
        }
        return MultiAgentTimeStep(
            steps=steps,
            active={agent: np.ones(n, bool) for agent in self.possible_agents},
            episode_end=np.asarray(step_type) == LAST,
            state=obs.copy() if self.state_space is not None else None,
        )

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        n = self.num_envs
        self.stage[:] = 0
        self.t[:] = 0
        zeros = np.zeros(n, np.int64)
        return self._mts(np.full(n, FIRST), np.zeros(n), np.ones(n), (zeros, zeros))

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        a, b = np.asarray(actions["a"], np.int64), np.asarray(actions["b"], np.int64)
        restart = self.t == 2
        reward = np.where(self.t == 1, np.where(self.stage == 1, 7.0, PAYOFF_2B[a, b]), 0.0)
        self.stage = np.where(self.t == 0, 1 + a, self.stage)
        self.t += 1
        self.t[restart] = 0
        self.stage[restart] = 0
        step_type = np.where(restart, FIRST, np.where(self.t == 2, LAST, MID))
        discount = np.where(self.t == 2, 0.0, 1.0)
        prev = (np.where(restart, 0, a), np.where(restart, 0, b))
        return self._mts(step_type, np.where(restart, 0.0, reward), discount, prev)


def make_two_step(num_envs: int, state: bool = True) -> TwoStepGame:
    return TwoStepGame(num_envs, state)
