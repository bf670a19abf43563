"""Minibatches for an offline learner: single transitions, or rows of postprocessed episodes.

Two sources, one interface (``next(batches)`` is one gradient step's rows, observations already
model input; :attr:`rows_read` and :attr:`epochs` count what was read):

- :class:`TransitionBatches`: the dataset's own endless transition minibatches (bc; off-policy
  losses such as CQL's and IQL's that read ``obs``, ``actions``, ``rewards``, ``next_obs``,
  ``terminateds``). Nothing per episode is computed.
- :class:`EpisodeBatches`: whole episodes, each turned into rows by the algorithm's
  ``postprocess`` (marwil's truncation-aware returns-to-go, which need the episode's end), read
  ahead into a buffer of ``buffer_rows`` rows that is shuffled before minibatches are cut from it.

Resuming from a checkpoint restores the counters, not the position in the data: the reading
starts again from a fresh order drawn from the (restored) generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from rlgear.plugins.families.offline.data import Episode, OfflineData
from rlgear.plugins.families.offline.observations import DatasetObservations
from rlgear.sample_batch import SampleBatch as SB

#: Transition columns of the dataset reader (gymnasium's names).
TERMINATEDS = "terminateds"
TRUNCATEDS = "truncateds"

#: ``(rows of one episode, its final observation [1, ...] as model input) -> training rows``.
EpisodePostprocess = Callable[[SB, np.ndarray], SB]


class Batches(Protocol):
    """What an offline trainer reads minibatches from."""

    rows_read: int

    @property
    def epochs(self) -> float:
        """Passes over the dataset so far (fractional)."""
        ...

    def __next__(self) -> SB: ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


class _Counted:
    """Rows read so far and, from them, dataset epochs (rows over the dataset's steps)."""

    data: OfflineData
    rows_read: int = 0

    @property
    def epochs(self) -> float:
        """Passes over the dataset so far (fractional): rows read / the dataset's steps."""
        return self.rows_read / max(1, int(self.data.total_steps))

    def get_state(self) -> dict[str, Any]:
        return {"rows_read": self.rows_read}

    def set_state(self, state: dict[str, Any]) -> None:
        self.rows_read = int(state.get("rows_read", 0))


class TransitionBatches(_Counted):
    """Minibatches of ``batch_size`` single transitions, drawn by the dataset reader from ``rng``
    out of a shuffle buffer of ``buffer_episodes`` episodes (``offline.input_shuffle_buffer_episodes``).

    The reader gets the raw episodes and ``observations``' preprocessing (Dict / Tuple layout)
    and action-mask reading, which it applies once per episode it reads: rows arrive in the
    policy's layout with ``action_mask`` / ``next_action_mask`` when the observations carry one,
    and only the observation filter (frozen statistics) is applied here, per minibatch.

    With ``gamma``, each row also gets ``discounts = gamma * (1 - terminated)``: the one-step rows
    of the replay family (``rewards`` plus ``discounts`` times the value of ``next_obs``), so
    off-policy losses written for replayed rows (SAC's, DQN's) read dataset rows unchanged. A
    truncated row keeps ``gamma``: it bootstraps from ``next_obs``.
    """

    def __init__(
        self,
        data: OfflineData,
        observations: DatasetObservations,
        batch_size: int,
        rng: np.random.Generator,
        gamma: float | None = None,
        buffer_episodes: int = 1000,
    ):
        self.data = data
        self.observations = observations
        self.gamma = gamma
        self._stream = data.transitions(
            batch_size,
            rng,
            buffer_episodes=buffer_episodes,
            obs_transform=observations.preprocess,
            action_mask=observations.action_mask,
        )

    def __iter__(self) -> Iterator[SB]:
        return self

    def __next__(self) -> SB:
        raw = next(self._stream)
        columns = dict(raw)
        self.rows_read += len(columns[SB.ACTIONS])
        for obs_key in (SB.OBS, SB.NEXT_OBS):
            if obs_key in columns:
                columns[obs_key] = self.observations.filter(columns[obs_key])
        if self.gamma is not None:
            terminated = np.asarray(columns[TERMINATEDS], dtype=bool)
            columns[SB.DISCOUNTS] = np.where(terminated, 0.0, self.gamma).astype(np.float32)
        return SB(columns)


def episode_rows(episode: Episode, observations: DatasetObservations) -> tuple[SB, np.ndarray]:
    """The ``T`` rows of ``episode`` (``obs`` as model input, ``actions``, ``rewards``,
    ``terminateds``, ``truncateds``, ``action_mask`` and ``action_logp`` when there are) and its
    final observation ``[1, ...]`` (after the last action: a truncated episode's bootstrap)."""
    features = observations(episode.observations)
    steps = len(episode.actions)
    columns = {
        SB.OBS: features[:steps],
        SB.ACTIONS: np.asarray(episode.actions),
        SB.REWARDS: np.asarray(episode.rewards, dtype=np.float32),
        TERMINATEDS: np.asarray(episode.terminations, dtype=bool),
        TRUNCATEDS: np.asarray(episode.truncations, dtype=bool),
    }
    mask = observations.action_mask(episode.observations)
    if mask is not None:
        columns[SB.ACTION_MASK] = mask[:steps]
    if episode.action_logp is not None:
        columns[SB.ACTION_LOGP] = np.asarray(episode.action_logp, dtype=np.float32)
    return SB(columns), features[steps : steps + 1]


class EpisodeBatches(_Counted):
    """Minibatches of rows of whole episodes, postprocessed per episode, shuffled in a buffer.

    Episodes are read in an order drawn from ``rng`` until ``buffer_rows`` rows are buffered,
    the buffer is shuffled and cut into ``batch_size``-row minibatches; the rows left over join
    the next buffer. When the dataset is exhausted, a new pass starts in a new order. ``postprocess``
    runs when an episode is read, with the weights of that moment (marwil's bootstrap values).
    """

    def __init__(
        self,
        data: OfflineData,
        observations: DatasetObservations,
        postprocess: EpisodePostprocess,
        batch_size: int,
        rng: np.random.Generator,
        buffer_rows: int,
    ):
        self.data = data
        self.observations = observations
        self.postprocess = postprocess
        self.batch_size = batch_size
        self.buffer_rows = max(buffer_rows, batch_size)
        self.rng = rng
        self._episodes: Iterator[Episode] = iter(())
        self._ready: list[SB] = []  # minibatches cut from the current buffer, next first
        self._leftover: SB | None = None

    def __iter__(self) -> Iterator[SB]:
        return self

    def __next__(self) -> SB:
        if not self._ready:
            self._fill()
        batch = self._ready.pop()
        self.rows_read += len(batch)
        return batch

    def _next_episode(self) -> Episode:
        for _ in range(2):
            episode = next(self._episodes, None)
            if episode is not None:
                return episode
            self._episodes = iter(self.data.episodes(rng=self.rng))  # a new pass, in a new order
        raise ValueError("the dataset holds no episodes")

    def _fill(self) -> None:
        parts = [] if self._leftover is None else [self._leftover]
        count = 0 if self._leftover is None else len(self._leftover)
        while count < self.buffer_rows:
            rows, final_obs = episode_rows(self._next_episode(), self.observations)
            if len(rows) == 0:
                continue
            rows = self.postprocess(rows, final_obs)
            parts.append(rows)
            count += len(rows)
        buffer = SB.concat(parts)
        order = self.rng.permutation(len(buffer))
        buffer = SB({key: value[order] for key, value in buffer.items()})
        whole = len(buffer) // self.batch_size * self.batch_size
        self._ready = [
            buffer.slice(start, start + self.batch_size) for start in range(0, whole, self.batch_size)
        ]
        self._ready.reverse()
        self._leftover = buffer.slice(whole, len(buffer)) if whole < len(buffer) else None
