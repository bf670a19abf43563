"""Agent groups: a team of agents presented as one agent whose rows are whole env steps (numpy only).

Why: a value-decomposition learner (``qmix``, ``vdn``) learns one team value from every agent's
step at once, and ``maddpg``'s centralised critic reads the global state and every agent's action,
so both need team-level rows: all agents' observations, actions and the env's global state of one
env step in one row. rlgear's sampler keeps per-agent rows; rather than teach it a
second layout, the team is grouped into one agent (RLlib's ``with_agent_groups`` does the same).
:class:`AgentGroups` wraps a :class:`~rlgear.env.MultiAgentVectorEnv` and is a single-agent
:class:`~rlgear.env.VectorEnv` (``rlgear.testing.check_vector_env`` holds for it), so the
sampler's single-agent path, its episode metrics and its recurrent state per env slot apply as
they are. A rollout worker wraps the env when its policy class sets ``groups_agents = True`` (a
single-agent env first as :class:`~rlgear.sampling.agents.OneAgentEnv`: a team of one).

The team's step, for ``n`` agents in ``possible_agents`` order:

* observation: a float32 ``Box`` ``[n + 1, W]`` (see :func:`team_layout`). Row ``a < n`` is agent
  ``a``: column 0 its presence flag (1 where it acts this step), then its flat observation
  (preprocessed as the evaluator would: Dict parts flattened, Discrete one-hot), zero-padded to
  the widest agent's; zeros for an absent agent. Row ``n`` is the global state: the env's
  ``state`` when it gives one (:attr:`~rlgear.env.MultiAgentVectorEnv.state_space`), else every
  agent's row concatenated. ``W = 1 + max(obs width, state width)``. Columns that are padding have
  bounds pinned to 0, so a model reads the true widths off the space (a plain Box, which survives
  checkpoints' JSON unchanged; a Dict would be flattened by the preprocessor and lose the layout).
* with agents whose observations carry an ``action_mask``, or agents with different numbers of
  actions: ``Dict(observation=that Box, action_mask=MultiBinary(n * actions))``, the agents' masks
  one block each, which the evaluator's preprocessing reads as the mask of the team's
  ``MultiDiscrete`` action. An agent without a mask, or absent, may take any of its own actions.
* action: ``MultiDiscrete([K] * n)`` when every agent has a ``Discrete`` space, ``K`` the most
  actions any agent has: an agent with fewer acts in the first of them, the rest masked out for it
  (MPE's simple_speaker_listener: a speaker with 3 actions, a listener with 5). A ``Box`` ``[n, A]``
  when every agent has a one-dimensional ``Box`` (``maddpg``'s continuous teams), ``A`` the widest:
  row ``a`` holds agent ``a``'s bounds in its first columns, and the rest of the row is padding
  pinned to ``[0, 0]`` (as the observation's padding). Mixed kinds are refused.
  ``step`` hands agent ``a`` row ``a`` of the team action, cut to its own width (ignored by the env
  while it is absent); ``prev_action`` is the previous joint action (zeros at FIRST), int64 or float32.
* reward: the sum of the agents' rewards of that step (EPyMARL's ``common_reward`` with
  ``reward_scalarisation: sum``), so ``episode_return_mean`` is the team's summed return.
* step type: LAST at the env's episode end (every agent done), FIRST after it, MID otherwise.
  Discount at LAST: 0 when an agent acting at that step terminated (discount 0) or none acts
  there any more, 1 when the env truncated (the team's return bootstraps).

An agent that terminates before the team is absent from its own LAST step on (its action there
is ignored by the env, and it has no value to bootstrap), so its presence flag is 0 there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv, VectorEnv
from rlgear.errors import ConfigError
from rlgear.policy import flatten_observations
from rlgear.preprocessing import ACTION_MASK_KEY, ObservationPreprocessor
from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, flat_dim
from rlgear.timestep import StepType, TimeStep

__all__ = ["AgentGroups", "TeamLayout", "team_layout", "team_refusals"]

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
#: The observation key of the team Box when the team observation is a Dict with an action mask.
OBSERVATION_KEY = "observation"


class TeamLayout:
    """Where the parts of a team observation row are (read from the space, see :func:`team_layout`).

    ``n_agents``; ``obs_columns`` / ``state_columns``: the column indices (past the presence flag,
    i.e. into ``row[1:]``) that carry an agent's observation / the state; the rest is padding.
    """

    def __init__(self, n_agents: int, obs_columns: np.ndarray, state_columns: np.ndarray):
        self.n_agents = n_agents
        self.obs_columns = obs_columns
        self.state_columns = state_columns

    @property
    def obs_dim(self) -> int:
        return len(self.obs_columns)

    @property
    def state_dim(self) -> int:
        return len(self.state_columns)

    def split(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(agent_obs [..., n, obs_dim], state [..., state_dim], agent_mask [..., n])`` of
        team observations ``[..., n + 1, W]``."""
        n = self.n_agents
        agents = obs[..., :n, 1:][..., self.obs_columns]
        state = obs[..., n, 1:][..., self.state_columns]
        return agents, state, obs[..., :n, 0]


def team_refusals(config: Any, algorithm: str) -> list[tuple[bool, str, str]]:
    """``(refused, key, message)`` of what no algorithm on grouped agents builds (qmix, vdn, maddpg):
    conv nets (each agent's observation is a flat row), an observation filter (it would shift the
    presence flags and padding) and learner actors (the team learns in the driver)."""
    model = config.model
    return [
        (
            bool(model.conv_filters),
            "model.conv_filters",
            f"{algorithm} flattens each agent's observation into a row: conv nets are not built",
        ),
        (
            model.observation_filter != "none",
            "model.observation_filter",
            f"{algorithm}'s team observation holds presence flags and padding a filter would shift; set it to none",
        ),
        (
            config.learners.num_learners > 0,
            "learners.num_learners",
            f"{algorithm} learns in the driver; set it to 0",
        ),
    ]


def team_layout(space: Space) -> TeamLayout:
    """The layout of a team observation space (the ``Box`` :class:`AgentGroups` makes, alone or as the
    observation of its Dict with the agents' action masks), or a ValueError saying why ``space`` is
    not one."""
    if isinstance(space, Dict) and set(space.keys()) == {OBSERVATION_KEY, ACTION_MASK_KEY}:
        space = space[OBSERVATION_KEY]
    if not isinstance(space, Box) or len(space.shape) != 2 or space.shape[0] < 2 or space.shape[1] < 2:
        raise ValueError(
            f"expected a team observation (a Box [agents + 1, width] made by agent grouping), got {space!r}"
        )
    pinned = (space.low == 0) & (space.high == 0)
    agents = ~pinned[:-1, 1:]
    return TeamLayout(space.shape[0] - 1, np.flatnonzero(agents.any(axis=0)), np.flatnonzero(~pinned[-1, 1:]))


def _action_parts(env: MultiAgentVectorEnv) -> tuple[str, list[int], np.ndarray | None, np.ndarray | None]:
    """``(kind, widths, low, high)`` of the agents' action spaces: kind ``"discrete"`` (widths: each
    agent's number of actions) or ``"box"`` (widths: each agent's action width; low/high ``[n, A]``,
    each agent's bounds in its first columns, padding pinned to 0); refuses what cannot be grouped."""
    spaces = {a: env.action_spaces[a] for a in env.possible_agents}
    if all(isinstance(s, Discrete) for s in spaces.values()):
        return "discrete", [int(s.n) for s in spaces.values()], None, None
    if all(isinstance(s, Box) and len(s.shape) == 1 for s in spaces.values()):
        widths = [int(s.shape[0]) for s in spaces.values()]
        low = np.zeros((len(spaces), max(widths)), np.float32)
        high = np.zeros_like(low)
        for row, space in enumerate(spaces.values()):
            low[row, : space.shape[0]], high[row, : space.shape[0]] = space.low, space.high
        return "box", widths, low, high
    listed = ", ".join(f"{a}: {s!r}" for a, s in spaces.items())
    raise ConfigError(
        "agent grouping needs every agent to act in a Discrete space, or every agent in a "
        f"one-dimensional Box, got {listed}"
    )


def _preprocessors(env: MultiAgentVectorEnv) -> dict[str, ObservationPreprocessor]:
    """Each agent's observation preprocessor; refuses image observations."""
    preprocessors = {}
    for agent in env.possible_agents:
        pre = ObservationPreprocessor(env.observation_spaces[agent], env.action_spaces[agent], agent)
        space = pre.observation_space
        if isinstance(space, Box) and len(space.shape) == 3:
            raise ConfigError(
                f"agent grouping flattens each agent's observation into a row; agent {agent} observes an "
                f"image {space!r} (conv nets are not supported by agent grouping)"
            )
        preprocessors[agent] = pre
    return preprocessors


class AgentGroups(VectorEnv):
    """A :class:`MultiAgentVectorEnv` as one team agent (see the module docstring).

    Agent observation spaces of different widths are zero-padded to the widest.
    """

    def __init__(self, env: MultiAgentVectorEnv):
        self.env = env
        self.num_envs = env.num_envs
        self.agents = tuple(env.possible_agents)
        self.preprocessors = _preprocessors(env)
        kind, self.action_widths, action_low, action_high = _action_parts(env)
        n = len(self.agents)
        #: Box teams: the widest agent's action width A (the team acts in a Box [n, A]); None when discrete.
        self.box_actions = max(self.action_widths) if kind == "box" else None
        #: Discrete teams: the most actions any agent has (0 for a Box team).
        self.num_actions = max(self.action_widths) if kind == "discrete" else 0
        widths = [flat_dim(p.observation_space) for p in self.preprocessors.values()]
        self.obs_dim = max(widths)
        self.given_state = env.state_space is not None
        self.state_dim = flat_dim(env.state_space) if self.given_state else n * self.obs_dim
        width = 1 + max(self.obs_dim, self.state_dim)
        low = np.zeros((n + 1, width), np.float32)
        high = np.zeros((n + 1, width), np.float32)
        high[:n, 0] = 1.0  # presence flags
        for row, obs_width in enumerate(widths):
            low[row, 1 : 1 + obs_width], high[row, 1 : 1 + obs_width] = -np.inf, np.inf
        low[n, 1 : 1 + self.state_dim], high[n, 1 : 1 + self.state_dim] = -np.inf, np.inf
        box = Box(low, high)
        #: Discrete teams: each agent's own actions (the first of the team's), the rest padding.
        self._own_actions = np.arange(self.num_actions)[None, :] < np.asarray(self.action_widths)[:, None]
        padded = kind == "discrete" and not self._own_actions.all()
        self.has_masks = padded or any(p.mask_width is not None for p in self.preprocessors.values())
        self.observation_space: Space = (
            Dict({OBSERVATION_KEY: box, ACTION_MASK_KEY: MultiBinary(n * self.num_actions)})
            if self.has_masks
            else box
        )
        if self.box_actions is None:
            self.action_space: Space = MultiDiscrete(np.full(n, self.num_actions, dtype=np.int64))
            self._prev = np.zeros((self.num_envs, n), dtype=np.int64)
        else:
            self.action_space = Box(action_low, action_high)
            self._prev = np.zeros((self.num_envs, n, self.box_actions), dtype=np.float32)
        self._ended = np.zeros(self.num_envs, dtype=bool)

    # --- the team's TimeStep ---------------------------------------------------------------
    def _team(self, mts: MultiAgentTimeStep, first: np.ndarray) -> TimeStep:
        b, n = self.num_envs, len(self.agents)
        end = np.asarray(mts.episode_end, dtype=bool)
        obs = np.zeros(self.observation_box_shape, np.float32)
        mask = np.broadcast_to(self._own_actions, (b, n, self.num_actions)).copy() if self.has_masks else None
        reward = np.zeros(b, np.float64)
        terminated = np.zeros(b, dtype=bool)
        acting_at_end = np.zeros(b, dtype=bool)
        valid = None
        for index, agent in enumerate(self.agents):
            step, active = mts.steps[agent], np.asarray(mts.active[agent], dtype=bool)
            last = active & (step.step_type == _LAST)
            present = active & (~last | end)  # an agent done before the team is absent from its LAST on
            pre = self.preprocessors[agent]
            flat = flatten_observations(pre.observation_space, pre.transform(step.observation))
            obs[:, index, 0] = present
            obs[:, index, 1 : 1 + flat.shape[1]] = np.where(present[:, None], flat, 0.0)
            if mask is not None and pre.mask_width is not None:
                agent_mask = pre.action_mask(step.observation)
                own = mask[:, index, : agent_mask.shape[-1]]
                mask[:, index, : agent_mask.shape[-1]] = np.where(present[:, None], agent_mask, own)
            reward += np.where(active, step.reward, 0.0)
            terminated |= last & (step.discount == 0)
            acting_at_end |= active & end
            if step.valid is not None:
                valid = np.ones(b, dtype=bool) if valid is None else valid
                valid &= ~active | step.valid
        if self.given_state:
            obs[:, n, 1 : 1 + self.state_dim] = np.asarray(mts.state, np.float32).reshape(b, -1)
        else:
            obs[:, n, 1 : 1 + self.state_dim] = obs[:, :n, 1 : 1 + self.obs_dim].reshape(b, -1)
        step_type = np.where(first, _FIRST, np.where(end, _LAST, _MID)).astype(np.int32)
        discount = np.where(end & (terminated | ~acting_at_end), 0.0, 1.0).astype(np.float32)
        first_rows = first.reshape((b,) + (1,) * (self._prev.ndim - 1))
        prev = np.where(first_rows, 0, self._prev).astype(self._prev.dtype)
        observation: Any = obs
        if mask is not None:
            observation = {OBSERVATION_KEY: obs, ACTION_MASK_KEY: mask.reshape(b, -1).astype(np.int8)}
        self._ended = end.copy()
        return TimeStep(
            step_type=step_type,
            reward=np.where(first, 0.0, reward).astype(np.float32),
            discount=np.where(first, 1.0, discount).astype(np.float32),
            observation=observation,
            prev_action=prev,
            env_id=np.arange(b, dtype=np.int32),
            valid=valid,
        )

    @property
    def observation_box_shape(self) -> tuple[int, int, int]:
        return (self.num_envs, len(self.agents) + 1, 1 + max(self.obs_dim, self.state_dim))

    def reset(self, seed: int | None = None) -> TimeStep:
        self._prev[:] = 0
        return self._team(self.env.reset(seed), np.ones(self.num_envs, dtype=bool))

    def step(self, actions: np.ndarray) -> TimeStep:
        actions = np.asarray(actions, dtype=self._prev.dtype).reshape(self._prev.shape)
        first = self._ended.copy()  # the slots whose previous step was LAST start over now
        first_rows = first.reshape((self.num_envs,) + (1,) * (actions.ndim - 1))
        self._prev = np.where(first_rows, 0, actions).astype(self._prev.dtype)
        mts = self.env.step({agent: self._agent_action(actions, i) for i, agent in enumerate(self.agents)})
        return self._team(mts, first)

    def _agent_action(self, actions: np.ndarray, index: int) -> np.ndarray:
        """Agent ``index``'s part of the team action: its row, cut to its own width in a Box team."""
        if self.box_actions is None:
            return actions[:, index].copy()
        return actions[:, index, : self.action_widths[index]].copy()

    # --- delegated ---------------------------------------------------------------------------
    def close(self) -> None:
        self.env.close()

    def get_state(self) -> dict[str, np.ndarray]:
        return self.env.get_state()

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.env.set_state(arrays)

    def freeze_statistics(self) -> None:
        self.env.freeze_statistics()
