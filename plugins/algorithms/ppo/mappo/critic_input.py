"""What MAPPO's centralised critic sees (``training.critic_input``), framework-free.

Per row of a policy's fragment (one agent at one env step) the critic input is:

* ``state``: the env's global state at that step (:attr:`rlgear.env.MultiAgentTimeStep.state`,
  PettingZoo's ``state()``), flattened, then the agent's one-hot index among ``possible_agents``
  (one state is shared by all agents; the index tells a shared critic whose value it predicts).
  MAPPO's "agent-specific global state" (the state concatenated with the agent's own features)
  is not built here;
* ``joint_obs``: every agent's (flat) observation at the same env step, in ``possible_agents``
  order, zeros for an agent without a step there, then the agent's one-hot index;
* ``local``: the agent's own flat observation (plain PPO's value input: mappo = ippo).

``auto`` is ``state`` when the env gives one, else ``joint_obs``. A single-agent env is the
one-agent case (``joint_obs`` = the observation and a constant 1).

Why the rows are built from the sampler's window (:func:`add_critic_inputs`) and not by each
policy's postprocessing: with separate actors the other agents' observations belong to other
policies' tables, and only the window holds every policy's rows of the same env steps.

The critic's input width must be known when a policy is built (``(observation_space,
action_space, config)``, on every process), so :func:`critic_spec` looks at the env once per
process: one copy of it, built and closed (kept per env adapter, name, kwargs and horizon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.errors import ConfigError
from rlgear.policy import flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.sampler import STATE
from rlgear.spaces import flat_dim

#: The batch column holding each row's critic input (``[..., critic_dim]`` float32).
CRITIC_OBS = "critic_obs"
MODES = ("auto", "state", "joint_obs", "local")


@dataclass(frozen=True)
class EnvShape:
    """What the critic's width depends on: the agents, their flat observation sizes, the state's."""

    agents: tuple[str, ...]
    obs_dims: tuple[int, ...]
    state_dim: int | None
    multi_agent: bool


@dataclass(frozen=True)
class CriticSpec:
    """A policy's resolved critic input: ``mode`` (never ``auto``) and the input width."""

    mode: str
    dim: int
    num_agents: int


_SHAPES: dict[str, EnvShape] = {}


def _probe(adapter: str, name: str, kwargs: dict[str, Any], horizon: int | None) -> EnvShape:
    from rlgear.discovery import registry
    from rlgear.env import MultiAgentVectorEnv
    from rlgear.preprocessing import ObservationPreprocessor

    env = registry.load_env_adapter(adapter)().make(name, 1, kwargs=kwargs, horizon=horizon, worker_index=0)

    def dim(observation_space: Any, action_space: Any) -> int:  # what the policy sees, flat
        return flat_dim(ObservationPreprocessor(observation_space, action_space, name).observation_space)

    try:
        if isinstance(env, MultiAgentVectorEnv):
            agents = tuple(env.possible_agents)
            dims = tuple(dim(env.observation_spaces[a], env.action_spaces[a]) for a in agents)
            state_space = getattr(env, "state_space", None)
            state_dim = None if state_space is None else flat_dim(state_space)
            return EnvShape(agents, dims, state_dim, True)
        return EnvShape(("agent",), (dim(env.observation_space, env.action_space),), None, False)
    finally:
        env.close()


def env_shape(config: Any) -> EnvShape:
    """The run's env as the critic needs it (one copy built per process, then kept)."""
    env = config.env
    kwargs = dict(env.kwargs)
    key = repr((env.adapter, env.name, sorted(kwargs.items()), config.workers.horizon))
    if key not in _SHAPES:
        _SHAPES[key] = _probe(env.adapter, env.name, kwargs, config.workers.horizon)
    return _SHAPES[key]


def critic_spec(config: Any, observation_space: Any, shape: EnvShape | None = None) -> CriticSpec:
    """The policy's critic input, ``training.critic_input`` resolved against the env (``shape``:
    given by tests; else the env is looked at once)."""
    mode = config.training.critic_input
    own_dim = flat_dim(observation_space)
    if mode == "local":
        return CriticSpec("local", own_dim, 1)
    shape = env_shape(config) if shape is None else shape
    n = len(shape.agents)
    if mode == "auto":
        mode = "state" if shape.state_dim is not None else "joint_obs"
    if mode == "state":
        if shape.state_dim is None:
            raise ConfigError(
                f"{getattr(config, 'source', 'config')}: training.critic_input: 'state' needs an env that "
                f"gives a global state (MultiAgentVectorEnv.state_space, PettingZoo's state()); env "
                f"'{config.env.name}' has none: use joint_obs or auto"
            )
        return CriticSpec("state", shape.state_dim + n, n)
    dims = shape.obs_dims if shape.multi_agent else (own_dim,)
    return CriticSpec("joint_obs", sum(dims) + n, n)


def add_critic_inputs(
    window: dict[str, dict[str, Any]], possible_agents: tuple[str, ...], policies: dict
) -> None:
    """Add the :data:`CRITIC_OBS` column to every policy's window table, for the rows recorded in
    this fragment (a carried first row keeps the column it got in the previous fragment).

    ``window`` is the sampler's (see ``rlgear.hookspecs.on_postprocess_fragment``); ``policies``
    maps policy ids to policies with a ``critic_spec``. Rows of an inactive slot get zeros.
    """
    agents_index = {a: i for i, a in enumerate(possible_agents)}
    where = {agent: (pid, k) for pid, w in window.items() for k, agent in enumerate(w["agents"])}
    flat, offset = {}, {}
    for pid, w in window.items():
        rows, valid = w["rows"], w["valid"]
        off = offset[pid] = valid.shape[0] - w["recorded"]
        obs = rows[SampleBatch.OBS]
        recorded, slots = valid.shape[0] - off, valid.shape[1]
        obs = _rows_from(obs, off)
        f = flatten_observations(policies[pid].observation_space, _merge_lead(obs, recorded * slots))
        flat[pid] = f.reshape(recorded, slots, -1) * valid[off:, :, None]
    joint = None
    for pid, w in window.items():
        spec = policies[pid].critic_spec
        num_envs = w["num_envs"]
        off = offset[pid]
        recorded, slots = w["valid"].shape[0] - off, w["valid"].shape[1]
        env_of_slot = np.tile(np.arange(num_envs), len(w["agents"]))
        if spec.mode == "local":
            column = flat[pid]
        else:
            if spec.mode == "state":
                state = w["rows"][STATE][off:]
                base = state.reshape(recorded, slots, -1).astype(np.float32)
            else:
                if joint is None:  # [recorded, num_envs, sum of obs dims], possible_agents order
                    parts = []
                    for agent in possible_agents:
                        p, k = where[agent]
                        parts.append(flat[p][:, k * num_envs : (k + 1) * num_envs])
                    joint = np.concatenate(parts, axis=-1)
                base = joint[:, env_of_slot]
            one_hot = np.zeros((slots, len(possible_agents)), np.float32)
            one_hot[np.arange(slots), np.repeat([agents_index[a] for a in w["agents"]], num_envs)] = 1.0
            column = np.concatenate([base, np.broadcast_to(one_hot, (recorded, *one_hot.shape))], axis=-1)
        if column.shape[-1] != spec.dim:
            raise ValueError(
                f"policy '{pid}': the critic input has {column.shape[-1]} features, its critic takes "
                f"{spec.dim} (training.critic_input: {spec.mode})"
            )
        rows = w["rows"]
        full = rows.get(CRITIC_OBS)
        if off == 0 or full is None:
            full = np.zeros((off + recorded, slots, spec.dim), np.float32)
        full[off:] = column
        rows[CRITIC_OBS] = full


def _rows_from(obs: Any, off: int) -> Any:
    if isinstance(obs, dict):
        return {k: _rows_from(v, off) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_rows_from(v, off) for v in obs)
    return obs[off:]


def _merge_lead(obs: Any, n: int) -> Any:
    """``[T, S, ...]`` observations (or a nest of them) as ``[T * S, ...]``."""
    if isinstance(obs, dict):
        return {k: _merge_lead(v, n) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_merge_lead(v, n) for v in obs)
    return np.asarray(obs).reshape(n, *np.shape(obs)[2:])
