"""``env.vectorization`` for the gymnasium adapter: choosing it, and building native vector envs.

Why: some gymnasium envs register a *vector entry point*, a class that steps all
copies at once with numpy (in gymnasium 1.4: CartPole-v0/v1 and the phys2d envs).
It skips the per-env Python loop of ``SyncVectorEnv`` and is several times
faster. ``auto`` (the default) uses it whenever the env has one and nothing
needs per-env objects (``env.wrappers``, video recording of env 0); ``native``
insists on it and says why when it cannot be had.

A native vector env must reset in gymnasium's next-step autoreset mode, which is
what gives ALF's layout (the step after a LAST is a FIRST with reward 0); one
that does not is refused rather than silently mis-mapped.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from rlgear.discovery.registry import resolve_object
from rlgear.errors import ConfigError, PluginError

#: The values of ``env.vectorization``.
VECTORIZATIONS = ("auto", "sync", "async", "native")


def native_spec(name: str) -> EnvSpec | None:
    """The registered spec of ``name`` when it has a vector entry point gymnasium can build, else None.

    ``module:Class`` names are plain classes (no entry point); gymnasium's own
    ``module:EnvId`` form is looked up after importing the module, which registers it.
    """
    env_id = name
    if ":" in name:
        try:
            target = resolve_object(name, "env.name")  # imports the module, registering its ids
        except PluginError:
            target = None
        if isinstance(target, type):
            return None
        env_id = name.split(":", 1)[1]
    spec = gym.registry.get(env_id)
    if spec is None or spec.vector_entry_point is None or spec.additional_wrappers:
        return None
    return spec


def choose(requested: str, name: str, *, per_env_wrappers: bool, video: bool) -> str:
    """The vectorization to build: ``sync``, ``async`` or ``native``; a ConfigError if ``native`` cannot be.

    A video records env 0 as a gymnasium env of its own, so it is always built in
    this process (``sync``), whatever was asked.
    """
    if requested not in VECTORIZATIONS:
        raise ConfigError(f"env.vectorization: '{requested}' is not one of {', '.join(VECTORIZATIONS)}")
    if video:
        return "sync"
    if requested == "auto":
        return "native" if not per_env_wrappers and native_spec(name) is not None else "sync"
    if requested == "native":
        if native_spec(name) is None:
            raise ConfigError(
                f"env.vectorization: native needs an env that registers a vector entry point, and "
                f"'{name}' does not (use auto, sync or async)"
            )
        if per_env_wrappers:
            raise ConfigError(
                "env.vectorization: native steps all envs in one object, so env.wrappers (which wrap "
                "each env) cannot apply; use env.wrappers_vector, or vectorization auto or sync"
            )
    return requested


def make_native(
    name: str, num_envs: int, kwargs: dict[str, Any], horizon: int | None
) -> gym.vector.VectorEnv:
    """``name``'s own vector env: ``env.kwargs`` go to its constructor, ``horizon`` as ``max_episode_steps``."""
    extra = {"max_episode_steps": horizon} if horizon is not None else {}
    try:
        env = gym.make_vec(name, num_envs, vectorization_mode="vector_entry_point", **kwargs, **extra)
    except TypeError as err:
        raise ConfigError(f"env.kwargs: {name} does not accept these arguments: {err}") from err
    except gym.error.Error as err:
        raise ConfigError(f"env.name: {name}: {err}") from err
    except ImportError as err:  # e.g. the phys2d envs' vector classes need jax
        missing = err.name or str(err)
        raise ConfigError(
            f"env.name: {name}: its vector env needs the module '{missing}', which is not installed "
            "(install it; env.vectorization: sync does without the vector class)"
        ) from err
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.NEXT_STEP:
        env.close()
        shown = getattr(mode, "value", mode)
        raise ConfigError(
            f"env.vectorization: native: {name}'s vector env resets in autoreset mode {shown!r}, and rlgear "
            "needs 'NextStep' (the step after a LAST starts the next episode); use sync or async"
        )
    return env
