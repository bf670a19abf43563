"""The envpool env adapter: envpool's C++ vector envs (classic control, Atari, MuJoCo ...) as rlgear envs.

Why: envpool steps a whole batch of envs in C++ threads, with no Python per env,
so sampling runs near the env's own speed where gymnasium has no numpy vector
class (Pendulum, Acrobot, Atari). Install it with ``pip install 'rlgear[envpool]'``.

envpool resets in next-step mode, exactly as ALF's layout needs: the step after
a LAST returns the next episode's first observation with reward 0, and the action
sent at the LAST is ignored. The pool is shown to the rest of the adapter as a
gymnasium vector env, so the gymnasium adapter's TimeStep mapping, its float32
checks and ``env.wrappers_vector`` (NormalizeReward ...) apply unchanged.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rlgear.env import EnvAdapter, VectorEnv
from rlgear.errors import ConfigError, did_you_mean

from . import atari, envpool_async, gymnasium_wrappers
from .gymnasium_env import GymnasiumAdapter

#: envpool's config keys that the adapter sets itself (from ``num_envs``, the reset seed, ``horizon``);
#: ``batch_size`` is the user's (envpool's async mode: :mod:`.envpool_async`).
RESERVED_KEYS = ("num_envs", "seed", "max_episode_steps")


def import_envpool() -> Any:
    """``import envpool``, without the banner its ``import gym`` prints, or a ConfigError naming the extra.

    envpool still imports the unmaintained ``gym`` package, whose import prints a
    deprecation notice on stderr; rlgear never uses ``gym``, so that notice would
    only mislead.
    """
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import envpool
    except ImportError as err:
        raise ConfigError(
            f"env.adapter: envpool is not installed: pip install 'rlgear[envpool]' ({err})"
        ) from err
    return envpool


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """An envpool pool behind gymnasium's vector-env interface (next-step autoreset).

    envpool takes its seed when the pool is built, not at ``reset``: a seeded reset
    builds the pool again with that seed (cheap), so a seeded run repeats.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, name: str, num_envs: int, kwargs: dict[str, Any], seed: int = 0):
        self.name = name
        self._kwargs = kwargs
        self.num_envs = num_envs
        self._seed = seed
        self.pool = self._build(seed)
        with warnings.catch_warnings():  # envpool's float64 bounds: "precision lowered to float32"
            warnings.simplefilter("ignore")
            observation_space = self.pool.observation_space
            #: envpool's frame stacks (Atari, ViZDoom: the envs with a ``stack_num`` option) are
            #: channels first ``[stack, H, W]``; rlgear's conv trunk reads ``[H, W, C]``. A transpose
            #: of the batch (num_envs x 28 kB for Atari) is cheaper than teaching both backends'
            #: trunks (and the numpy twin, and exported models) a second layout.
            self.channels_last = (
                isinstance(observation_space, gym.spaces.Box)
                and len(observation_space.shape) == 3
                and "stack_num" in self.pool.config
            )
            if self.channels_last:
                observation_space = gym.spaces.Box(
                    np.moveaxis(observation_space.low, 0, -1),
                    np.moveaxis(observation_space.high, 0, -1),
                    dtype=observation_space.dtype,
                )
            self.single_observation_space = observation_space
            self.single_action_space = self.pool.action_space
            self.observation_space = batch_space(self.single_observation_space, num_envs)
            self.action_space = batch_space(self.single_action_space, num_envs)

    def _build(self, seed: int) -> Any:
        return _build(self.name, self.num_envs, seed, self._kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:  # a seeded reset starts the same episodes again, as gymnasium's do
            self.pool.close()
            self.pool = self._build(seed)
            self._seed = seed
        obs, info = self.pool.reset()
        return self._observations(obs), info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, reward, terminated, truncated, info = self.pool.step(np.asarray(actions))
        return self._observations(obs), reward, terminated, truncated, info

    def _observations(self, obs: Any) -> Any:
        """``[B, C, H, W]`` stacks as ``[B, H, W, C]`` (contiguous) when :attr:`channels_last`."""
        if not self.channels_last:
            return obs
        return np.ascontiguousarray(np.moveaxis(obs, 1, -1))

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


def _build(name: str, num_envs: int, seed: int, kwargs: dict[str, Any]) -> Any:
    envpool = import_envpool()
    with warnings.catch_warnings():  # "Box bound precision lowered by casting to float32"
        warnings.simplefilter("ignore")
        return envpool.make_gymnasium(name, num_envs=num_envs, seed=seed, **kwargs)


def _checked_kwargs(envpool: Any, name: str, kwargs: dict[str, Any], horizon: int | None) -> dict[str, Any]:
    """``env.kwargs`` that envpool's config for ``name`` takes (did-you-mean otherwise), plus the horizon."""
    fields = tuple(envpool.make_spec(name).config._fields)
    for key in kwargs:
        if key in RESERVED_KEYS:
            raise ConfigError(
                f"env.kwargs.{key}: set by rlgear for the envpool adapter (workers.num_envs_per_worker, "
                "the run's seed, workers.horizon); remove it"
            )
        if key not in fields:
            allowed = [f for f in fields if f not in RESERVED_KEYS]
            raise ConfigError(
                f"env.kwargs.{key}: envpool's {name} takes no such option{did_you_mean(key, allowed)} "
                f"(it takes: {', '.join(allowed)})"
            )
    extra = {"max_episode_steps": horizon} if horizon is not None else {}
    return {**kwargs, **extra}


class EnvPoolAdapter(EnvAdapter):
    description = "envpool's C++ vector envs (pip install 'rlgear[envpool]'): classic control, Atari, MuJoCo"
    default_env = "CartPole-v1"

    # A pool has no env objects to wrap or render: the base check_config refuses the rest.
    applies_wrappers = ("wrappers_vector",)
    presets = atari.PRESETS
    vectorizations = ("auto", "native")
    steps_envs = "steps all envs in one C++ pool"

    @classmethod
    def check_config(cls, config: Any) -> None:
        super().check_config(config)
        gymnasium_wrappers.check(config)
        batch = envpool_async.check_batch_size(
            config.env.kwargs.get("batch_size"), config.workers.num_envs_per_worker
        )
        if batch is not None:
            for key, value in (("env.wrappers_vector", config.env.wrappers_vector),
                               ("offline.output", config.offline.output)):  # fmt: skip
                if value:
                    raise ConfigError(
                        f"{key}: not with envpool's async mode (env.kwargs.batch_size {batch} < "
                        f"{config.workers.num_envs_per_worker} envs): its envs step out of lockstep; "
                        "leave env.kwargs.batch_size unset for the sync pool"
                    )

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "auto",
        horizon: int | None = None,
        worker_index: int = 0,
        wrappers_vector: Sequence[Any] = (),
        preset: str | None = None,
    ) -> VectorEnv:
        """``preset`` (``env.preset: atari``) sets envpool's own Atari options
        (:data:`rlgear.plugins.envs.atari.ENVPOOL_KWARGS`), ``env.kwargs`` overriding them."""
        envpool = import_envpool()
        if preset is not None:
            kwargs = atari.envpool_preset(preset, dict(kwargs))
        if kwargs.get("noop_max") == 0:
            # envpool 1.0.1 draws its no-ops from uniform_int_distribution(0, noop_max - 1): with 0 the
            # range is empty and the first reset crashes the process (a segmentation fault, measured)
            raise ConfigError(
                "env.kwargs.noop_max: 0 crashes envpool's Atari pools at their first reset; envpool starts "
                "each episode with 1 to noop_max no-op frames (without use_fire_reset), so 1 is the fewest "
                "(one no-op frame). For no no-ops at all (Machado et al.'s exact protocol) use the "
                "gymnasium adapter (env.name: ALE/<Game>-v5, env.preset: atari, env.kwargs.noop_max: 0)"
            )
        known = envpool.list_all_envs()
        if name not in known:
            raise ConfigError(
                f"env.name: envpool has no env '{name}'{did_you_mean(name, known)} "
                "(envpool.list_all_envs() lists them, e.g. CartPole-v1, Pendulum-v1, Pong-v5)"
            )
        kwargs = dict(kwargs)
        batch = envpool_async.check_batch_size(kwargs.pop("batch_size", None), num_envs)
        checked = _checked_kwargs(envpool, name, kwargs, horizon)
        try:
            if batch is not None:  # async: the policy acts on the batch that came back while the rest step
                return envpool_async.EnvPoolAsyncEnv(
                    name,
                    num_envs,
                    batch,
                    lambda seed: _build(name, num_envs, seed, {**checked, "batch_size": batch}),
                )
            vec = EnvPoolVectorEnv(name, num_envs, checked)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ConfigError(f"env.kwargs: envpool's {name} refused them: {err}") from err
        return GymnasiumAdapter._finish(vec, name, wrappers_vector)
