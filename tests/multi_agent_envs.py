"""Small multi-agent envs in numpy (``MultiAgentVectorEnv``), built through the ``vector`` adapter.

- :func:`make_match`: two agents each see a random target in {0..3} (one-hot) and each get +1
  when both pick it. Episodes last ``length`` steps and terminate; the optimum is
  ``2 * length`` per episode (summed over agents), uniform random play gets ``2 * length / 16``.
- :func:`make_late_join`: agent ``a`` acts from the reset, ``b`` joins at step 2, ``a``
  terminates at step 3 (discount 0), and the env truncates at step 5 (``b`` gets LAST with
  discount 1). Rewards depend on the step and the action, so a test can rebuild each agent's
  stream and check compaction, discounts and GAE against a per-agent numpy reference.
- :func:`make_mixed`: agent ``box`` (Box observation, continuous action) and ``disc`` (Discrete
  observation one-hot in a Box, Discrete action): different spaces, so two policies.
"""

from __future__ import annotations

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def _timestep(step_type, reward, discount, observation, prev_action, n) -> TimeStep:
    return TimeStep(
        step_type=np.asarray(step_type, dtype=np.int32),
        reward=np.asarray(reward, dtype=np.float32),
        discount=np.asarray(discount, dtype=np.float32),
        observation=np.asarray(observation, dtype=np.float32),
        prev_action=np.asarray(prev_action),
        env_id=np.arange(n, dtype=np.int32),
    )


class MatchEnv(MultiAgentVectorEnv):
    """See :func:`make_match`."""

    def __init__(self, num_envs: int, length: int = 8, seed_offset: int = 0):
        self.num_envs = num_envs
        self.length = length
        self.possible_agents = ("a", "b")
        self.observation_spaces = {a: Box(np.full(4, 0.0), np.full(4, 1.0)) for a in self.possible_agents}
        self.action_spaces = {a: Discrete(4) for a in self.possible_agents}
        self.rng = np.random.default_rng(seed_offset)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.target = np.zeros(num_envs, dtype=np.int64)
        self.ended = np.zeros(num_envs, dtype=bool)

    def _obs(self) -> np.ndarray:
        return np.eye(4, dtype=np.float32)[self.target]

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n = self.num_envs
        self.t[:] = 0
        self.target = self.rng.integers(0, 4, n)
        self.ended[:] = False
        step = _timestep(np.full(n, FIRST), np.zeros(n), np.ones(n), self._obs(), np.zeros(n, np.int64), n)
        return MultiAgentTimeStep(
            steps={a: step for a in self.possible_agents},
            active={a: np.ones(n, dtype=bool) for a in self.possible_agents},
            episode_end=np.zeros(n, dtype=bool),
        )

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        n = self.num_envs
        restart = self.ended.copy()
        a, b = np.asarray(actions["a"]), np.asarray(actions["b"])
        reward = ((a == self.target) & (b == self.target)).astype(np.float32)
        self.t += 1
        done = self.t >= self.length
        step_type = np.where(done, LAST, MID)
        reward = np.where(restart, 0.0, reward)
        step_type = np.where(restart, FIRST, step_type)
        self.t[restart] = 0
        done &= ~restart
        self.ended = done
        self.target = self.rng.integers(0, 4, n)
        discount = np.where(done, 0.0, 1.0)
        steps = {
            agent: _timestep(step_type, reward, discount, self._obs(), np.where(restart, 0, act), n)
            for agent, act in (("a", a), ("b", b))
        }
        return MultiAgentTimeStep(
            steps=steps,
            active={agent: np.ones(n, dtype=bool) for agent in self.possible_agents},
            episode_end=done.copy(),
        )


def make_match(num_envs: int, length: int = 8, seed_offset: int = 0) -> MatchEnv:
    return MatchEnv(num_envs, length, seed_offset)


class LateJoinEnv(MultiAgentVectorEnv):
    """See :func:`make_late_join`. Step k of an episode is the k-th TimeStep after its reset (0)."""

    A_LAST, B_FIRST, END = 3, 2, 5

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.possible_agents = ("a", "b")
        self.observation_spaces = {x: Box(np.full(2, -10.0), np.full(2, 10.0)) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(2) for x in self.possible_agents}
        self.k = np.zeros(num_envs, dtype=np.int64)
        self.episode = np.zeros(num_envs, dtype=np.int64)

    def _mts(self, prev: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        n, k = self.num_envs, self.k
        active_a = k <= self.A_LAST
        active_b = (k >= self.B_FIRST) & (k <= self.END)
        steps = {}
        for index, (agent, active, first_k, last_k, last_discount) in enumerate(
            (("a", active_a, 0, self.A_LAST, 0.0), ("b", active_b, self.B_FIRST, self.END, 1.0))
        ):
            step_type = np.where(k == first_k, FIRST, np.where(k == last_k, LAST, MID))
            # a reward that depends on the agent, the step and the action that led here
            reward = np.where(k == first_k, 0.0, 0.5 * k + (index + 1) + prev[agent])
            discount = np.where(k == last_k, last_discount, 1.0)
            obs = np.stack([k / 5.0 + 0.1 * self.episode % 3, np.full(n, float(index))], axis=1)
            step_type = np.where(active, step_type, LAST)
            reward = np.where(active, reward, 0.0)
            discount = np.where(active, discount, 0.0)
            obs = np.where(active[:, None], obs, 0.0)
            prev_action = np.where(active & (k != first_k), prev[agent], 0)
            steps[agent] = _timestep(step_type, reward, discount, obs, prev_action, n)
        return MultiAgentTimeStep(
            steps=steps, active={"a": active_a, "b": active_b}, episode_end=k == self.END
        )

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        self.k[:] = 0
        zeros = np.zeros(self.num_envs, dtype=np.int64)
        return self._mts({"a": zeros, "b": zeros})

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        ended = self.k == self.END
        self.k += 1
        self.episode += ended
        self.k[ended] = 0
        prev = {x: np.asarray(actions.get(x, np.zeros(self.num_envs)), dtype=np.int64) for x in ("a", "b")}
        return self._mts(prev)


def make_late_join(num_envs: int) -> LateJoinEnv:
    return LateJoinEnv(num_envs)


class MixedEnv(MultiAgentVectorEnv):
    """See :func:`make_mixed`: episodes of 5 steps; ``box`` is rewarded for actions near its
    observation, ``disc`` for picking the index of its one-hot observation."""

    def __init__(self, num_envs: int, seed_offset: int = 0):
        self.num_envs = num_envs
        self.possible_agents = ("box", "disc")
        self.observation_spaces = {
            "box": Box(np.full(2, -1.0), np.full(2, 1.0)),
            "disc": Box(np.full(3, 0.0), np.full(3, 1.0)),
        }
        self.action_spaces = {"box": Box(np.full(2, -1.0), np.full(2, 1.0)), "disc": Discrete(3)}
        self.rng = np.random.default_rng(seed_offset)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.ended = np.zeros(num_envs, dtype=bool)
        self._draw()

    def _draw(self) -> None:
        n = self.num_envs
        self.box_obs = self.rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        self.disc_target = self.rng.integers(0, 3, n)

    def _mts(self, step_type, rewards, discount, prev) -> MultiAgentTimeStep:
        n = self.num_envs
        steps = {
            "box": _timestep(step_type, rewards["box"], discount, self.box_obs, prev["box"], n),
            "disc": _timestep(
                step_type,
                rewards["disc"],
                discount,
                np.eye(3, dtype=np.float32)[self.disc_target],
                prev["disc"],
                n,
            ),
        }
        return MultiAgentTimeStep(
            steps=steps,
            active={a: np.ones(n, dtype=bool) for a in self.possible_agents},
            episode_end=step_type == LAST,
        )

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n = self.num_envs
        self.t[:] = 0
        self.ended[:] = False
        self._draw()
        zeros = {"box": np.zeros(n), "disc": np.zeros(n)}
        prev = {"box": np.zeros((n, 2), np.float32), "disc": np.zeros(n, np.int64)}
        return self._mts(np.full(n, FIRST), zeros, np.ones(n), prev)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        restart = self.ended.copy()
        box, disc = np.asarray(actions["box"], np.float32), np.asarray(actions["disc"])
        rewards = {
            "box": np.where(restart, 0.0, -np.abs(box - self.box_obs).sum(axis=1)),
            "disc": np.where(restart, 0.0, (disc == self.disc_target).astype(np.float32)),
        }
        self.t += 1
        self.t[restart] = 0
        done = (self.t >= 5) & ~restart
        self.ended = done
        self._draw()
        step_type = np.where(restart, FIRST, np.where(done, LAST, MID))
        prev = {"box": np.where(restart[:, None], 0.0, box), "disc": np.where(restart, 0, disc)}
        return self._mts(step_type, rewards, np.where(done, 0.0, 1.0), prev)


def make_mixed(num_envs: int, seed_offset: int = 0) -> MixedEnv:
    return MixedEnv(num_envs, seed_offset)


class LoggedLateJoinEnv(LateJoinEnv):
    """:class:`LateJoinEnv` that keeps every MultiAgentTimeStep it returns (``log``), for references."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.log: list[MultiAgentTimeStep] = []

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        self.log.clear()
        mts = super().reset(seed)
        self.log.append(mts)
        return mts

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        mts = super().step(actions)
        self.log.append(mts)
        return mts


def make_logged_late_join(num_envs: int) -> LoggedLateJoinEnv:
    return LoggedLateJoinEnv(num_envs)


def make_not_an_env(num_envs: int) -> list:
    return [None] * num_envs


def make_wrong_count(num_envs: int) -> MatchEnv:
    return MatchEnv(num_envs + 1)


class UnevenMatchEnv(MatchEnv):
    """:class:`MatchEnv` where ``a`` has two actions (``b`` keeps four); ``step`` asserts that ``a``
    never receives an action outside its own (what agent grouping's action masks must ensure)."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.action_spaces = {"a": Discrete(2), "b": Discrete(4)}

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        assert np.all((np.asarray(actions["a"]) >= 0) & (np.asarray(actions["a"]) < 2)), actions["a"]
        return super().step(actions)


def make_uneven_match(num_envs: int) -> UnevenMatchEnv:
    return UnevenMatchEnv(num_envs)
