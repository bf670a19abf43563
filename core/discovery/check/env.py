"""The checks of an env adapter plugin (``rlgear plugins --check``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.discovery import registry
from rlgear.discovery.check._base import (
    _Broke,
    _Checks,
    _load,
)


def _check_env(checks: _Checks, info: registry.PluginInfo, load_name: str, env_name: str | None) -> None:
    from rlgear.env import MultiAgentVectorEnv, VectorEnv
    from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
    from rlgear.testing import ContractError, check_vector_env

    cls = _load(checks, info, load_name)
    with checks.step("instantiate", "an EnvAdapter is built with no arguments: give __init__ none"):
        adapter = cls()
    checks.add("instantiate", True, f"{cls.__qualname__}()")
    reason = getattr(cls, "check_skip_reason", "")
    if reason:
        checks.skip("TimeStep contract", reason)
        return
    kwargs: dict[str, Any] = {}
    if env_name is None:  # the adapter's own choice, with the kwargs it declares for it
        kwargs = dict(getattr(cls, "default_env_kwargs", {}) or {})
        env_name = getattr(cls, "default_env", None)
        names = getattr(cls, "names", None)
        if env_name is None and isinstance(names, list | tuple) and names:
            env_name = names[0]
    if not env_name:
        checks.add(
            "env name",
            False,
            "no env to build: the adapter declares no default_env and no --env-name was given",
            "set the class attribute default_env = 'an-env-name' on the adapter, or pass --env-name",
        )
        return
    fix = (
        "make() must return a rlgear.VectorEnv; raise rlgear.errors.ConfigError naming the key for bad input"
    )
    with checks.step("make", fix):
        env = adapter.make(env_name, 4, kwargs=kwargs, vectorization="sync", horizon=None, worker_index=0)
    if isinstance(env, MultiAgentVectorEnv):
        _check_multi_agent(checks, adapter, env, env_name, kwargs)
        return
    if not isinstance(env, VectorEnv):
        checks.add(
            "make",
            False,
            f"make() returned {type(env).__name__}, not a rlgear.VectorEnv or MultiAgentVectorEnv",
            fix,
        )
        return
    spaces = f"observations {_space(env.observation_space)}, actions {_space(env.action_space)}"
    checks.add("make", True, f"'{env_name}' x 4: {spaces}")
    spaces = Box | Discrete | MultiDiscrete | MultiBinary | Dict | Tuple
    spaces_ok = (
        isinstance(env.observation_space, spaces)
        and isinstance(env.action_space, Box | Discrete | MultiDiscrete | Dict | Tuple)
        and getattr(env, "num_envs", None) == 4
    )
    checks.add(
        "spaces",
        spaces_ok,
        "rlgear.spaces spaces, num_envs 4"
        if spaces_ok
        else f"observation_space {type(env.observation_space).__name__}, action_space "
        f"{type(env.action_space).__name__}, num_envs {getattr(env, 'num_envs', None)!r}",
        "set num_envs and use rlgear.spaces spaces (Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple) "
        "for observation_space and action_space",
    )
    if not spaces_ok:
        env.close()
        return
    with checks.step(
        "TimeStep contract",
        "follow rlgear.env.VectorEnv: reset() gives FIRST (reward 0, discount 1); LAST ends every "
        "episode (discount 0 terminated, 1 truncated); the step after a LAST is the next FIRST, "
        "reward 0, prev_action 0",
    ):
        try:
            counts = check_vector_env(env, steps=300, seed=0)
        except ContractError as err:
            raise _Broke("TimeStep contract", f"check_vector_env: {err}") from err
    checks.add(
        "TimeStep contract",
        True,
        f"check_vector_env: {counts['steps']} steps, {counts['episodes_terminated']} terminated and "
        f"{counts['episodes_truncated']} truncated episodes",
    )
    _check_horizon(checks, adapter, env_name, kwargs)


def _check_multi_agent(
    checks: _Checks, adapter: Any, env: Any, env_name: str, kwargs: dict[str, Any]
) -> None:
    """The checks of a MultiAgentVectorEnv: per-agent spaces, the MultiAgentTimeStep table, horizon."""
    from rlgear.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
    from rlgear.testing import ContractError, check_multi_agent_env

    agents = tuple(getattr(env, "possible_agents", ()))
    observation_spaces = getattr(env, "observation_spaces", {}) or {}
    action_spaces = getattr(env, "action_spaces", {}) or {}
    shown = ", ".join(
        f"{agent}: {_space(observation_spaces.get(agent))} -> {_space(action_spaces.get(agent))}"
        for agent in agents
    )
    checks.add("make", True, f"'{env_name}' x 4, multi-agent ({shown})")
    observation_types = Box | Discrete | MultiDiscrete | MultiBinary | Dict | Tuple
    action_types = Box | Discrete | MultiDiscrete | Dict | Tuple
    bad = [
        agent
        for agent in agents
        if not isinstance(observation_spaces.get(agent), observation_types)
        or not isinstance(action_spaces.get(agent), action_types)
    ]
    spaces_ok = bool(agents) and not bad and getattr(env, "num_envs", None) == 4
    checks.add(
        "spaces",
        spaces_ok,
        f"rlgear.spaces spaces for {len(agents)} agents, num_envs 4"
        if spaces_ok
        else f"possible_agents {agents!r}, agents without rlgear spaces {bad}, num_envs "
        f"{getattr(env, 'num_envs', None)!r}",
        "set num_envs, possible_agents, and observation_spaces / action_spaces (agent -> rlgear.spaces space)",
    )
    if not spaces_ok:
        env.close()
        return
    with checks.step(
        "TimeStep contract",
        "follow rlgear.env.MultiAgentTimeStep: per slot and agent, FIRST (reward 0) at its first step, "
        "LAST (discount 0 terminated, 1 truncated) at its last, inactive after it until episode_end",
    ):
        try:
            counts = check_multi_agent_env(env, steps=300, seed=0)
        except ContractError as err:
            raise _Broke("TimeStep contract", f"check_multi_agent_env: {err}") from err
    checks.add(
        "TimeStep contract",
        True,
        f"check_multi_agent_env: {counts['env_steps']} env steps, {counts['agent_steps']} agent steps, "
        f"{counts['episodes']} episodes",
    )
    _check_multi_agent_horizon(checks, adapter, env_name, kwargs)


def _check_multi_agent_horizon(checks: _Checks, adapter: Any, env_name: str, kwargs: dict[str, Any]) -> None:
    from rlgear.testing import random_multi_agent_actions
    from rlgear.timestep import StepType

    horizon = 3
    fix = (
        "make(..., horizon=H) must end every episode after at most H steps: every agent still going gets "
        "LAST with discount 1 and episode_end is set"
    )
    with checks.step("horizon", fix):
        env = adapter.make(env_name, 2, kwargs=kwargs, vectorization="sync", horizon=horizon, worker_index=0)
        try:
            rng = np.random.default_rng(0)
            ts = env.reset(seed=0)
            length = np.zeros(env.num_envs, dtype=np.int64)
            for _ in range(4 * horizon):
                ended = ts.episode_end
                ts = env.step(random_multi_agent_actions(env, ts, rng))
                length = np.where(ended, 0, length + 1)
                too_long = np.flatnonzero((length >= horizon) & ~ts.episode_end)
                if too_long.size:
                    raise _Broke("horizon", f"env {too_long[0]} ran {horizon} steps without episode_end")
                for agent in env.possible_agents:
                    cut = ts.active[agent] & ts.episode_end & (length == horizon)
                    step = ts.steps[agent]
                    if np.any(cut & ((step.step_type != StepType.LAST) | (step.discount != 1))):
                        raise _Broke(
                            "horizon", f"agent {agent} did not get LAST with discount 1 at the horizon"
                        )
        finally:
            env.close()
    checks.add("horizon", True, f"horizon={horizon} truncates every episode")


def _space(space: Any) -> str:
    if type(space).__name__ in ("Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"):
        return repr(space)
    shape = getattr(space, "shape", "?")
    return f"{type(space).__name__}(n={space.n})" if hasattr(space, "n") else f"{type(space).__name__}{shape}"


def _check_horizon(checks: _Checks, adapter: Any, env_name: str, kwargs: dict[str, Any]) -> None:
    from rlgear.testing import random_actions
    from rlgear.timestep import StepType

    horizon = 3
    fix = (
        "make(..., horizon=H) must end every episode after at most H steps with LAST and discount 1 "
        "(a truncation), whatever the env's own time limit"
    )
    with checks.step("horizon", fix):
        env = adapter.make(env_name, 2, kwargs=kwargs, vectorization="sync", horizon=horizon, worker_index=0)
        try:
            rng = np.random.default_rng(0)
            ts = env.reset(seed=0)
            length = np.zeros(env.num_envs, dtype=np.int64)
            for _ in range(4 * horizon):
                ts = env.step(random_actions(env, rng))
                length = np.where(ts.step_type == StepType.FIRST, 0, length + 1)
                too_long = np.flatnonzero(length > horizon)
                if too_long.size:
                    raise _Broke(
                        "horizon",
                        f"env {too_long[0]} ran {horizon + 1} steps without a LAST with horizon={horizon}",
                    )
        finally:
            env.close()
    checks.add("horizon", True, f"horizon={horizon} truncates every episode")
