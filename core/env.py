"""The environment-adapter contract.

An env adapter (entry-point group ``rlgear.envs``) builds vectorized
environments that emit :class:`~rlgear.timestep.TimeStep` batches with ALF
semantics. ``rlgear`` talks to environments only through this contract, so a
gymnasium env, a simulator in another process, or a fleet of clients over the
network all look the same to the evaluator.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from rlgear.errors import RLGearError
from rlgear.spaces import Space
from rlgear.timestep import TimeStep

#: Set by the runner when the user asks the run to stop (Ctrl-C, SIGTERM). An env
#: that can block waiting for input (clients over the network) checks it while
#: waiting and raises :class:`EnvInterrupted`, so the run still checkpoints and exits.
stop_requested = threading.Event()


class EnvInterrupted(RLGearError):
    """An env stopped waiting for input because the run was asked to stop."""


class VectorEnv(ABC):
    """``num_envs`` environments stepped together.

    Contract (``rlgear.testing.check_vector_env`` checks an implementation):

    * ``reset`` returns a TimeStep with every env at FIRST.
    * ``step(actions)`` returns the next TimeStep. An env whose previous step
      was LAST starts a new episode: it ignores its action and returns FIRST
      with reward 0 (gymnasium's next-step autoreset).
    * Terminated episodes end with LAST and discount 0, truncated ones (time
      limits, the run's ``horizon``) with LAST and discount 1.
    * Each TimeStep owns its arrays: callers may keep it across steps.
    """

    num_envs: int
    observation_space: Space
    action_space: Space

    @abstractmethod
    def reset(self, seed: int | None = None) -> TimeStep:
        """Start an episode in every env; env ``i`` is seeded with ``seed + i``."""

    @abstractmethod
    def step(self, actions: np.ndarray) -> TimeStep:
        """Apply ``actions`` (``[num_envs, *action_shape]``, within the action bounds)."""

    def close(self) -> None:
        """Release processes, sockets and files."""


class EnvAdapter(ABC):
    """What an ``rlgear.envs`` entry point resolves to. Instantiated with no arguments."""

    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""
    #: The env ``rlgear plugins --check`` builds when it is given no ``--env-name``
    #: (None: the first of the adapter's ``names``, if it lists the env names it builds).
    default_env: ClassVar[str | None] = None
    #: ``env.kwargs`` for that env in ``rlgear plugins --check``.
    default_env_kwargs: ClassVar[dict[str, Any]] = {}
    #: Why ``rlgear plugins --check`` cannot step this adapter's envs in its own process
    #: (e.g. clients play them over the network); empty when it can.
    check_skip_reason: ClassVar[str] = ""

    @abstractmethod
    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> VectorEnv:
        """Build ``num_envs`` copies of env ``name``.

        ``horizon``, when given, must truncate every episode after that many
        steps (LAST with discount 1), regardless of the env's own time limit.
        Raise :class:`rlgear.errors.ConfigError` for a name or kwargs the
        adapter cannot use, with a message that names the problem.
        """
