"""Replay shards: prioritized replay buffers in Ray actors, Ape-X's distributed replay.

:class:`ReplayShard` is a plain class wrapping a
:class:`~rlgear.blocks.replay_buffers.PrioritizedReplayBuffer`; :class:`ReplayShardSet`
turns it into Ray actors only when an Ape-X run starts, so importing this module never imports
Ray. Rollout workers call :meth:`ReplayShard.add` directly (their fragments never pass through
the driver); the learner calls :meth:`ReplayShard.sample` and
:meth:`ReplayShard.update_priorities`. A shard that dies is replaced by an empty one in the same
slot: its transitions are lost, the run goes on, :attr:`ReplayShardSet.num_restarts` counts it
and :attr:`ReplayShardSet.num_rows_lost` counts the rows it held when its size was last asked.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import PrioritizedReplayBuffer
from rlgear.distributed.remote_worker import writable
from rlgear.sample_batch import SampleBatch


class ReplayShard:
    """One shard: a prioritized replay buffer that takes rows with their initial priorities.

    Args: as :class:`~rlgear.blocks.replay_buffers.PrioritizedReplayBuffer`.
    """

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float, seed: int | None):
        self.buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, eps=eps, seed=seed)

    def pid(self) -> int:
        """The actor's process id (tests kill it to simulate a crash)."""
        return os.getpid()

    def add(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> int:
        """Store ``batch``'s rows, each with its priority (``|TD error|``; None: the largest so far).

        Returns the number of rows stored.
        """
        slots = self.buffer.add(SampleBatch(batch))
        if priorities is not None and len(slots):
            priorities = np.asarray(priorities, dtype=np.float64)[len(priorities) - len(slots) :]
            finite = np.isfinite(priorities)  # a non-finite TD error keeps the largest priority
            self.buffer.update_priorities(slots[finite], priorities[finite])
        return len(slots)

    def sample(self, num_items: int, beta: float) -> SampleBatch | None:
        """A prioritized minibatch with ``batch_indexes`` and ``weights``, or None while the shard is empty."""
        if len(self.buffer) == 0:
            return None
        return self.buffer.sample(num_items, beta=beta)

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(indexes, priorities)

    def size(self) -> int:
        return len(self.buffer)

    def priorities(self) -> np.ndarray:
        """The priorities of the filled slots (``eps`` included), for tests and diagnostics."""
        return self.buffer.priorities()

    def rows(self, indexes: np.ndarray) -> SampleBatch:
        """The stored rows at slots ``indexes`` (for tests and diagnostics)."""
        return self.buffer._rows(np.asarray(indexes, dtype=np.int64))


class ReplayShardSet:
    """``num_shards`` :class:`ReplayShard` actors, each replaced by an empty one when it dies.

    The shards take no CPU reservation (``num_cpus=0``, as RLlib's replay actors): they serve
    short calls and must not keep rollout workers from being scheduled. Shard ``i`` is seeded
    from ``seed`` and ``i`` (and its restart count, so a replacement draws anew).
    """

    def __init__(
        self, num_shards: int, capacity: int, alpha: float, beta: float, eps: float, seed: int | None
    ):
        from rlgear.distributed.ray_session import import_ray

        self.ray = import_ray()
        self._actor_class = self.ray.remote(num_cpus=0, max_restarts=0)(ReplayShard)
        self._args = (capacity, alpha, beta, eps)
        self._seed = seed
        #: Shards replaced after dying (``num_replay_shard_restarts`` in results).
        self.num_restarts = 0
        #: Rows the replaced shards held at their last :meth:`sizes` (``num_replay_rows_lost``): a
        #: lower bound, since rows the workers added after that poll are not known to the driver
        #: (workers write to the shards directly).
        self.num_rows_lost = 0
        self._known_sizes = [0] * num_shards
        self.shards: list[Any] = [self._start(i) for i in range(num_shards)]

    def _start(self, index: int) -> Any:
        seed = None if self._seed is None else self._seed + 7919 * (index + 1) + self.num_restarts
        return self._actor_class.remote(*self._args, seed)

    def __len__(self) -> int:
        return len(self.shards)

    def replace(self, index: int, failed_handle: Any) -> bool:
        """Start an empty shard in slot ``index`` if ``failed_handle`` still holds it; True if it did."""
        if self.shards[index] is not failed_handle:
            return False  # already replaced
        with contextlib.suppress(Exception):
            self.ray.kill(failed_handle, no_restart=True)
        self.num_restarts += 1
        self.num_rows_lost += self._known_sizes[index]
        self._known_sizes[index] = 0
        self.shards[index] = self._start(index)
        return True

    def sizes(self) -> list[int]:
        """Rows held by each shard; a dead shard is replaced (and counts 0)."""
        from rlgear.distributed.ray_session import is_actor_failure

        refs = [(i, handle, handle.size.remote()) for i, handle in enumerate(self.shards)]
        out = []
        for i, handle, ref in refs:
            try:
                out.append(int(self.ray.get(ref)))
                self._known_sizes[i] = out[-1]
            except Exception as err:
                if not is_actor_failure(err):
                    raise
                self.replace(i, handle)
                out.append(0)
        return out

    def stop(self) -> None:
        for handle in self.shards:
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
        self.shards = []


class ShardSampler:
    """Replay minibatches requested ahead from every shard (Ape-X's asynchronous learner input).

    Keeps up to ``max_in_flight`` ``sample`` requests per shard, issued round robin over the
    shards, and hands them out oldest ready first. A shard that dies is replaced
    (:meth:`ReplayShardSet.replace`) and its requests are forgotten.
    """

    def __init__(self, shards: ReplayShardSet, max_in_flight: int):
        self.shards = shards
        self.max_in_flight = max_in_flight
        self._refs: dict[Any, tuple[int, Any]] = {}  # ref -> (shard index, handle), in issue order

    def _in_flight(self, index: int) -> int:
        handle = self.shards.shards[index]
        return sum(1 for i, h in self._refs.values() if i == index and h is handle)

    def fill(self, num_items: int, beta: float, skip: set[int] = frozenset()) -> None:
        """Top every shard (but ``skip``) up to ``max_in_flight`` requests, round robin."""
        for _ in range(self.max_in_flight):
            for index, handle in enumerate(self.shards.shards):
                if index not in skip and self._in_flight(index) < self.max_in_flight:
                    self._refs[handle.sample.remote(num_items, beta)] = (index, handle)

    @property
    def empty(self) -> bool:
        return not self._refs

    def next(self) -> tuple[int, Any, SampleBatch | None]:
        """Wait for the oldest ready request: ``(shard index, handle, minibatch or None if empty)``.

        A dead shard's request comes back as ``(index, None, None)`` after the shard was replaced.
        """
        from rlgear.distributed.ray_session import is_actor_failure

        ready, _ = self.shards.ray.wait(list(self._refs), num_returns=1)
        ref = next(r for r in self._refs if r in set(ready))
        index, handle = self._refs.pop(ref)
        try:
            batch = self.shards.ray.get(ref)
        except Exception as err:
            if not is_actor_failure(err):
                raise
            self.shards.replace(index, handle)
            self._refs = {r: (i, h) for r, (i, h) in self._refs.items() if h is not handle}
            return index, None, None
        if handle is not self.shards.shards[index]:
            return index, None, None  # from a shard replaced meanwhile: its rows are gone
        return index, handle, None if batch is None else SampleBatch(writable(dict(batch)))
