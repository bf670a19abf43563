"""Random single-step transitions from a stream of episodes, in bounded memory.

A shuffle buffer of whole episodes (as ``tf.data``'s ``shuffle`` and RLlib's offline reader do):
up to ``buffer_episodes`` episodes of the shard are held as transition rows, minibatches are drawn
uniformly from them, and once as many rows were drawn as the oldest episode holds, it makes room
for the next one from disk. A shard that fits in the buffer is read once and kept. Episodes come in
a fresh random order every pass, so a row is drawn about once per pass in expectation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlgear.errors import DatasetError
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Dict, Tuple, flatten_action

if TYPE_CHECKING:
    from rlgear.offline.dataset import Episode, OfflineData


class TransitionStream:
    """An endless iterator of :class:`SampleBatch` minibatches of ``batch_size`` transitions.

    Columns: ``obs`` and ``next_obs`` (the env's raw observations; for Dict/Tuple spaces, or with
    ``obs_transform``, what ``obs_transform`` makes of them, by default rlgear's flat layout,
    :class:`~rlgear.preprocessing.ObservationPreprocessor`), ``action_mask`` and
    ``next_action_mask`` (bool ``[B, n]``, the actions allowed at ``obs`` and at ``next_obs``) when
    a Dict observation has an ``action_mask`` key (or with ``action_mask``), ``actions`` (flat rows,
    as in train batches), ``rewards`` (float32), ``terminateds`` / ``truncateds`` (bool: whether the
    step ended its episode, and how; ``next_obs`` of such a step is the episode's final
    observation), ``action_logp`` when the datasets have it, ``eps_id`` and ``t``.

    ``obs_transform`` and ``action_mask`` take an episode's raw observations (``T+1`` rows, a dict /
    tuple of arrays for Dict / Tuple spaces) and run once per episode read, not per minibatch: an
    offline trainer passes its own preprocessing, so the rows are preprocessed exactly once, the
    way its policy sees observations in the env. Without ``obs_transform``, a Dict / Tuple space gets
    the default layout and mask; with it, masks come only from ``action_mask``.

    Attributes:
        epochs_completed: full passes over the shard's episodes read so far.
        episodes_read: episodes read from disk so far.
    """

    def __init__(
        self,
        data: OfflineData,
        batch_size: int,
        rng: np.random.Generator,
        shard: int = 0,
        num_shards: int = 1,
        buffer_episodes: int = 1000,
        obs_transform: Callable[[Any], Any] | None = None,
        action_mask: Callable[[Any], np.ndarray | None] | None = None,
    ):
        if batch_size < 1 or buffer_episodes < 1:
            raise ValueError(
                f"batch_size and buffer_episodes must be positive, got {batch_size}, {buffer_episodes}"
            )
        self.data = data
        self.batch_size = batch_size
        self.rng = rng
        self.shard, self.num_shards = shard, num_shards
        self.shard_size = len(data.shard_indices(shard, num_shards))
        if self.shard_size == 0:
            raise DatasetError(
                f"{data.source}: shard {shard} of {num_shards} holds no episode "
                f"({data.total_episodes} episodes in {', '.join(data.names)})"
            )
        self.capacity = min(buffer_episodes, self.shard_size)
        if obs_transform is None and isinstance(data.observation_space, Dict | Tuple):
            preprocessor = ObservationPreprocessor(data.observation_space, data.action_space)
            obs_transform = preprocessor.transform
            if action_mask is None and preprocessor.mask_width is not None:
                action_mask = preprocessor.action_mask
        self.obs_transform = obs_transform
        self.action_mask = action_mask
        self.epochs_completed = 0
        self.episodes_read = 0
        self._pass = iter(())
        self._pool: deque[SampleBatch] = deque()
        self._table: SampleBatch | None = None
        self._drawn = 0  # rows drawn since the oldest episode in the pool arrived
        self._rows_drawn_total = 0
        self._rows_in_shard = 0  # known once the whole shard sits in the pool

    def __iter__(self) -> TransitionStream:
        return self

    def __next__(self) -> SampleBatch:
        self._fill()
        table = self._table
        if table is None:
            table = self._table = SampleBatch.concat(list(self._pool))
        batch = table.select(self.rng.integers(0, len(table), self.batch_size))
        self._drawn += self.batch_size
        self._rows_drawn_total += self.batch_size
        if self.capacity == self.shard_size:  # all of it in memory: a pass is as many rows as it has
            self.epochs_completed = self._rows_drawn_total // self._rows_in_shard
        else:
            while self._pool and self._drawn >= len(self._pool[0]):
                self._drawn -= len(self._pool.popleft())
                self._table = None
        return batch

    def _fill(self) -> None:
        while len(self._pool) < self.capacity:
            episode = next(self._pass, None)
            if episode is None:
                if self.episodes_read and self.capacity < self.shard_size:
                    self.epochs_completed += 1
                self._pass = self.data.episodes(self.shard, self.num_shards, self.rng)
                continue
            self.episodes_read += 1
            rows = self._rows(episode)
            self._pool.append(rows)
            self._rows_in_shard += len(rows)
            self._table = None

    def _rows(self, episode: Episode) -> SampleBatch:
        raw = episode.observations
        observations = np.asarray(raw if self.obs_transform is None else self.obs_transform(raw))
        mask = None if self.action_mask is None else self.action_mask(raw)
        actions = episode.actions
        if isinstance(self.data.action_space, Dict | Tuple) or not isinstance(actions, np.ndarray):
            actions = flatten_action(self.data.action_space, actions)
        n = len(episode)
        columns = {
            SampleBatch.OBS: observations[:-1],
            SampleBatch.NEXT_OBS: observations[1:],
            SampleBatch.ACTIONS: np.asarray(actions),
            SampleBatch.REWARDS: episode.rewards,
            SampleBatch.TERMINATEDS: episode.terminations,
            SampleBatch.TRUNCATEDS: episode.truncations,
            SampleBatch.EPS_ID: np.full(n, episode.dataset * 2**32 + episode.id, dtype=np.int64),
            SampleBatch.T: np.arange(n, dtype=np.int64),
        }
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            columns[SampleBatch.ACTION_MASK] = mask[:-1]
            columns[SampleBatch.NEXT_ACTION_MASK] = mask[1:]
        if episode.action_logp is not None:
            columns[SampleBatch.ACTION_LOGP] = episode.action_logp
        return SampleBatch(columns)
