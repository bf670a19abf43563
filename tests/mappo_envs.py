"""Small multi-agent envs in numpy for mappo's tests (``vector`` adapter factories).

- :func:`make_scripted`: three agents ``a``, ``b``, ``c`` whose observations say who and where they
  are (``[agent index, env slot, step]``), so a test can rebuild every row's critic input from the
  row itself. ``c`` sits out the odd steps of an episode (inactive mid-episode, as a PettingZoo
  Parallel agent without an observation); episodes last 5 steps. With ``state=True`` the env gives
  a global state ``[env slot, step, 100]``.
- :func:`make_hidden_bonus`: the cooperative task of the learning test. Two agents each see a
  private target in {0..3} (one-hot, a fresh one every step); both get ``bonus`` when both pick
  their own target, else 0. ``bonus`` is drawn every step from {0, 1, 3}: it is in the global state
  (with both targets) and in no agent's observation, so only a centralised critic can tell a step
  worth 3 from one worth 0. Episodes last 8 steps: the optimum is 2 * 8 * 4/3 = 21.3 per episode
  (summed over agents), uniform random play 21.3 / 16 = 1.33.
"""

from __future__ import annotations

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.spaces import Box, Discrete
from tests.multi_agent_envs import FIRST, LAST, MID, _timestep


class ScriptedTeam(MultiAgentVectorEnv):
    """See :func:`make_scripted`; step k of an episode is the k-th TimeStep after its reset (0)."""

    END = 5

    def __init__(self, num_envs: int, state: bool = False):
        self.num_envs = num_envs
        self.possible_agents = ("a", "b", "c")
        self.observation_spaces = {x: Box(np.full(3, -1e3), np.full(3, 1e3)) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(2) for x in self.possible_agents}
        self.state_space = Box(np.full(3, -1e3), np.full(3, 1e3)) if state else None
        self.gives_state = state  # apart from state_space, so a test can make the two disagree
        self.k = np.zeros(num_envs, dtype=np.int64)
        self.prev = {x: np.zeros(num_envs, np.int64) for x in self.possible_agents}

    def _mts(self) -> MultiAgentTimeStep:
        n, k = self.num_envs, self.k
        slots = np.arange(n, dtype=np.float32)
        steps, active = {}, {}
        for index, agent in enumerate(self.possible_agents):
            on = np.ones(n, dtype=bool) if agent != "c" else (k % 2 == 0) | (k == self.END)
            step_type = np.where(k == 0, FIRST, np.where(k == self.END, LAST, MID))
            reward = np.where(k == 0, 0.0, 1.0 + 0.1 * index + 0.5 * self.prev[agent])
            obs = np.stack([np.full(n, float(index)), slots, k.astype(np.float32)], axis=1)
            steps[agent] = _timestep(
                np.where(on, step_type, LAST), np.where(on, reward, 0.0),
                np.where(on & (k != self.END), 1.0, 0.0), np.where(on[:, None], obs, 0.0),
                np.where(on & (k > 0), self.prev[agent], 0), n,
            )  # fmt: skip
            active[agent] = on
        state = None
        if self.gives_state:
            state = np.stack([slots, k.astype(np.float32), np.full(n, 100.0, np.float32)], axis=1)
        return MultiAgentTimeStep(steps=steps, active=active, episode_end=k == self.END, state=state)

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        self.k[:] = 0
        return self._mts()

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        ended = self.k == self.END
        c_acted = self.k % 2 == 0  # c's action is ignored where it sat out: it keeps its last one
        for agent in self.possible_agents:
            if agent in actions:
                sent = np.asarray(actions[agent], np.int64)
                if agent == "c":
                    sent = np.where(c_acted, sent, self.prev[agent])
                self.prev[agent] = np.where(ended, 0, sent)
        self.k += 1
        self.k[ended] = 0
        return self._mts()


def make_scripted(num_envs: int, state: bool = False) -> ScriptedTeam:
    return ScriptedTeam(num_envs, state)


class HiddenBonus(MultiAgentVectorEnv):
    """See :func:`make_hidden_bonus`."""

    LENGTH = 8
    BONUSES = np.array([0.0, 1.0, 3.0], np.float32)

    def __init__(self, num_envs: int, seed_offset: int = 0, state: bool = True):
        self.num_envs = num_envs
        self.possible_agents = ("a", "b")
        self.observation_spaces = {x: Box(np.zeros(4), np.ones(4)) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(4) for x in self.possible_agents}
        self.state_space = Box(np.zeros(10), np.full(10, 3.0)) if state else None
        self.rng = np.random.default_rng(seed_offset)
        self.t = np.zeros(num_envs, np.int64)
        self.ended = np.zeros(num_envs, bool)
        self._draw()

    def _draw(self) -> None:
        self.target = self.rng.integers(0, 4, (2, self.num_envs))
        self.bonus = self.BONUSES[self.rng.integers(0, 3, self.num_envs)]

    def _mts(self, step_type, reward, discount, prev, end) -> MultiAgentTimeStep:
        n = self.num_envs
        eye = np.eye(4, dtype=np.float32)
        steps = {
            agent: _timestep(step_type, reward, discount, eye[self.target[i]], prev[i], n)
            for i, agent in enumerate(self.possible_agents)
        }
        state = None
        if self.state_space is not None:
            state = np.concatenate(
                [
                    eye[self.target[0]],
                    eye[self.target[1]],
                    self.bonus[:, None],
                    (self.t / self.LENGTH)[:, None],
                ],
                axis=1,
            ).astype(np.float32)
        active = {agent: np.ones(n, dtype=bool) for agent in self.possible_agents}
        return MultiAgentTimeStep(steps=steps, active=active, episode_end=end, state=state)

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n = self.num_envs
        self.t[:] = 0
        self.ended[:] = False
        self._draw()
        zeros = np.zeros(n, np.int64)
        return self._mts(np.full(n, FIRST), np.zeros(n), np.ones(n), (zeros, zeros), np.zeros(n, bool))

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        restart = self.ended.copy()
        a, b = np.asarray(actions["a"], np.int64), np.asarray(actions["b"], np.int64)
        won = (a == self.target[0]) & (b == self.target[1])
        reward = np.where(restart, 0.0, np.where(won, self.bonus, 0.0))
        self.t += 1
        self.t[restart] = 0
        done = (self.t >= self.LENGTH) & ~restart
        self.ended = done
        self._draw()
        step_type = np.where(restart, FIRST, np.where(done, LAST, MID))
        discount = np.where(done, 0.0, 1.0)
        prev = (np.where(restart, 0, a), np.where(restart, 0, b))
        return self._mts(step_type, reward, discount, prev, done.copy())


def make_hidden_bonus(num_envs: int, seed_offset: int = 0, state: bool = True) -> HiddenBonus:
    return HiddenBonus(num_envs, seed_offset, state)
