"""Small cooperative continuous-action multi-agent envs in numpy for maddpg's tests (``vector`` adapter
factories).

- :func:`make_line_sum`: two agents on a line, positions ``p_a, p_b`` drawn in ``[-1, 1]`` at each
  reset with a goal ``g`` in ``[-1, 1]``. Each agent observes only its own position and the goal
  ``[p_i, g]`` and moves by ``0.25 x`` its action in ``[-1, 1]``. The team is rewarded on its joint
  outcome only: each step pays ``-|p_a + p_b - g|`` (half to each agent, so the team's summed reward
  is that), for ``length`` steps, then the episode terminates. The global state is
  ``[p_a, p_b, g]``. Coordination matters: any split of ``g`` between the agents is optimal, but
  neither sees the other, so they must settle on one convention (e.g. ``g / 2`` each); an agent
  that moves its own position to ``g`` is wrong by the other's position. Random play returns about
  ``-8`` per 8-step episode, the optimum about ``-1``.
- :func:`make_uneven_line_sum`: the line task with agents whose actions differ in width and bounds:
  ``a`` moves by its one action in ``[-1, 1]``, ``b`` acts in ``Box(-0.5, 0.5, (2,))`` and moves by
  twice its first component (its second does nothing). ``step`` asserts that each agent receives
  an action of its own shape within its own bounds (what agent grouping's padding must ensure).
- :func:`make_box_late_join`: :class:`tests.multi_agent_envs.LateJoinEnv`'s timing (``a`` from the
  reset, ``b`` from step 2, ``a`` terminates at step 3, the env truncates at 5) with Box actions
  of shape ``(2,)``, logging the actions each agent received (for agent-group tests).
"""

from __future__ import annotations

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.spaces import Box
from tests.multi_agent_envs import FIRST, LAST, MID, LateJoinEnv, _timestep


class LineSumEnv(MultiAgentVectorEnv):
    """See :func:`make_line_sum`."""

    def __init__(self, num_envs: int, length: int = 8, state: bool = True):
        self.num_envs = num_envs
        self.length = length
        self.possible_agents = ("a", "b")
        self.observation_spaces = {x: Box(np.full(2, -2.0), np.full(2, 2.0)) for x in self.possible_agents}
        self.action_spaces = {x: Box(np.full(1, -1.0), np.full(1, 1.0)) for x in self.possible_agents}
        self.state_space = Box(np.full(3, -2.0), np.full(3, 2.0)) if state else None
        self.rng = np.random.default_rng(0)
        self.t = np.zeros(num_envs, np.int64)
        self.pos = np.zeros((num_envs, 2), np.float32)
        self.goal = np.zeros(num_envs, np.float32)

    def _restart(self, slots: np.ndarray) -> None:
        k = int(slots.sum())
        self.t[slots] = 0
        self.pos[slots] = self.rng.uniform(-1.0, 1.0, (k, 2))
        self.goal[slots] = self.rng.uniform(-1.0, 1.0, k)

    def _mts(self, step_type, reward, discount, prev) -> MultiAgentTimeStep:
        n = self.num_envs
        steps = {
            agent: _timestep(
                step_type, reward / 2.0, discount, np.stack([self.pos[:, i], self.goal], 1), prev[i], n
            )
            for i, agent in enumerate(self.possible_agents)
        }
        state = np.concatenate([self.pos, self.goal[:, None]], 1) if self.state_space is not None else None
        return MultiAgentTimeStep(
            steps=steps,
            active={agent: np.ones(n, bool) for agent in self.possible_agents},
            episode_end=np.asarray(step_type) == LAST,
            state=state,
        )

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n = self.num_envs
        self._restart(np.ones(n, bool))
        zeros = np.zeros((n, 1), np.float32)
        return self._mts(np.full(n, FIRST), np.zeros(n), np.ones(n), (zeros, zeros))

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        n = self.num_envs
        restart = self.t >= self.length
        moves = np.stack([np.asarray(actions[x], np.float32).reshape(n) for x in self.possible_agents], 1)
        moves = np.clip(moves, -1.0, 1.0)
        self.pos = np.clip(self.pos + 0.25 * moves, -2.0, 2.0).astype(np.float32)
        self.t += 1
        reward = -np.abs(self.pos.sum(1) - self.goal)
        prev = tuple(np.where(restart[:, None], 0.0, moves[:, i : i + 1]) for i in range(2))
        if restart.any():
            self._restart(restart)
        step_type = np.where(restart, FIRST, np.where(self.t >= self.length, LAST, MID))
        discount = np.where(step_type == LAST, 0.0, 1.0)
        return self._mts(step_type, np.where(restart, 0.0, reward), discount, prev)


def make_line_sum(num_envs: int, length: int = 8, state: bool = True) -> LineSumEnv:
    return LineSumEnv(num_envs, length, state)


class BoxLateJoinEnv(LateJoinEnv):
    """:class:`LateJoinEnv` acting in ``Box(-1, 1, (2,))``; ``received`` logs each step's per-agent actions."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.action_spaces = {x: Box(np.full(2, -1.0), np.full(2, 1.0)) for x in self.possible_agents}
        self.received: list[dict[str, np.ndarray]] = []

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        self.received.append({k: np.array(v) for k, v in actions.items()})
        # LateJoinEnv's rewards read an integer action: the first component, rounded
        return super().step({k: np.rint(np.asarray(v)[:, 0]).astype(np.int64) for k, v in actions.items()})


def make_box_late_join(num_envs: int) -> BoxLateJoinEnv:
    return BoxLateJoinEnv(num_envs)


class UnevenLineSumEnv(LineSumEnv):
    """See :func:`make_uneven_line_sum`."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.action_spaces = {
            "a": Box(np.full(1, -1.0), np.full(1, 1.0)),
            "b": Box(np.full(2, -0.5), np.full(2, 0.5)),
        }

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        for agent, space in self.action_spaces.items():
            action = np.asarray(actions[agent])
            assert action.shape == (self.num_envs, *space.shape), (agent, action.shape)
            assert np.all((action >= space.low) & (action <= space.high)), (agent, action)
        return super().step({"a": actions["a"], "b": 2.0 * np.asarray(actions["b"])[:, :1]})


def make_uneven_line_sum(num_envs: int) -> UnevenLineSumEnv:
    return UnevenLineSumEnv(num_envs)
