"""Offline learning in learner actors: each learner reads its own shard of the dataset.

With ``learners.num_learners: N >= 1`` an offline run's learner is a
:class:`~rlgear.distributed.learner_group.LearnerGroup`, and a reader is attached to every learner
actor (:class:`ReaderFactory`, through :meth:`LearnerGroup.attach`), in the actor's process. The
reader is an object of the algorithm's own trainer class, set up for that learner
(:meth:`~rlgear.plugins.families.offline.OfflineTrainer.setup_reader`):

- it opens the dataset itself (``OfflineData.reopen()``: the driver never sends rows), and keeps
  shard ``rank`` of ``N`` (every N-th episode, :class:`ShardOf`);
- its observations are preprocessed and filtered with the statistics the driver fitted on the
  whole dataset (``DatasetObservations.fit_filter``), sent with the factory;
- its minibatches come from the algorithm's ``make_batches`` (the same code as in the driver:
  marwil's episodes with returns-to-go, the ``discounts`` rows of the Q-learning losses), of
  ``rows_per_learner(train_batch_size, N)[rank]`` rows each;
- its ``training_step`` is the driver's: ``learner.update`` on those rows, then the algorithm's
  ``after_gradient_step`` (discrete CQL's target update), in the actor.

Each update is one data-parallel step over the union of the learners' rows (rank 0's first):
each learner's gradient is weighted by its share of the rows and the gradients are all-reduced
(:meth:`~rlgear.plugins.backends.torch.data_parallel.DataParallelGroup.own_rows`), so it is the
update one learner would make on the whole ``train_batch_size``-row minibatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from rlgear.errors import UnsupportedError
from rlgear.sample_batch import SampleBatch

#: The data generator's stream of an offline run (the driver's: ``[seed, DATA_STREAM]``).
DATA_STREAM = 0x0FF


def rows_per_learner(batch_size: int, num_learners: int) -> list[int]:
    """Rows each learner reads per update: ``batch_size`` split as evenly as it goes, the
    first ``batch_size % num_learners`` learners one row more."""
    base, extra = divmod(int(batch_size), int(num_learners))
    return [base + (rank < extra) for rank in range(num_learners)]


def reader_rng(seed: int | None, rank: int) -> np.random.Generator:
    """Learner ``rank``'s generator of its data order (its own stream: the shards are read apart)."""
    return np.random.default_rng(None if seed is None else [seed, DATA_STREAM, rank])


def check_readable_in_actors(config: Any, data: Any) -> Callable[[], Any]:
    """How a learner actor opens the run's dataset (``data.reopen()``), or one line saying why it
    can't: the actors read the dataset themselves, so it must be something a process can open."""
    learners = config.learners.num_learners
    batch_size = config.training.train_batch_size
    if batch_size < learners:
        raise config.fail(
            "training.train_batch_size",
            f"{batch_size} rows per update can't be shared by {learners} learners (learners.num_learners): "
            f"each reads its own rows, so it needs at least {learners}",
        )
    reopen = getattr(data, "reopen", None)
    if reopen is None:
        raise UnsupportedError(
            f"learners.num_learners: {learners}: each learner actor opens offline.input itself, but the "
            f"dataset this run reads ({type(data).__name__}) has no reopen() to open it in another process; "
            "use a Minari dataset (a path or id), or learners.num_learners: 0"
        )
    return reopen()


class ShardOf:
    """``data`` as one learner sees it: only shard ``shard`` of ``num_shards`` (every
    ``num_shards``-th episode), through the same interface, so ``make_batches`` reads it unchanged."""

    def __init__(self, data: Any, shard: int, num_shards: int):
        self.data, self.shard, self.num_shards = data, int(shard), int(num_shards)

    def __getattr__(self, name: str) -> Any:  # spaces, totals, has_action_logp: the dataset's
        return getattr(self.data, name)

    def _check(self, shard: int, num_shards: int) -> None:
        if (shard, num_shards) != (0, 1):
            raise ValueError(
                f"this is shard {self.shard} of {self.num_shards} already: it is read whole, not "
                f"as shard {shard} of {num_shards}"
            )

    def episodes(
        self, shard: int = 0, num_shards: int = 1, rng: np.random.Generator | None = None
    ) -> Iterator[Any]:
        self._check(shard, num_shards)
        return self.data.episodes(self.shard, self.num_shards, rng)

    def transitions(
        self, batch_size: int, rng: np.random.Generator, shard: int = 0, num_shards: int = 1, **options: Any
    ) -> Iterator[SampleBatch]:
        """The shard's transitions; ``options`` (``buffer_episodes``, ``obs_transform``,
        ``action_mask``) go to the reader unchanged."""
        self._check(shard, num_shards)
        return self.data.transitions(batch_size, rng, self.shard, self.num_shards, **options)


class OwnRowsLearner:
    """A learner actor's learner as its reader sees it: each :meth:`update` is on rows
    ``offset ..`` of a ``total``-row minibatch that the learners read between them (the
    data-parallel group's ``own_rows``); anything else is the learner's own."""

    def __init__(self, learner: Any, group: Any, offset: int, total: int):
        self._learner, self._group = learner, group
        self._offset, self._total = int(offset), int(total)

    def update(self, batch: SampleBatch) -> dict[str, float]:
        if self._group is None:  # one learner: its rows are the whole minibatch
            return self._learner.update(batch)
        with self._group.own_rows(self._offset, len(batch), self._total):
            return self._learner.update(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._learner, name)


@dataclasses.dataclass
class ReaderFactory:
    """What the driver attaches to each learner actor (pickled there): the reader of its shard.

    Attributes:
        trainer_class: the algorithm's trainer class (its ``make_batches`` and hooks run there).
        config: the run's resolved config.
        open_data: opens the run's dataset in the actor (``OfflineData.reopen()``).
        filter_state: the driver's observation filter statistics (None: no filter).
        states: each learner's last reader state (``get_algorithm_state``), by rank; the driver
            updates it after every iteration, so a restarted group's readers go on from there.
    """

    trainer_class: type
    config: Any
    open_data: Callable[[], Any]
    filter_state: Mapping[str, np.ndarray] | None
    states: list[dict[str, Any]] | None = None

    def __call__(self, learner: Any, rank: int, num_learners: int, group: Any) -> Any:
        reader = self.trainer_class.__new__(self.trainer_class)  # set up by setup_reader, not setup
        state = self.states[rank] if self.states is not None and len(self.states) == num_learners else None
        reader.setup_reader(
            self.config, learner, group, rank, num_learners, self.open_data(), self.filter_state, state
        )
        return reader


def reader_config(config: Any, rank: int, num_learners: int) -> Any:
    """``config`` with ``training.train_batch_size`` the rows learner ``rank`` reads per update."""
    rows = rows_per_learner(config.training.train_batch_size, num_learners)[rank]
    return dataclasses.replace(config, training=dataclasses.replace(config.training, train_batch_size=rows))


def reader_states(state: Mapping[str, Any], num_learners: int, rng: np.random.Generator) -> list[dict]:
    """Each learner's reader state from a trainer's algorithm state (a checkpoint's): its own
    saved one when the checkpoint had as many learners, else the shared counters with no rows read
    and a data order drawn from ``rng`` (the driver's restored generator)."""
    saved = state.get("readers")
    if isinstance(saved, list) and len(saved) == num_learners:
        return [dict(s) for s in saved]
    shared = {k: v for k, v in state.items() if k not in ("readers", "batches", "data_rng")}
    base = int(rng.integers(2**62))
    return [
        {
            **shared,
            "batches": {"rows_read": 0},
            "data_rng": np.random.default_rng([base, rank]).bit_generator.state,
        }
        for rank in range(num_learners)
    ]


class ReaderCounts:
    """The driver's view of the learners' reading (the ``Batches`` counters of a run whose learner
    actors read): rows read over all learners and, from them, dataset epochs."""

    def __init__(self, data: Any):
        self.data = data
        self.base = 0  # rows read before the readers' counts began (a resume with other learners)
        self.readers_rows = 0

    @property
    def rows_read(self) -> int:
        return self.base + self.readers_rows

    @property
    def epochs(self) -> float:
        return self.rows_read / max(1, int(self.data.total_steps))

    def __next__(self) -> SampleBatch:
        raise RuntimeError("the learner actors read the minibatches of this run, not the driver")

    def take(self, states: list[Mapping[str, Any]]) -> None:
        """The readers' latest states: their rows."""
        self.readers_rows = sum(int(s.get("batches", {}).get("rows_read", 0)) for s in states)

    def get_state(self) -> dict[str, Any]:
        return {"rows_read": self.rows_read}

    def set_state(self, state: Mapping[str, Any], states: list[Mapping[str, Any]] | None = None) -> None:
        self.take(states or [])
        self.base = int(state.get("rows_read", 0)) - self.readers_rows
