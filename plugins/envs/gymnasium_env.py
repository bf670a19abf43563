"""The gymnasium env adapter: any registered id or ``module:Class``, vectorized.

Uses gymnasium's own vector envs (the env's native vector class when it
registers one, else sync, or async with one subprocess per env; see
:mod:`.gymnasium_native`) in next-step autoreset mode, which gives ALF's
layout exactly: the step after a LAST is the FIRST of the next episode, with
reward 0, and the action sent at the LAST step is ignored. ``terminated`` maps
to LAST with discount 0, ``truncated`` (time limits, the run's ``horizon``) to
LAST with discount 1.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import math
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rlgear.discovery.registry import resolve_object
from rlgear.env import EnvAdapter, VectorEnv, VideoRequest
from rlgear.errors import ConfigError, NonFiniteError, PluginError, did_you_mean
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

from . import atari, gymnasium_native, gymnasium_wrappers

FLOAT32_MAX = float(np.finfo(np.float32).max)


def convert_space(space: gym.Space, what: str, env_name: str) -> Space:
    """gymnasium space -> rlgear space (recursively for Dict and Tuple), or a ConfigError saying what to do."""
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError(
                f"env.name: {env_name}: Discrete {what} space starting at {space.start} is not supported "
                f"(rlgear's Discrete counts from 0): wrap the env so that its {what} values are "
                f"0..{int(space.n) - 1}, e.g. a gymnasium "
                f"{'ActionWrapper adding' if what.startswith('action') else 'ObservationWrapper subtracting'} "
                f"{space.start}"
            )
        return Discrete(int(space.n))
    if isinstance(space, gym.spaces.Box):
        return Box(space.low, space.high, space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1 or np.any(space.start != 0):
            raise ConfigError(
                f"env.name: {env_name}: MultiDiscrete {what} space {space} is not supported "
                "(a flat nvec starting at 0 is)"
            )
        return MultiDiscrete(tuple(int(n) for n in space.nvec))
    if isinstance(space, gym.spaces.MultiBinary):
        return MultiBinary(tuple(int(n) for n in np.atleast_1d(space.n)))
    if isinstance(space, gym.spaces.Dict):
        return Dict(
            {key: convert_space(sub, f"{what}[{key!r}]", env_name) for key, sub in space.spaces.items()}
        )
    if isinstance(space, gym.spaces.Tuple):
        return Tuple(convert_space(sub, f"{what}[{i}]", env_name) for i, sub in enumerate(space.spaces))
    raise ConfigError(
        f"env.name: {env_name}: {what} space {type(space).__name__} is not supported (Box, Discrete, "
        "MultiDiscrete, MultiBinary, Dict and Tuple are); wrap the env, e.g. with "
        "gymnasium.wrappers.FlattenObservation"
    )


def _leaves(obs: Any) -> list[Any]:
    """The arrays of a (possibly nested) batched observation."""
    if isinstance(obs, dict):
        return [leaf for value in obs.values() for leaf in _leaves(value)]
    if isinstance(obs, tuple):
        return [leaf for value in obs for leaf in _leaves(value)]
    return [obs]


def _make_env(
    name: str,
    kwargs: dict[str, Any],
    horizon: int | None,
    wrappers: Sequence[gymnasium_wrappers.Spec] = (),
    preset: str | None = None,
) -> gym.Env:
    """Build one env, wrapped by ``env.wrappers`` in order (module-level so async vector envs can pickle it).

    With ``env.preset`` the preset's wrappers come first (around the bare env), then the
    horizon's time limit (so ``workers.horizon`` counts agent steps, not emulator frames),
    then ``env.wrappers``.
    """
    if preset is None:
        return gymnasium_wrappers.apply(_make_bare_env(name, kwargs, horizon), wrappers)
    make_kwargs, preset_wrappers = atari.gymnasium_preset(preset, kwargs)
    time_limit = (
        [("gymnasium.wrappers.TimeLimit", {"max_episode_steps": horizon})] if horizon is not None else []
    )
    return gymnasium_wrappers.apply(
        _make_bare_env(name, make_kwargs, None), [*preset_wrappers, *time_limit, *wrappers]
    )


#: The entry-point group through which env packages register a namespace of ids (e.g. MinAtar).
ENV_PLUGIN_GROUP = "gymnasium.envs"

#: Namespaces whose package registers its ids when imported, with no entry point (ale-py registers
#: ALE/Pong-v5 ... on ``import ale_py``; gymnasium 1.x asks for ``gym.register_envs(ale_py)``), and
#: the rlgear extra that installs it.
NAMESPACE_MODULES = {"ALE": ("ale_py", "atari")}


def register_env_plugin(name: str) -> None:
    """Register the namespace of an id ``Namespace/Env-vN`` from its package's ``gymnasium.envs`` entry point.

    Why: some packages (MinAtar's ``MinAtar/Breakout-v1`` ...) register their ids only
    through an entry point of that group named after the namespace, which gym and
    gymnasium < 1.0 loaded on import and gymnasium 1.x no longer does. Loading just
    the entry point of the id's own namespace, when the id is not registered yet,
    keeps ``env.name: MinAtar/Breakout-v1`` working without importing every
    installed env package. Anything else is left to gymnasium's own errors.
    """
    if ":" in name or "/" not in name or name in gym.registry:
        return
    namespace = name.split("/", 1)[0]
    if namespace in NAMESPACE_MODULES:
        module, extra = NAMESPACE_MODULES[namespace]
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(
                f"env.name: {name} needs {module}: pip install 'rlgear[{extra}]' ({err})"
            ) from err
        if name in gym.registry:
            return
    for entry_point in importlib.metadata.entry_points(group=ENV_PLUGIN_GROUP, name=namespace):
        try:
            register = entry_point.load()
            if callable(register):
                register()
        except Exception as err:
            raise PluginError(
                f"env.name: {name}: the '{ENV_PLUGIN_GROUP}' entry point '{namespace}' of "
                f"{entry_point.value} failed to register its envs: {type(err).__name__}: {err}"
            ) from err
        if name in gym.registry:
            return


def _make_bare_env(name: str, kwargs: dict[str, Any], horizon: int | None) -> gym.Env:
    register_env_plugin(name)  # also here: async vector envs build their envs in fresh processes
    if ":" in name:
        try:
            target = resolve_object(name, "env.name")
        except PluginError:
            target = None
        if isinstance(target, type):
            env = target(**kwargs)
            if horizon is not None:
                env = gym.wrappers.TimeLimit(env, max_episode_steps=horizon)
            return env
    extra = {"max_episode_steps": horizon} if horizon is not None else {}
    # A registered id, or gymnasium's own 'module:EnvId' form (imports module to register it).
    return gym.make(name, **kwargs, **extra)


def _recorded(env: gym.Env, video: VideoRequest, name: str) -> gym.Env:
    """``env`` (made with render_mode='rgb_array') recording the episodes ``video`` asks for."""
    if env.render_mode != "rgb_array" or "rgb_array" not in env.metadata.get("render_modes", ()):
        env.close()
        modes = ", ".join(env.metadata.get("render_modes", ())) or "none"
        raise ConfigError(
            f"env.name: {name} cannot be recorded: it does not render rgb_array frames "
            f"(its render modes: {modes})"
        )
    try:
        with warnings.catch_warnings():  # "Overwriting existing videos": the file names tell clips apart
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
            return gym.wrappers.RecordVideo(
                env,
                video.folder,
                episode_trigger=video.wants,
                name_prefix=video.name_prefix,
                disable_logger=True,
            )
    except gym.error.DependencyNotInstalled as err:
        env.close()
        raise ConfigError(f"recording videos needs moviepy: pip install 'rlgear[video]' ({err})") from err


def _check_name(name: str) -> None:
    if ":" in name:
        return
    register_env_plugin(name)
    if name not in gym.registry:
        raise ConfigError(
            f"env.name: unknown gymnasium env '{name}'{did_you_mean(name, gym.registry.keys())} "
            "(a registered id such as CartPole-v1, or 'module:Class')"
        )


_FIRST = int(StepType.FIRST)


class GymnasiumVectorEnv(VectorEnv):
    """A gymnasium vector env emitting rlgear TimeSteps."""

    def __init__(self, env: gym.vector.VectorEnv, name: str, vector_wrappers: Sequence[Any] = ()):
        self.env = env
        self.name = name
        #: ``env.wrappers_vector`` as applied (config order); their running statistics are the env's state.
        self.vector_wrappers = list(vector_wrappers)
        self.num_envs = env.num_envs
        self.observation_space = convert_space(env.single_observation_space, "observation", name)
        self.action_space = convert_space(env.single_action_space, "action", name)
        self._env_ids = np.arange(self.num_envs, dtype=np.int32)
        self._prev_last = np.zeros(self.num_envs, dtype=bool)
        self._any_first = False
        self._mids = np.full(self.num_envs, StepType.MID, dtype=np.int32)
        self._ones = np.ones(self.num_envs, dtype=np.float32)
        space = self.action_space
        #: Tuple/Dict actions: prev_action holds flat rows (rlgear.spaces.flatten_action), as batches do.
        self._structured_actions = isinstance(space, Tuple | Dict)
        if self._structured_actions:
            action_shape: tuple[int, ...] = (self.num_envs, flat_action_dim(space))
        else:
            action_shape = (self.num_envs, *space.shape)
        action_dtype = np.int64 if isinstance(space, Discrete | MultiDiscrete) else np.float32
        self._zero_actions = np.zeros(action_shape, dtype=action_dtype)

    def _check_finite(self, obs: Any, reward: np.ndarray | None) -> None:
        """Refuse NaN, infinity and values beyond float32 at the boundary, naming the env and slot.

        Why: learning runs in float32; a reward of 1e39 (finite in float64)
        becomes inf there and turns every later loss into NaN. About a
        microsecond per step against a poisoned run: a float64 sum of float32
        terms cannot overflow, so it is finite exactly when every term is (NaN and
        infinity propagate); one reduction clears the common case and only a bad
        step pays for the check that names the slots.
        """
        if reward is not None and not math.isfinite(np.add.reduce(reward, dtype=np.float64)):
            slots = np.flatnonzero(~np.isfinite(reward)).tolist()
            raise NonFiniteError(
                f"env {self.name}: step returned a reward that is NaN, infinite or beyond float32 in env "
                f"slot(s) {slots} (rlgear trains in float32; scale or clip the env's rewards)"
            )
        if isinstance(obs, dict | tuple):
            for leaf in _leaves(obs):
                self._check_finite(leaf, None)
            return
        if isinstance(obs, np.ndarray) and obs.dtype.kind == "f":
            if obs.dtype.itemsize <= 4:
                if math.isfinite(np.add.reduce(obs, axis=None, dtype=np.float64)):
                    return
            elif np.maximum.reduce(np.abs(obs), axis=None) <= FLOAT32_MAX:  # False for NaN
                return
            bad = ~np.isfinite(obs)
            if obs.dtype.itemsize > 4:
                bad |= np.abs(np.nan_to_num(obs)) > FLOAT32_MAX
            if bad.any():
                slots = np.flatnonzero(bad.reshape(len(obs), -1).any(axis=1)).tolist()
                raise NonFiniteError(
                    f"env {self.name}: observation holds NaN, infinity or values beyond float32 in env "
                    f"slot(s) {slots} (rlgear trains in float32; normalize the env's observations)"
                )

    def reset(self, seed: int | None = None) -> TimeStep:
        obs, _ = self.env.reset(seed=seed)
        self._check_finite(obs, None)
        self._prev_last = np.zeros(self.num_envs, dtype=bool)
        self._any_first = False
        n = self.num_envs
        return TimeStep(
            step_type=np.full(n, StepType.FIRST, dtype=np.int32),
            reward=np.zeros(n, dtype=np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=obs,
            prev_action=self._zero_actions.copy(),
            env_id=self._env_ids,
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        first = self._prev_last
        if not (isinstance(reward, np.ndarray) and reward.dtype == np.float32):
            with np.errstate(over="ignore"):  # a reward beyond float32 becomes inf here and is refused below
                reward = np.asarray(reward, dtype=np.float32)
        self._check_finite(obs, reward)
        if self._structured_actions:
            prev_action = flatten_action(self.action_space, actions)
        else:
            prev_action = np.array(actions, dtype=self._zero_actions.dtype, copy=True)
        # the common case: every env in mid-episode (count_nonzero is the cheapest test of a bool array)
        if not (self._any_first or np.count_nonzero(terminated) or np.count_nonzero(truncated)):
            return TimeStep(
                self._mids.copy(), reward, self._ones.copy(), obs, prev_action, self._env_ids, info=info
            )
        ended = (terminated | truncated) & ~first
        # MID=1, LAST=2, FIRST=0: built arithmetically (np.where on enums is slow in this hot path)
        step_type = (1 + ended).astype(np.int32)
        discount = (~(terminated & ended)).astype(np.float32)
        if self._any_first:
            step_type[first] = _FIRST
            reward = reward.copy()
            reward[first] = 0.0
            prev_action[first] = 0
        self._prev_last = ended
        self._any_first = bool(ended.any())
        return TimeStep(step_type, reward, discount, obs, prev_action, self._env_ids, info=info)

    def close(self) -> None:
        self.env.close()

    def get_state(self) -> dict[str, np.ndarray]:
        return gymnasium_wrappers.get_state(self.vector_wrappers)

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        gymnasium_wrappers.set_state(self.vector_wrappers, arrays)

    def freeze_statistics(self) -> None:
        gymnasium_wrappers.freeze(self.vector_wrappers)


class GymnasiumAdapter(EnvAdapter):
    description = "any gymnasium env (registered id or module:Class): native, sync or async vector envs"
    default_env = "CartPole-v1"  # what `rlgear plugins --check gymnasium` builds without --env-name
    records_video = True
    applies_wrappers = ("wrappers", "wrappers_vector")
    presets = atari.PRESETS

    @classmethod
    def check_config(cls, config: Any) -> None:
        """``env.wrappers`` and ``env.wrappers_vector``: importable, the right kind, kwargs that fit,
        and one env that they wrap resets and steps."""
        super().check_config(config)
        gymnasium_wrappers.check(config)
        env = config.env
        preset = getattr(env, "preset", None)
        if preset is None:
            make_bare_env = functools.partial(
                _make_bare_env, env.name, dict(env.kwargs), config.workers.horizon
            )
        else:  # env.wrappers wrap the preset's env
            make_bare_env = functools.partial(
                _make_env, env.name, dict(env.kwargs), config.workers.horizon, (), preset
            )
        gymnasium_wrappers.probe(config, make_bare_env)

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "auto",
        horizon: int | None = None,
        worker_index: int = 0,
        wrappers: Sequence[Any] = (),
        wrappers_vector: Sequence[Any] = (),
        video: VideoRequest | None = None,
        preset: str | None = None,
    ) -> VectorEnv:
        """``wrappers`` wrap each env (in its factory), ``wrappers_vector`` the vector env; ``video``
        records env 0, which is then built in this process (sync vectorization); ``preset`` (``env.preset``)
        wraps each env beneath ``wrappers`` (rlgear.plugins.envs.atari)."""
        atari.check_preset(preset, "gymnasium")
        _check_name(name)
        per_env = gymnasium_wrappers.specs(wrappers)
        mode = gymnasium_native.choose(
            vectorization, name, per_env_wrappers=bool(per_env) or preset is not None, video=video is not None
        )
        if mode == "native":
            vec = gymnasium_native.make_native(name, num_envs, dict(kwargs), horizon)
            return self._finish(vec, name, wrappers_vector)  # native: no env.wrappers
        make_one = functools.partial(_make_env, name, dict(kwargs), horizon, per_env, preset)
        try:
            # fail here, with a readable error, not inside a subprocess
            if video is None:
                probe = make_one()
            else:
                try:
                    first = _make_env(name, {**kwargs, "render_mode": "rgb_array"}, horizon, per_env, preset)
                except TypeError as err:
                    raise ConfigError(
                        f"env.name: {name} cannot be recorded: it takes no render_mode='rgb_array' ({err})"
                    ) from err
                probe = _recorded(first, video, name)
        except ConfigError:
            raise
        except TypeError as err:
            raise ConfigError(f"env.kwargs: {name} does not accept these arguments: {err}") from err
        except gym.error.Error as err:
            raise ConfigError(f"env.name: {name}: {err}") from err
        if mode == "async":
            probe.close()
            vec = AsyncVectorEnv([make_one] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)
        else:
            fns = [lambda: probe] + [make_one] * (num_envs - 1)
            vec = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
        return self._finish(
            vec, name, wrappers_vector, env_return_recorded=bool(per_env) or preset is not None
        )

    @staticmethod
    def _finish(
        vec: gym.vector.VectorEnv,
        name: str,
        wrappers_vector: Sequence[Any],
        env_return_recorded: bool = False,
    ) -> GymnasiumVectorEnv:
        """``env.wrappers_vector`` around ``vec``, as rlgear's VectorEnv; the env's own returns are
        recorded beneath them unless ``env_return_recorded`` says each env records them already."""
        specs = gymnasium_wrappers.specs(wrappers_vector)
        wrapped, applied = gymnasium_wrappers.apply_vector(
            vec, specs, record_env_return=not env_return_recorded
        )
        return GymnasiumVectorEnv(wrapped, name, applied)
