"""The dataset an offline trainer reads: its interface, how it is opened, and its spaces' check.

The reader is :func:`rlgear.offline.dataset.open_datasets` (Minari datasets, ``offline.input``);
this module names what the trainer uses of it (:class:`OfflineData`, :class:`Episode`), so any
object with that interface (a test's in-memory episodes) can stand in for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space


class Episode(Protocol):
    """One recorded episode of ``T`` steps, observations as the env gave them.

    ``observations`` has ``T + 1`` rows (the last is the observation after the last action: the
    bootstrap of a truncated episode); a dict / tuple of such arrays for Dict / Tuple spaces.
    ``actions``, ``rewards`` (float32), ``terminations`` and ``truncations`` (bool) have ``T`` rows;
    ``action_logp`` is the behaviour policy's log-probability of each action, or None.
    """

    observations: Any
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    action_logp: np.ndarray | None
    id: Any


class OfflineData(Protocol):
    """What :func:`rlgear.offline.dataset.open_datasets` returns (one or several datasets as one)."""

    observation_space: Space
    action_space: Space
    total_steps: int
    total_episodes: int
    has_action_logp: bool

    def episodes(
        self, shard: int = 0, num_shards: int = 1, rng: np.random.Generator | None = None
    ) -> Iterator[Episode]:
        """Every episode once (in an order drawn from ``rng``, if given), streamed."""
        ...

    def transitions(
        self,
        batch_size: int,
        rng: np.random.Generator,
        shard: int = 0,
        num_shards: int = 1,
        buffer_episodes: int = 1000,
        obs_transform: Callable[[Any], Any] | None = None,
        action_mask: Callable[[Any], np.ndarray | None] | None = None,
    ) -> Iterator[SampleBatch]:
        """Endless minibatches of single transitions: ``obs``, ``actions``, ``rewards``,
        ``next_obs``, ``terminateds``, ``truncateds`` (and ``action_logp`` when recorded).

        ``obs_transform`` turns an episode's raw observations into ``obs`` / ``next_obs`` rows;
        ``action_mask`` reads its allowed actions from them (``action_mask`` / ``next_action_mask``
        columns when it returns an array); both run once per episode read, on raw observations."""
        ...


def open_data(config: Any) -> OfflineData:
    """The datasets of ``offline.input``, or a ConfigError naming the key when there are none."""
    if config.offline.input in (None, "", []):
        raise config.fail(
            "offline.input",
            f"algorithm '{config.algorithm}' learns from a dataset: set offline.input to a Minari "
            "dataset id or path (record one with offline.output, docs/offline.md)",
        )
    from rlgear.offline.dataset import open_datasets  # the reader (and minari) only when a run reads

    return open_datasets(config.offline.input)


def check_env_spaces(config: Any, data: OfflineData, observation_space: Space, action_space: Space) -> None:
    """The env's spaces must be the dataset's: the policy learns on one and acts in the other."""
    if observation_space != data.observation_space or action_space != data.action_space:
        raise ConfigError(
            str(
                config.fail(
                    "env.name",
                    f"env '{config.env.name}' has observations {observation_space!r} and actions "
                    f"{action_space!r}, dataset {config.offline.input!r} has observations "
                    f"{data.observation_space!r} and actions {data.action_space!r}",
                )
            )
        )
