"""The ``vector`` env adapter: your own vectorized env, from a ``module:factory`` function.

``env.name: "my_package.envs:make_team"`` with ``env.kwargs: {size: 5}`` calls
``make_team(num_envs, size=5)``, which returns an :class:`rlgear.env.VectorEnv` (one agent) or an
:class:`rlgear.env.MultiAgentVectorEnv` (several). For envs written directly in numpy over all env
slots at once: no gymnasium, no per-env Python loop. The factory also receives ``horizon=`` and
``seed_offset=`` when it accepts them (``seed_offset`` is the worker's share of the seeds); a run
with ``workers.horizon`` set refuses a factory that does not take ``horizon``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from rlgear.discovery.registry import resolve_object
from rlgear.env import EnvAdapter, MultiAgentVectorEnv, VectorEnv
from rlgear.errors import ConfigError, PluginError


class VectorFactoryAdapter(EnvAdapter):
    description: ClassVar[str] = "your own VectorEnv or MultiAgentVectorEnv from a 'module:factory' function"
    check_skip_reason: ClassVar[str] = "it needs env.name: 'module:factory' naming your own factory"

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> VectorEnv | MultiAgentVectorEnv:
        try:
            factory = resolve_object(name, "env.name")
        except PluginError as err:
            raise ConfigError(f"{err} (the vector adapter takes 'module:factory')") from err
        if not callable(factory):
            raise ConfigError(f"env.name: '{name}' is not callable (expected a factory function or class)")
        accepted = _parameters(factory)
        extra: dict[str, Any] = {}
        if horizon is not None:
            if "horizon" not in accepted:
                raise ConfigError(
                    f"workers.horizon: the factory '{name}' takes no 'horizon' argument, so the vector "
                    "adapter cannot truncate its episodes; remove workers.horizon or add the argument"
                )
            extra["horizon"] = horizon
        if "seed_offset" in accepted:
            extra["seed_offset"] = worker_index
        try:
            inspect.signature(factory).bind(num_envs, **dict(kwargs), **extra)
        except TypeError as err:
            raise ConfigError(
                f"env.kwargs: the factory '{name}' does not take these arguments: {err}"
            ) from err
        except ValueError:
            pass  # no signature to check (a builtin): the call says what is wrong
        env = factory(num_envs, **dict(kwargs), **extra)
        if not isinstance(env, VectorEnv | MultiAgentVectorEnv):
            raise ConfigError(
                f"env.name: the factory '{name}' returned {type(env).__name__}, expected an "
                "rlgear.env.VectorEnv or MultiAgentVectorEnv"
            )
        if env.num_envs != num_envs:
            raise ConfigError(
                f"env.name: the factory '{name}' built {env.num_envs} envs, {num_envs} were asked"
            )
        return env


def _parameters(factory: Any) -> set[str]:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {"horizon", "seed_offset"}
    return {p.name for p in params}
