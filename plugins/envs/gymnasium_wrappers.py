"""``env.wrappers`` and ``env.wrappers_vector`` for the gymnasium adapter: checks, wrapping, statistics.

Why a module of its own: the same wrapper specs are checked when the config is read
(importable, the right kind of gymnasium wrapper, kwargs its constructor accepts, each
error naming ``env.wrappers[i].name`` or ``.kwargs``), applied in each env's factory
(so sync and async vector envs both get them), and the vector wrappers' running
statistics (``RunningMeanStd``: NormalizeObservation's ``obs_rms``, NormalizeReward's
``return_rms``) go into checkpoints as plain arrays.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd

from rlgear.discovery.registry import resolve_object
from rlgear.env import ENV_RETURN_INFO_KEY
from rlgear.errors import CheckpointError, PluginError, did_you_mean

#: ``(class path, kwargs)``: what the env factories receive (plain, so async vector envs can pickle it).
Spec = tuple[str, dict[str, Any]]

_KINDS = {
    "wrappers": (gym.Wrapper, "gymnasium.Wrapper", "env.wrappers_vector"),
    "wrappers_vector": (gym.vector.VectorWrapper, "gymnasium.vector.VectorWrapper", "env.wrappers"),
}


def specs(items: Sequence[Any]) -> list[Spec]:
    """``WrapperConfig`` items (or ``(name, kwargs)`` pairs) as picklable ``(name, kwargs)`` pairs."""
    out = []
    for item in items:
        name, kwargs = (item.name, item.kwargs) if hasattr(item, "name") else item
        out.append((str(name), dict(kwargs)))
    return out


def resolve_wrapper(name: str) -> Any:
    """The object named ``'package.module.Class'`` or ``'module:Class'``; PluginError if it can't be imported."""
    if ":" in name:
        return resolve_object(name, "wrapper")
    module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise PluginError(f"expected 'package.module.Class' or 'module:Class', got '{name}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise PluginError(f"cannot import module '{module_name}': {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PluginError(f"module '{module_name}' has no attribute '{attr}'") from None


def check(config: Any) -> None:
    """Refuse a wrapper that can't be built: ``config.fail`` naming ``env.<key>[i].name`` or ``.kwargs``."""
    for key, (base, base_name, other_key) in _KINDS.items():
        for i, (name, kwargs) in enumerate(specs(getattr(config.env, key))):
            where = f"env.{key}[{i}]"
            try:
                cls = resolve_wrapper(name)
            except PluginError as err:
                raise config.fail(f"{where}.name", str(err)) from err
            if not (isinstance(cls, type) and issubclass(cls, base)):
                other_base = _KINDS["wrappers_vector" if key == "wrappers" else "wrappers"][0]
                hint = (
                    f" (it is a {other_base.__module__}.{other_base.__qualname__}: put it in {other_key})"
                    if isinstance(cls, type) and issubclass(cls, other_base)
                    else ""
                )
                raise config.fail(f"{where}.name", f"'{name}' is not a {base_name} subclass{hint}")
            _check_kwargs(cls, kwargs, f"{where}.kwargs", config.fail)


def probe(config: Any, make_bare_env: Callable[[], gym.Env]) -> None:
    """Reset and step one env as its wrappers are added one at a time; ``config.fail`` names the one that breaks it.

    Why: a wrapper whose arguments fit its signature can still break the env
    (``TransformReward`` with ``func: null`` raises on the first step), and a
    run would meet that as a traceback from deep inside sampling. Adding the
    wrappers one at a time (``env.wrappers``, then ``env.wrappers_vector`` around
    a one-env vector env) tells which one did it. An env that fails without its
    wrappers is left alone: building the run's envs reports a bad name or
    kwargs, and a run reports an env that raises.
    """
    per_env, vector = specs(config.env.wrappers), specs(config.env.wrappers_vector)
    if not per_env and not vector:
        return
    try:
        env = make_bare_env()
    except Exception:
        return
    envs = [env]  # everything built, closed at the end (the outermost closes what it wraps)
    try:
        if _failure(env) is not None:
            return
        for i, (name, kwargs) in enumerate(per_env):
            env = _add_wrapper(config, f"env.wrappers[{i}]", env, name, kwargs)
            envs.append(env)
        if not vector:
            return
        try:
            vec = gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        except Exception:
            return  # not the wrappers' doing: building the run's vector envs says what
        envs.append(vec)
        for i, (name, kwargs) in enumerate(vector):
            vec = _add_wrapper(config, f"env.wrappers_vector[{i}]", vec, name, kwargs)
            envs.append(vec)
    finally:
        with contextlib.suppress(Exception):  # a wrapper that broke the env may break its close too
            envs[-1].close()


def _add_wrapper(config: Any, where: str, env: Any, name: str, kwargs: dict[str, Any]) -> Any:
    """``env`` wrapped by one spec, reset and stepped once; ``config.fail(where, ...)`` if either raises."""
    cls = resolve_wrapper(name)  # check() has resolved it already
    label = f"{cls.__name__}({', '.join(f'{key}={value!r}' for key, value in kwargs.items())})"
    try:
        wrapped = cls(env, **kwargs)
    except Exception as err:
        raise config.fail(where, f"{label} cannot wrap the env: {type(err).__name__}: {err}") from err
    failure = _failure(wrapped)
    if failure is not None:
        stage, err = failure
        with contextlib.suppress(Exception):  # its own resources; the env beneath is closed by the caller
            wrapped.close()
        raise config.fail(
            where, f"{label} breaks the env's first {stage}: {type(err).__name__}: {err}"
        ) from err
    return wrapped


def _failure(env: Any) -> tuple[str, Exception] | None:
    """``('reset' | 'step', error)`` if a seeded reset or one step with a sampled action raises, else None."""
    stage = "reset"
    try:
        env.reset(seed=0)
        stage = "step"
        env.action_space.seed(0)
        env.step(env.action_space.sample())
    except Exception as err:
        return stage, err
    return None


def _check_kwargs(cls: type, kwargs: dict[str, Any], where: str, fail: Any) -> None:
    """The constructor's signature (after the env it wraps) must take ``kwargs``: unknown or missing names."""
    signature = inspect.signature(cls)
    params = list(signature.parameters.values())[1:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes = f"(its arguments: {', '.join(names) or 'none'})"
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        for key in kwargs:
            if key not in names:
                raise fail(
                    where, f"{cls.__name__} takes no argument '{key}'{did_you_mean(key, names)} {takes}"
                )
    try:
        signature.bind(None, **kwargs)
    except TypeError as err:
        raise fail(where, f"{cls.__name__}: {err} {takes}") from err


class EnvReturn(gym.Wrapper):
    """Beneath ``env.wrappers``: the env's own return so far, in ``info['env_return']`` at every step.

    Why: wrappers above may change the rewards (clipping, scaling, normalization) while the run
    must report the env's returns (:data:`rlgear.env.ENV_RETURN_INFO_KEY`). A running sum rather
    than an episode-end figure: a wrapper above (a time limit) may end the episode where this
    env does not, and frame-skipping wrappers above keep only their last step's info.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._return = 0.0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        return obs, reward, terminated, truncated, {**info, ENV_RETURN_INFO_KEY: self._return}


class VectorEnvReturn(gym.vector.VectorWrapper):
    """Beneath ``env.wrappers_vector`` (when no ``env.wrappers`` record it per env): each env's own
    return so far, in ``info['env_return']`` (mask ``_env_return``) at every step.

    Next-step autoreset: a slot that ended at the previous step is reset by this one (reward 0),
    so its sum starts again here, as gymnasium's vector ``RecordEpisodeStatistics`` does.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._mask = np.ones(self.num_envs, dtype=bool)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._returns[:] = 0.0
        self._ended[:] = False
        return self.env.reset(**kwargs)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._returns[self._ended] = 0.0
        self._returns += rewards
        self._ended = np.logical_or(terminated, truncated)
        info = {**info, ENV_RETURN_INFO_KEY: self._returns.copy(), f"_{ENV_RETURN_INFO_KEY}": self._mask}
        return obs, rewards, terminated, truncated, info


def apply(env: Any, wrapper_specs: Sequence[Spec]) -> Any:
    """``env`` wrapped by each spec in order (the first wraps ``env`` itself), with :class:`EnvReturn`
    beneath them when there are any."""
    if wrapper_specs:
        env = EnvReturn(env)
    for name, kwargs in wrapper_specs:
        env = resolve_wrapper(name)(env, **kwargs)
    return env


def apply_vector(
    env: gym.vector.VectorEnv, wrapper_specs: Sequence[Spec], record_env_return: bool = True
) -> tuple[Any, list[Any]]:
    """The vector env wrapped by each spec in order, and the wrappers (in config order); with
    :class:`VectorEnvReturn` beneath them if ``record_env_return`` and there are any."""
    if wrapper_specs and record_env_return:
        env = VectorEnvReturn(env)
    applied = []
    for name, kwargs in wrapper_specs:
        env = resolve_wrapper(name)(env, **kwargs)
        applied.append(env)
    return env, applied


def _statistics(wrappers: Sequence[Any]) -> dict[str, RunningMeanStd]:
    """``{'wrappers_vector/<i>/<attribute>': RunningMeanStd}`` of the wrappers, config order."""
    out = {}
    for i, wrapper in enumerate(wrappers):
        for attr, value in sorted(vars(wrapper).items()):
            if isinstance(value, RunningMeanStd):
                out[f"wrappers_vector/{i}/{attr}"] = value
    return out


def get_state(wrappers: Sequence[Any]) -> dict[str, np.ndarray]:
    """Mean, variance and count of every running statistic, as arrays (copies)."""
    arrays = {}
    for key, rms in _statistics(wrappers).items():
        arrays[f"{key}/mean"] = np.array(rms.mean, copy=True)
        arrays[f"{key}/var"] = np.array(rms.var, copy=True)
        arrays[f"{key}/count"] = np.array(rms.count, dtype=np.float64)
    return arrays


def set_state(wrappers: Sequence[Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Load :func:`get_state`'s arrays; refuses (changing nothing) arrays that don't fit these wrappers."""
    stats = _statistics(wrappers)
    expected = {f"{key}/{part}" for key in stats for part in ("mean", "var", "count")}
    if set(arrays) != expected:
        raise CheckpointError(
            f"the checkpoint's env statistics ({', '.join(sorted(arrays)) or 'none'}) do not fit "
            f"env.wrappers_vector ({', '.join(sorted(expected)) or 'no running statistics'})"
        )
    for key, rms in stats.items():
        for part in ("mean", "var"):
            if np.shape(arrays[f"{key}/{part}"]) != np.shape(getattr(rms, part)):
                raise CheckpointError(
                    f"the checkpoint's env statistic {key}/{part} has shape {np.shape(arrays[f'{key}/{part}'])}, "
                    f"the env's {np.shape(getattr(rms, part))}"
                )
    for key, rms in stats.items():
        rms.mean = np.array(arrays[f"{key}/mean"], copy=True)  # as saved: updates promote float32 to 64
        rms.var = np.array(arrays[f"{key}/var"], copy=True)
        rms.count = float(arrays[f"{key}/count"])


def freeze(wrappers: Sequence[Any]) -> None:
    """Stop the wrappers updating their statistics (gymnasium's ``update_running_mean``)."""
    for wrapper in wrappers:
        if hasattr(type(wrapper), "update_running_mean"):
            wrapper.update_running_mean = False
