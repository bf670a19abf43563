"""Training-step ops over remote workers: synchronous rounds, async sampling, async gradients.

All three keep their requests in a :class:`RequestPool`: object refs keyed to
the worker slot and the actor handle that will answer them. A worker that dies
shows up as a Ray actor error on one of its refs; the pool then drops every
request of that handle (counted in ``workers.num_dropped_requests``) and asks
the WorkerSet for a replacement (a fresh actor with the current weights in the
same slot, started in the background). Where the op still needs that work it
re-issues it: to the replacement once it answers, meanwhile to the live
workers. A request that stays unanswered for ``workers.sample_timeout_s``
marks its worker as hung, which is handled the same way.

Env steps are credited to the WorkerSet (``record_env_steps``) only when a
result reaches the learner, so ``timesteps_total`` never counts lost work.

Without remote workers every op runs the local evaluator synchronously, so an
algorithm written against these ops also runs in the embedded default.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.distributed.remote_worker import writable
from rlgear.sample_batch import MultiAgentBatch, SampleBatch, concat_any


class RequestPool:
    """In-flight remote calls of one op, per worker slot, with failure handling.

    Args:
        workers: the WorkerSet.
        method: the RemoteEvaluator method every request calls.
        make_args: ``make_args(worker_id)`` gives each request's arguments (default: none);
            called when the request is issued, so it can name a target that changes (Ape-X's
            replay shard of the request).
    """

    def __init__(self, workers: Any, method: str, make_args: Callable[[int], tuple[Any, ...]] | None = None):
        self.workers = workers
        self.method = method
        self._make_args = make_args
        self._ray = workers._remote.ray
        self._refs: dict[Any, tuple[int, Any]] = {}  # ref -> (worker id, handle), in issue order
        self._busy_since: dict[int, float] = {}  # when the worker's oldest open request started

    def in_flight(self, worker_id: int) -> int:
        handle = self.workers.remote_worker(worker_id)
        if handle is None:
            return 0
        return sum(1 for wid, h in self._refs.values() if wid == worker_id and h is handle)

    @property
    def empty(self) -> bool:
        return not self._refs

    def issue(self, worker_id: int, count: int = 1, args: tuple[Any, ...] = ()) -> None:
        """``count`` more requests (each called with ``args``, or with ``make_args(worker_id)`` when the
        pool has one) to the live actor in ``worker_id``'s slot (none while it is pending)."""
        handle = self.workers.remote_worker(worker_id)
        if handle is None:
            return
        if count > 0 and self.in_flight(worker_id) == 0:
            self._busy_since[worker_id] = time.monotonic()
        for _ in range(count):
            call_args = args if self._make_args is None else self._make_args(worker_id)
            self._refs[getattr(handle, self.method).remote(*call_args)] = (worker_id, handle)

    def drop_replaced(self) -> list[int]:
        """Forget requests of handles no longer in their slot (replaced by another op); their slot ids."""
        stale = [ref for ref, (wid, h) in self._refs.items() if self.workers.remote_worker(wid) is not h]
        slots = sorted({self._refs[ref][0] for ref in stale})
        for ref in stale:
            del self._refs[ref]
        self.workers.num_dropped_requests += len(stale)
        return slots

    def _fail(self, worker_id: int, handle: Any, error: BaseException, failed_requests: int = 1) -> None:
        lost = [ref for ref, (wid, h) in self._refs.items() if h is handle]
        for ref in lost:
            del self._refs[ref]
        self.workers.num_dropped_requests += len(lost) + failed_requests
        self.workers.replace_worker(worker_id, handle, error)

    def wait(self, timeout_s: float | None, wait_for_all: bool = False) -> list[tuple[int, Any]]:
        """``(worker id, result)`` for the requests finished within ``timeout_s`` (None: until one is).

        Waits for the first request to finish, then takes every other one
        already finished (``wait_for_all``: repeats until none is left).
        Failed workers are replaced; their requests are gone (the caller
        re-issues if it wants).
        """
        ray = self._ray
        sample_timeout = self.workers.config.workers.sample_timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        results: list[tuple[int, Any]] = []
        while self._refs:
            now = time.monotonic()
            hung_at = min(self._busy_since.get(wid, now) for wid, _ in self._refs.values()) + sample_timeout
            wait_until = hung_at if deadline is None else min(deadline, hung_at)
            ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=max(0.0, wait_until - now))
            if ready:  # collect whatever else has finished too, without waiting
                ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
            for ref in ready:
                if ref not in self._refs:
                    continue  # dropped with its failed worker earlier in this loop
                worker_id, handle = self._refs.pop(ref)
                try:
                    value = ray.get(ref)
                except Exception as err:
                    self.workers._remote.raise_if_not_failure(err)
                    self._fail(worker_id, handle, err)
                    continue
                self._busy_since[worker_id] = time.monotonic()
                results.append((worker_id, value))
            self._replace_hung(sample_timeout)
            if results and not (wait_for_all and self._refs):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
        return results

    def _replace_hung(self, sample_timeout: float) -> None:
        now = time.monotonic()
        for worker_id, handle in {(wid, h) for wid, h in self._refs.values()}:
            if now - self._busy_since.get(worker_id, now) >= sample_timeout:
                self._fail(
                    worker_id,
                    handle,
                    TimeoutError(f"no answer within workers.sample_timeout_s={sample_timeout:g} s"),
                    failed_requests=0,  # the hung requests are still in the pool: counted as lost there
                )


def _postprocessed(batch: SampleBatch | MultiAgentBatch) -> SampleBatch | MultiAgentBatch:
    if isinstance(batch, MultiAgentBatch):
        return MultiAgentBatch(
            {pid: SampleBatch(writable(dict(rows))) for pid, rows in batch.items()},
            batch.env_steps,
            batch.agent_steps,
        )
    return SampleBatch(writable(dict(batch)))


def synchronous_remote_sample(
    workers: Any, min_env_steps: int, with_episodes: bool = False
) -> tuple[SampleBatch, int] | tuple[SampleBatch, int, list[dict[str, Any]]]:
    """One synchronous round set over the remote workers (the local evaluator only learns).

    Every live worker gets the same number of sample requests, fixed up front
    as in :func:`rlgear.distributed.rollout_ops.synchronous_parallel_sample`. A worker
    that dies has its unanswered share re-issued: to its replacement once that
    answers (it starts with the current weights), meanwhile to the live
    workers, so the batch holds only current-policy samples and each
    transition once. With no live worker it waits for one
    (:meth:`~rlgear.distributed.worker_set.WorkerSet.wait_for_live_workers`).
    ``with_episodes``: also return the summaries of the episodes the batch's samples finished.
    """
    workers.poll_replacements()
    if not workers.remote_worker_ids:
        workers.wait_for_live_workers()
    ids = workers.remote_worker_ids
    per_round = workers.local_worker.steps_per_sample * len(ids)
    rounds = max(1, -(-min_env_steps // per_round))
    pool = RequestPool(workers, "sample_with_episodes" if with_episodes else "sample_with_count")
    owed = dict.fromkeys(ids, rounds)
    for worker_id in ids:
        pool.issue(worker_id, rounds)
    arrived: list[tuple[int, SampleBatch, list[dict[str, Any]]]] = []
    steps = 0
    while any(owed.values()):
        for worker_id, (batch, count, *episodes) in pool.wait(None, wait_for_all=True):
            owed[worker_id] -= 1
            workers.record_env_steps(worker_id, count)
            arrived.append((worker_id, _postprocessed(batch), episodes[0] if episodes else []))
            steps += count
        _reissue_owed(workers, pool, owed)
    # Concatenate in worker order, not arrival order: the learner's minibatch
    # shuffle then sees the same rows in the same places whichever worker
    # finished first, so a seeded run learns the same way every time. (An
    # actor runs its requests in the order they were issued, and a stable
    # sort keeps that order within a worker.)
    arrived.sort(key=lambda item: item[0])
    batch = concat_any([batch for _, batch, _ in arrived])
    if with_episodes:
        return batch, steps, [summary for _, _, summaries in arrived for summary in summaries]
    return batch, steps


def _reissue_owed(workers: Any, pool: RequestPool, owed: dict[int, int]) -> None:
    """Re-issue requests lost with failed workers: to the slot's replacement if it is live, else
    to the live worker owing least (waiting for one when none is live)."""
    workers.poll_replacements()
    for worker_id in sorted(owed):
        missing = owed[worker_id] - pool.in_flight(worker_id)
        if missing <= 0:
            continue
        if workers.remote_worker(worker_id) is None:  # replacement pending: hand its share over
            live = workers.remote_worker_ids
            if not live:
                workers.wait_for_live_workers()
                live = workers.remote_worker_ids
            if worker_id in live:
                pool.issue(worker_id, missing)
                continue
            taker = min(live, key=lambda wid: (owed.get(wid, 0), wid))
            owed[worker_id] -= missing
            owed[taker] = owed.get(taker, 0) + missing
            pool.issue(taker, missing)
        else:
            pool.issue(worker_id, missing)


class AsyncSampler:
    """Keep ``max_requests_in_flight_per_worker`` sample requests queued on every remote worker.

    :meth:`get_ready` returns whatever finished, in completion order, so the
    learner never waits for the slowest worker (IMPALA's actors). Each
    result's worker immediately gets a new request, which runs with the
    weights it last received (``workers.sync_weights``).
    """

    def __init__(self, workers: Any, max_requests_in_flight_per_worker: int = 2):
        if max_requests_in_flight_per_worker < 1:
            raise ValueError(
                f"max_requests_in_flight_per_worker must be >= 1, got {max_requests_in_flight_per_worker}"
            )
        self.workers = workers
        self.max_in_flight = max_requests_in_flight_per_worker
        self._pool = RequestPool(workers, "sample_with_count") if workers.has_remote_workers else None

    def _fill(self) -> None:
        """Top up every live worker's queue; with none live, wait for a replacement first."""
        self._pool.drop_replaced()
        self.workers.poll_replacements()
        if not self.workers.remote_worker_ids and self._pool.empty:
            self.workers.wait_for_live_workers()
        for worker_id in self.workers.remote_worker_ids:
            self._pool.issue(worker_id, self.max_in_flight - self._pool.in_flight(worker_id))

    def in_flight(self, worker_id: int) -> int:
        return 0 if self._pool is None else self._pool.in_flight(worker_id)

    def get_ready(self, timeout_s: float | None = None) -> list[tuple[SampleBatch, int, int]]:
        """``(batch, env_steps, worker_id)`` for every request finished since the last call.

        Blocks until at least one is (or ``timeout_s`` passes: then possibly none).
        """
        if self._pool is None:
            batch, steps = self.workers.local_worker.sample_with_count()
            return [(batch, steps, 0)]
        out = []
        while not out:
            self._fill()
            for worker_id, (batch, steps) in self._pool.wait(timeout_s):
                self.workers.record_env_steps(worker_id, steps)
                out.append((_postprocessed(batch), steps, worker_id))
            if timeout_s is not None:
                break  # a failed worker's requests are gone: with a timeout, empty is a valid answer
        self._fill()
        return out


class AsyncGradients:
    """Workers sample and compute gradients on their own batches; the learner applies them as they come.

    The A3C flow: after applying a worker's gradients the learner calls
    ``workers.sync_weights([worker_id])``; the next :meth:`get_ready` then
    re-issues that worker's request, so it computes on the new weights.
    """

    def __init__(self, workers: Any, max_requests_in_flight_per_worker: int = 1):
        if max_requests_in_flight_per_worker < 1:
            raise ValueError(
                f"max_requests_in_flight_per_worker must be >= 1, got {max_requests_in_flight_per_worker}"
            )
        self.workers = workers
        self.max_in_flight = max_requests_in_flight_per_worker
        self._pool = (
            RequestPool(workers, "compute_gradients_with_count") if workers.has_remote_workers else None
        )

    def in_flight(self, worker_id: int) -> int:
        return 0 if self._pool is None else self._pool.in_flight(worker_id)

    def get_ready(
        self, timeout_s: float | None = None
    ) -> list[tuple[dict[str, np.ndarray], dict[str, float], int, int]]:
        """``(grads, learner stats, env_steps, worker_id)`` for every gradient finished since the last call."""
        if self._pool is None:
            local = self.workers.local_worker
            batch, steps = local.sample_with_count()
            grads, stats = local.compute_gradients(batch)
            return [(grads, stats, steps, 0)]
        out = []
        while not out:
            self._pool.drop_replaced()
            self.workers.poll_replacements()
            if not self.workers.remote_worker_ids and self._pool.empty:
                self.workers.wait_for_live_workers()
            for worker_id in self.workers.remote_worker_ids:
                self._pool.issue(worker_id, self.max_in_flight - self._pool.in_flight(worker_id))
            for worker_id, (grads, stats, steps) in self._pool.wait(timeout_s):
                self.workers.record_env_steps(worker_id, steps)
                out.append((writable(grads), stats, steps, worker_id))
            if timeout_s is not None:
                break
        return out


def apply_async_gradients(
    policy: Any,
    workers: Any,
    gradients: AsyncGradients,
    on_stats: Callable[[dict[str, float]], None] | None = None,
) -> int:
    """Apply every gradient :meth:`AsyncGradients.get_ready` returns, syncing each worker right after.

    Returns the env steps those gradients were computed on. A helper for
    A3C-style training steps; ``on_stats`` receives each worker's learner stats.
    """
    steps = 0
    for grads, stats, count, worker_id in gradients.get_ready():
        policy.apply_gradients(grads)
        workers.sync_weights([worker_id])
        if on_stats is not None:
            on_stats(stats)
        steps += count
    return steps


def run_tasks(
    workers: Any, fn: Callable[[Any, Any], tuple[Any, int]], tasks: list[Any]
) -> tuple[list[Any], int]:
    """``fn(evaluator, task) -> (value, env_steps)`` for every task, spread over the workers; the
    values in task order and how many tasks were re-issued.

    Without remote workers the local evaluator runs them in order. With them, task
    ``i`` goes to the ``i``-th live worker (round robin, fixed up front, so a seeded
    run assigns the same work to the same worker every time); a worker that dies
    loses its unanswered tasks, which are re-issued to its replacement once it
    answers, meanwhile to the live worker with the fewest open tasks. ``fn`` must
    be importable by reference (a module-level function). Env steps are credited
    (``record_env_steps``) only for results that arrive, as for sampling.
    """
    if not getattr(workers, "has_remote_workers", False):
        return [fn(workers.local_worker, task)[0] for task in tasks], 0
    workers.poll_replacements()
    if not workers.remote_worker_ids:
        workers.wait_for_live_workers()
    pool = RequestPool(workers, "apply")
    values: dict[int, Any] = {}
    owner: dict[int, tuple[int, Any]] = {}  # open task -> (worker id, actor handle) it went to
    reissued = 0

    def issue(index: int, worker_id: int) -> None:
        owner[index] = (worker_id, workers.remote_worker(worker_id))
        pool.issue(worker_id, 1, (_indexed_task, fn, index, tasks[index]))

    ids = workers.remote_worker_ids
    for index in range(len(tasks)):
        issue(index, ids[index % len(ids)])
    while owner:
        for worker_id, (index, value, steps) in pool.wait(None):
            workers.record_env_steps(worker_id, steps)
            values[index] = value
            owner.pop(index, None)
        workers.poll_replacements()
        lost = sorted(i for i, (wid, handle) in owner.items() if workers.remote_worker(wid) is not handle)
        for index in lost:  # its worker died (or hung and was replaced): the request is gone
            live = workers.remote_worker_ids
            if not live:
                workers.wait_for_live_workers()
                live = workers.remote_worker_ids
            open_tasks = {wid: sum(1 for w, _ in owner.values() if w == wid) for wid in live}
            worker_id = owner[index][0]
            target = worker_id if worker_id in live else min(live, key=lambda wid: (open_tasks[wid], wid))
            issue(index, target)
            reissued += 1
    return [values[index] for index in range(len(tasks))], reissued


def _indexed_task(evaluator: Any, fn: Callable[[Any, Any], tuple[Any, int]], index: int, task: Any) -> Any:
    """Runs in the worker: ``(index, value, env_steps)``, so the driver knows which task answered."""
    value, steps = fn(evaluator, task)
    return index, value, steps
