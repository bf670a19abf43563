"""What the PettingZoo vector envs share: per-agent spaces, and the arrays of one MultiAgentTimeStep.

PettingZoo hands out one dict per env copy (``{agent: observation}``, ``{agent: reward}`` ...);
rlgear's :class:`~rlgear.env.MultiAgentTimeStep` wants one array per agent over the env slots.
:class:`StepArrays` is that transposition, filled slot by slot as the copies are stepped: a row
nobody writes stays inactive (zeros, step_type LAST), which is the contract's convention.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.errors import ConfigError, EnvDataError, NonFiniteError
from rlgear.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Space,
    Tuple,
    flat_action_dim,
    flatten_action,
)
from rlgear.timestep import StepType, TimeStep

from .gymnasium_env import FLOAT32_MAX, convert_space

#: The key PettingZoo classic games use for the legal moves, in the observation or in ``info``.
ACTION_MASK = "action_mask"


def agent_spaces(
    env: Any, agents: tuple[str, ...], name: str, mask_in_info: bool
) -> tuple[dict[str, Space], dict[str, Space]]:
    """Each agent's observation and action space as rlgear spaces.

    With ``mask_in_info`` (the env gives ``action_mask`` in ``info``, not in the observation), the
    observation space becomes ``Dict(observation=..., action_mask=MultiBinary(n))``: the form rlgear's
    preprocessing reads a mask from (:mod:`rlgear.preprocessing`).
    """
    observation_spaces: dict[str, Space] = {}
    action_spaces: dict[str, Space] = {}
    for agent in agents:
        action_space = convert_space(env.action_space(agent), f"action (agent {agent})", name)
        observation_space = convert_space(env.observation_space(agent), f"observation (agent {agent})", name)
        if mask_in_info:
            if not isinstance(action_space, Discrete):
                raise ConfigError(
                    f"env.name: {name}: agent {agent} gives an action_mask in info but its actions are "
                    f"{action_space!r} (a mask needs Discrete actions)"
                )
            observation_space = Dict(
                {"observation": observation_space, ACTION_MASK: MultiBinary(int(action_space.n))}
            )
        observation_spaces[agent] = observation_space
        action_spaces[agent] = action_space
    return observation_spaces, action_spaces


def _zeros(space: Space, n: int) -> Any:
    """A batch of ``n`` zero observations of ``space`` (nested dicts/tuples for Dict/Tuple)."""
    if isinstance(space, Dict):
        return {key: _zeros(part, n) for key, part in space.items()}
    if isinstance(space, Tuple):
        return tuple(_zeros(part, n) for part in space.spaces)
    if isinstance(space, Discrete):
        return np.zeros(n, dtype=np.int64)
    if isinstance(space, Box | MultiBinary | MultiDiscrete):
        return np.zeros((n, *space.shape), dtype=space.dtype)
    raise TypeError(f"no observation buffer for {space!r}")


def zero_row(buffer: Any) -> Any:
    """One zero observation shaped like a row of ``buffer`` (an agent's batched observation arrays)."""
    if isinstance(buffer, dict):
        return {key: zero_row(part) for key, part in buffer.items()}
    if isinstance(buffer, tuple):
        return tuple(zero_row(part) for part in buffer)
    return np.zeros(buffer.shape[1:], dtype=buffer.dtype)


def _write(buffer: Any, row: int, value: Any) -> None:
    """Put one env's observation ``value`` into row ``row`` of ``buffer`` (same nesting)."""
    if isinstance(buffer, dict):
        for key, part in buffer.items():
            _write(part, row, value[key])
    elif isinstance(buffer, tuple):
        for part, item in zip(buffer, value, strict=True):
            _write(part, row, item)
    else:
        buffer[row] = value


def _check_finite(observation: Any, env_name: str, agent: str) -> None:
    """Refuse NaN, infinity and values beyond float32 in an agent's observations, naming the slots.

    Why: as in the gymnasium adapter, learning runs in float32. One float64 sum per array clears
    the common case (NaN and infinity propagate; a sum of float32 terms cannot overflow).
    """
    if isinstance(observation, dict):
        for part in observation.values():
            _check_finite(part, env_name, agent)
        return
    if isinstance(observation, tuple):
        for part in observation:
            _check_finite(part, env_name, agent)
        return
    if observation.dtype.kind != "f":
        return
    if observation.dtype.itemsize <= 4 and math.isfinite(
        np.add.reduce(observation, axis=None, dtype=np.float64)
    ):
        return
    bad = ~np.isfinite(observation) | (np.abs(np.nan_to_num(observation)) > FLOAT32_MAX)
    if bad.any():
        slots = np.flatnonzero(bad.reshape(len(observation), -1).any(axis=1)).tolist()
        raise NonFiniteError(
            f"env {env_name}: agent {agent}'s observation holds NaN, infinity or values beyond float32 in "
            f"env slot(s) {slots} (rlgear trains in float32; normalize the env's observations)"
        )


class StepArrays:
    """The arrays of one MultiAgentTimeStep, filled one (env slot, agent) at a time."""

    def __init__(self, env: Any) -> None:
        n = env.num_envs
        self._env = env
        self.active = {agent: np.zeros(n, dtype=bool) for agent in env.possible_agents}
        self.step_type = {agent: np.full(n, StepType.LAST, dtype=np.int32) for agent in env.possible_agents}
        self.reward = {agent: np.zeros(n, dtype=np.float32) for agent in env.possible_agents}
        self.discount = {agent: np.zeros(n, dtype=np.float32) for agent in env.possible_agents}
        self.observation = {agent: _zeros(env.observation_spaces[agent], n) for agent in env.possible_agents}
        self.prev_action = {agent: env.zero_actions(agent) for agent in env.possible_agents}
        self.episode_end = np.zeros(n, dtype=bool)
        #: per agent, the env's info of each slot where it has a step (when that info holds anything)
        self.infos: dict[str, dict[int, dict[str, Any]]] = {}

    def put(
        self,
        agent: str,
        row: int,
        step_type: StepType,
        observation: Any,
        reward: float = 0.0,
        discount: float = 1.0,
        action: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        """Agent ``agent`` has a step in env slot ``row``; ``action`` is its previous action (None at FIRST);
        ``info`` is what PettingZoo gave the agent with it (its ``action_mask`` left out when the adapter
        moved it into the observation)."""
        if info:
            if self._env.mask_in_info and ACTION_MASK in info:
                info = {key: value for key, value in info.items() if key != ACTION_MASK}
            if info:
                self.infos.setdefault(agent, {})[row] = info
        self.active[agent][row] = True
        self.step_type[agent][row] = step_type
        self.reward[agent][row] = reward
        self.discount[agent][row] = discount
        _write(self.observation[agent], row, observation)
        if action is not None:
            self.prev_action[agent][row] = action

    def build(self) -> MultiAgentTimeStep:
        for agent, observation in self.observation.items():
            _check_finite(observation, self._env.name, agent)
        env_ids = np.arange(len(self.episode_end), dtype=np.int32)
        steps = {
            agent: TimeStep(
                step_type=self.step_type[agent],
                reward=self.reward[agent],
                discount=self.discount[agent],
                observation=self.observation[agent],
                prev_action=self.prev_action[agent],
                env_id=env_ids.copy(),
                info=_vector_info(self.infos.get(agent), len(env_ids)),
            )
            for agent in self.active
        }
        states = getattr(self._env, "states", None)
        return MultiAgentTimeStep(
            steps=steps,
            active=self.active,
            episode_end=self.episode_end,
            state=None if states is None or self._env.state_space is None else states(self.terminated()),
        )

    def terminated(self) -> np.ndarray:
        """Per slot: its episode ended at this step with every agent that stepped terminated (LAST,
        discount 0), so nothing bootstraps from the state after it."""
        done = self.episode_end.copy()
        for agent, active in self.active.items():
            done &= ~active | ((self.step_type[agent] == StepType.LAST) & (self.discount[agent] == 0.0))
        return done


def _state_space(env: Any, name: str) -> Space | None:
    """The env's global-state space as an rlgear space, or None when it has none (``state_space`` is
    missing, or ``state()`` is not implemented: PettingZoo's classic games)."""
    try:
        space = env.state_space
    except (AttributeError, NotImplementedError):
        return None
    if space is None:
        return None
    return convert_space(space, "state", name)


def _vector_info(rows: dict[int, dict[str, Any]] | None, n: int) -> dict[str, Any] | None:
    """An agent's infos per env slot in gymnasium's vector layout (``info[key]`` an object array over
    the slots, ``info["_key"]`` where it is set): the layout a single-agent TimeStep.info has, which
    ``episode.last_info`` reads a slot's row of."""
    if not rows:
        return None
    info: dict[str, Any] = {}
    for row, entries in rows.items():
        for key, value in entries.items():
            if key not in info:
                info[key] = np.empty(n, dtype=object)
                info[f"_{key}"] = np.zeros(n, dtype=bool)
            info[key][row] = value
            info[f"_{key}"][row] = True
    return info


def zero_actions(space: Space, n: int) -> np.ndarray:
    """``n`` zero rows of ``space``'s actions as TimeStep.prev_action holds them (flat for Tuple/Dict)."""
    if isinstance(space, Tuple | Dict):
        return np.zeros((n, flat_action_dim(space)), dtype=np.float32)
    dtype = np.int64 if isinstance(space, Discrete | MultiDiscrete) else np.float32
    return np.zeros((n, *space.shape), dtype=dtype)


def action_row(space: Space, actions: Any, row: int) -> Any:
    """Env slot ``row``'s action out of a batch for ``space`` (tuples/dicts of batches for Tuple/Dict)."""
    if isinstance(space, Tuple):
        return tuple(action_row(part, batch, row) for part, batch in zip(space.spaces, actions, strict=True))
    if isinstance(space, Dict):
        return {key: action_row(part, actions[key], row) for key, part in space.items()}
    value = np.asarray(actions)[row]
    if isinstance(space, Discrete):
        return int(value)
    return value


def flat_action(space: Space, action: Any) -> np.ndarray:
    """One env's action as a prev_action row (flat for Tuple/Dict)."""
    if isinstance(space, Tuple):
        return flatten_action(space, tuple(np.asarray(part)[None] for part in action))[0]
    if isinstance(space, Dict):
        return flatten_action(space, {key: np.asarray(part)[None] for key, part in action.items()})[0]
    return action


class PettingZooVectorEnv(MultiAgentVectorEnv):
    """``num_envs`` PettingZoo env copies stepped one after another in this process.

    Why a loop and not subprocesses: PettingZoo's own envs (MPE, classic games) step in a few
    microseconds to tens of microseconds, less than a pipe round trip; the loop costs one
    ``env.step`` per copy plus the transposition into per-agent arrays (:class:`StepArrays`).
    """

    def __init__(self, envs: list[Any], name: str, horizon: int | None, mask_in_info: bool) -> None:
        self.envs = envs
        self.name = name
        self.num_envs = len(envs)
        self.horizon = horizon
        self.mask_in_info = mask_in_info
        self.possible_agents = tuple(envs[0].possible_agents)
        self.observation_spaces, self.action_spaces = agent_spaces(
            envs[0], self.possible_agents, name, mask_in_info
        )
        #: PettingZoo's global state (``state_space``/``state()``), when the env defines one (MPE does)
        self.state_space = _state_space(envs[0], name)
        self._zero_actions = {
            agent: zero_actions(space, self.num_envs) for agent, space in self.action_spaces.items()
        }
        self._all_allowed = {
            agent: np.ones(int(space.n), dtype=np.int8)
            for agent, space in self.action_spaces.items()
            if isinstance(space, Discrete)
        }

    def states(self, terminated: np.ndarray | None = None) -> np.ndarray | None:
        """Every slot's ``state()`` now, ``[num_envs, ...]`` (a fresh array), or None without a state.

        Some envs cannot give a state once their episode has ended (PettingZoo's multiwalker removes a
        fallen walker's body, and its ``state()`` then raises). A slot in ``terminated`` whose
        ``state()`` raises gets zeros: nothing bootstraps from the state after a termination, so no
        centralised value or mixer reads it. Anywhere else the failure stops the run naming the env.
        """
        if self.state_space is None:
            return None
        dtype = getattr(self.state_space, "dtype", np.float32)
        rows = []
        for slot, env in enumerate(self.envs):
            try:
                rows.append(np.asarray(env.state(), dtype=dtype))
            except Exception as err:
                if terminated is None or not terminated[slot]:
                    raise EnvDataError(
                        f"env {self.name}: its state() raised {type(err).__name__}: {err} (env slot {slot}, "
                        "mid-episode). rlgear reads the global state of an env that declares a state_space "
                        "after every step (centralised critics and mixers use it)"
                    ) from err
                rows.append(np.zeros(self.state_space.shape, dtype=dtype))
        return np.stack(rows)

    def zero_actions(self, agent: str) -> np.ndarray:
        """Fresh zero prev_action rows for ``agent`` (every slot)."""
        return self._zero_actions[agent].copy()

    def observe(self, agent: str, observation: Any, info: dict[str, Any] | None) -> Any:
        """The observation as the agent's observation space has it (the info's mask moved in)."""
        if not self.mask_in_info:
            return observation
        mask = (info or {}).get(ACTION_MASK)
        # no mask (a LAST step, say): every action allowed, so that no row has an empty choice
        return {"observation": observation, ACTION_MASK: self._all_allowed[agent] if mask is None else mask}

    def check_reward(self, agent: str, row: int, reward: float) -> float:
        """``reward`` as a float, refused (naming the env, agent and slot) if float32 cannot hold it."""
        reward = float(reward)
        if not math.isfinite(reward) or abs(reward) > FLOAT32_MAX:
            raise NonFiniteError(
                f"env {self.name}: agent {agent} got a reward that is NaN, infinite or beyond float32 in "
                f"env slot {row} (rlgear trains in float32; scale or clip the env's rewards)"
            )
        return reward

    def close(self) -> None:
        for env in self.envs:
            env.close()
