"""The PettingZoo env adapter: Parallel API and AEC (turn-based) envs as MultiAgentVectorEnvs.

``env.name`` is a PettingZoo env module, dotted (``pettingzoo.classic.connect_four_v3``) or as
``module:attr`` (``mpe2:simple_spread_v3``), or ``module:factory`` for a class or function that
returns a PettingZoo env (``my_pkg.envs:MyParallelEnv``); ``env.kwargs`` go to the factory. A
module's ``parallel_env`` is used when it has one (every agent acts at each step), else its
``env`` (AEC: turn-based, see :mod:`.pettingzoo_aec`). The ``num_envs`` copies are stepped one
after another in this process (``env.vectorization`` ``sync`` or ``auto``).

Action masks: PettingZoo classic games give ``{"observation", "action_mask"}`` Dict observations,
which rlgear's preprocessing turns into the action mask as they are. An env that gives
``action_mask`` in ``info`` instead gets it moved into a Dict observation
``{"observation": ..., "action_mask": MultiBinary(n)}`` by the adapter.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
import warnings
from collections.abc import Callable
from typing import Any

from pettingzoo.utils.env import AECEnv, ParallelEnv

from rlgear.env import EnvAdapter, MultiAgentVectorEnv
from rlgear.errors import ConfigError, did_you_mean

from .pettingzoo_aec import AECVectorEnv
from .pettingzoo_common import ACTION_MASK, PettingZooVectorEnv
from .pettingzoo_parallel import ParallelVectorEnv

#: Packages of PettingZoo's own envs that the ``pettingzoo`` extra installs.
_EXTRA = ("mpe2", "chess", "rlcard", "shimmy", "pyspiel", "open_spiel", "pygame")

_FORMS = "a PettingZoo env module such as pettingzoo.classic.connect_four_v3 or mpe2:simple_spread_v3"


def _import(module_name: str, name: str) -> types.ModuleType:
    try:
        # pettingzoo >= 1.27 prefers its registry and warns on import; the module form still works
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*environment creation")
            return importlib.import_module(module_name)
    except ImportError as err:
        missing = (getattr(err, "name", None) or "").split(".")[0]
        hint = (
            " (pip install 'rlgear[pettingzoo]' installs mpe2 and the classic games)"
            if missing in _EXTRA
            else ""
        )
        raise ConfigError(
            f"env.name: {name}: cannot import module '{module_name}' ({err}){hint}; expected {_FORMS}"
        ) from err


def _submodules(target: Any) -> list[str]:
    """The names of the modules in ``target`` if it is a package (found without importing them)."""
    if not isinstance(target, types.ModuleType) or not hasattr(target, "__path__"):
        return []
    return [module.name for module in pkgutil.iter_modules(target.__path__)]


def resolve_factory(name: str) -> Callable[..., Any]:
    """``env.name`` -> the callable that builds one PettingZoo env, or a ConfigError saying what to write."""
    module_name, sep, attr = name.partition(":")
    if not module_name or (sep and not attr):
        raise ConfigError(f"env.name: '{name}' is not a module path; expected {_FORMS}")
    target: Any = _import(module_name, name)
    for part in attr.split(".") if attr else ():
        if not hasattr(target, part):
            submodules = _submodules(target)
            if part in submodules:  # a module its package does not import itself
                target = _import(f"{target.__name__}.{part}", name)
                continue
            public = [key for key in dir(target) if not key.startswith("_")] + submodules
            raise ConfigError(
                f"env.name: {name}: '{getattr(target, '__name__', module_name)}' has no attribute "
                f"'{part}'{did_you_mean(part, public)}"
            )
        target = getattr(target, part)
    if isinstance(target, types.ModuleType):
        for factory in ("parallel_env", "env"):
            if callable(getattr(target, factory, None)):
                return getattr(target, factory)
        raise ConfigError(
            f"env.name: {name}: module '{target.__name__}' has neither parallel_env() nor env(); expected {_FORMS}"
        )
    if not callable(target):
        raise ConfigError(
            f"env.name: {name} is a {type(target).__name__}, not a PettingZoo env or its factory"
        )
    return target


def build_env(factory: Callable[..., Any], kwargs: dict[str, Any], name: str) -> Any:
    """One env from ``factory(**kwargs)``; ConfigError for kwargs it refuses or a non-PettingZoo result."""
    try:
        env = factory(**kwargs)
    except TypeError as err:
        raise ConfigError(f"env.kwargs: {name} does not accept these arguments: {err}") from err
    if not isinstance(env, ParallelEnv | AECEnv):
        raise ConfigError(
            f"env.name: {name} built a {type(env).__name__}, not a PettingZoo ParallelEnv or AECEnv "
            "(for a gymnasium env, use env.adapter: gymnasium)"
        )
    return env


def _mask_in_info(env: Any) -> bool:
    """Whether ``env`` gives its action mask in ``info`` (and not in the observation): probed by a reset."""
    if isinstance(env, ParallelEnv):
        _, infos = env.reset()
    else:
        env.reset()
        infos = env.infos
    for agent, info in infos.items():
        if isinstance(info, dict) and ACTION_MASK in info:
            space = env.observation_space(agent)
            return not (
                hasattr(space, "spaces") and isinstance(space.spaces, dict) and ACTION_MASK in space.spaces
            )
    return False


class PettingZooAdapter(EnvAdapter):
    description = "PettingZoo envs (Parallel API, and AEC turn-based games one move at a time): multi-agent"
    default_env = "mpe2:simple_spread_v3"  # what `rlgear plugins --check pettingzoo` builds
    default_env_kwargs: dict[str, Any] = {"continuous_actions": False}

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> MultiAgentVectorEnv:
        """``num_envs`` copies of env ``name``, stepped in this process."""
        if vectorization not in ("sync", "auto"):
            raise ConfigError(
                f"env.vectorization: the pettingzoo adapter steps its envs in this process ('sync' or "
                f"'auto'), got '{vectorization}'"
            )
        factory = resolve_factory(name)
        envs = [build_env(factory, dict(kwargs), name) for _ in range(num_envs)]
        kind: type[PettingZooVectorEnv] = (
            ParallelVectorEnv if isinstance(envs[0], ParallelEnv) else AECVectorEnv
        )
        try:
            return kind(envs, name, horizon, _mask_in_info(envs[0]))
        except BaseException:
            for env in envs:
                env.close()
            raise
