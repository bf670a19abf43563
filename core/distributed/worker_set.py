"""The WorkerSet: the local rollout worker plus the remote ones on Ray, kept alive.

It owns the local :class:`~rlgear.sampling.rollout_worker.RolloutWorker` (in-process) and
``workers.num_workers`` remote ones (Ray actors, :mod:`rlgear.distributed.remote_worker`),
broadcasts weights once per sync (one object-store ``put``, not one per worker), replaces dead
remote workers in their slots (with backoff while a node is being lost) and counts the faults it
saw for the results. With ``num_workers: 0`` nothing here touches Ray.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.league import remote as league_remote
from rlgear.sampling.rollout_worker import (
    OBS_FILTER_DELTA,
    PostprocessFn,
    RolloutWorker,
    default_postprocess,
)


class WorkerSet:
    """The local evaluator plus ``workers.num_workers`` remote ones (Ray actors).

    The local rollout worker acts with the learner's policies (in-process). Remote workers sit
    in stable slots with ids 1..N (0 is the local evaluator); a worker that
    dies is replaced in its slot by a fresh actor holding the current weights,
    so every op that keeps per-worker state (in-flight requests, metrics)
    keys it by worker id and sees a replacement as a new handle in the same
    slot. With ``num_workers: 0`` nothing here touches Ray.

    Replacements start in the background: a slot whose actor died is
    *pending* until its replacement answers, and the ops go on with the live
    workers meanwhile (a whole node can fail, and its replacements may have
    to wait for the cluster to schedule them elsewhere). A replacement that
    dies before it answers (placed on a node that was dying but not yet
    marked dead) is started again after a backoff; Ray's scheduler never
    places it on a node it has marked dead. With no live worker at all,
    :meth:`wait_for_live_workers` waits up to
    ``workers.ray.worker_start_timeout_s``, then fails.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        env_adapter_class: type,
        postprocess_fn: PostprocessFn = default_postprocess,
        hooks: Any = None,
        check_spaces: Callable[[Any, Any, Any], None] | None = None,
        learner: Any = None,
    ):
        self.config = config
        #: The :class:`~rlgear.learner.Learner` whose weights :meth:`sync_weights` sends (None: the
        #: local worker's policies, for a WorkerSet built without a trainer).
        self.learner = learner
        self.local_worker = RolloutWorker(
            config,
            policy_class,
            env_adapter_class,
            postprocess_fn,
            0,
            hooks,
            check_spaces=check_spaces,
            policy_factory=None if learner is None else learner.add_policy,
        )
        if getattr(self.local_worker.env, "wants_policy_export", False):  # clients acting locally
            from rlgear.export.live import LivePolicyExport

            self.local_worker.env.set_policy_export(LivePolicyExport(self.local_worker))
        self._slots: dict[int, Any] = {}
        #: Remote workers replaced so far (shown as ``num_worker_restarts`` in results).
        self.num_restarts = 0
        #: Requests lost with failed workers (``num_dropped_requests`` in results).
        self.num_dropped_requests = 0
        #: Metrics collections that gave up waiting for a worker (``num_metrics_timeouts``).
        self.num_metrics_timeouts = 0
        #: Why workers failed, by reason (``worker_failures/<reason>`` in results).
        self.failure_reasons: Counter[str] = Counter()
        #: Replacement actors that died or timed out before answering (``num_worker_start_failures``).
        self.num_start_failures = 0
        self._restarts_before_resume = 0  # max_restarts counts this session's replacements
        self._pending: dict[int, _PendingStart] = {}
        self._delivered_steps: dict[int, int] = {}
        self._pending_metrics: dict[int, tuple[Any, Any]] = {}
        #: per remote worker, the league snapshots it reported holding (:mod:`rlgear.league.remote`)
        self.league_known: dict[int, set[str]] = {}
        self.last_weights_ref: Any = None
        if config.workers.num_workers > 0:
            try:
                from rlgear.distributed import remote_worker

                self._remote = remote_worker.RemoteWorkerFactory(
                    config, policy_class, env_adapter_class, postprocess_fn, hooks, check_spaces
                )
                self._slots = self._remote.start(range(1, config.workers.num_workers + 1), config)
                self._delivered_steps = dict.fromkeys(self._slots, 0)
                self.sync_weights()
            except BaseException:
                self.local_worker.stop()
                raise

    # --- the lists of workers -----------------------------------------------------
    @property
    def has_remote_workers(self) -> bool:
        """True when the run samples on remote workers (even while all of them are being replaced)."""
        return self.config.workers.num_workers > 0

    @property
    def remote_workers(self) -> list[Any]:
        """Ray actor handles of the live remote workers, in slot order (ids 1..N)."""
        return [self._slots[i] for i in sorted(self._slots)]

    @property
    def remote_worker_ids(self) -> list[int]:
        """Slots holding a live actor (pending replacements are left out)."""
        return sorted(self._slots)

    def remote_worker(self, worker_id: int) -> Any:
        """The current actor in slot ``worker_id`` (a replacement is a new handle), or None while
        that slot's replacement is starting."""
        return self._slots.get(worker_id)

    def healthy_remote_ids(self) -> list[int]:
        """Slots holding a live actor; a dead one is pending until its replacement answers."""
        return sorted(self._slots)

    @property
    def pending_worker_ids(self) -> list[int]:
        """Slots whose replacement has not answered yet."""
        return sorted(self._pending)

    def workers(self) -> list[Any]:
        return [self.local_worker, *self.remote_workers]

    # --- weights ----------------------------------------------------------------
    def sync_weights(self, worker_ids: Sequence[int] | None = None) -> None:
        """Send the learner's weights to the remote workers (all, or ``worker_ids``), and with
        learner actors (``learners.num_learners >= 1``) to the local worker as well.

        One ``ray.put`` per call: every worker receives the same object-store
        reference, not its own copy. Calls on an actor run in order, so a
        sample requested after this call uses the new weights.
        """
        learner_actors = self.learner is not None and not hasattr(self.learner, "add_policy")
        weights = None
        if learner_actors and worker_ids is None:  # the local worker acts with a copy of its own too
            weights = self.learner.get_weights()
            self.local_worker.set_weights(weights)
        ids = self.remote_worker_ids if worker_ids is None else [i for i in worker_ids if i in self._slots]
        if not ids:
            return
        ray = self._remote.ray
        if weights is None:
            source = self.local_worker if self.learner is None else self.learner
            weights = source.get_weights()
        ref = ray.put(weights)
        self.last_weights_ref = ref
        filter_state = self.local_worker.obs_filter_state()
        filter_ref = None if filter_state is None else ray.put(filter_state)
        for worker_id in ids:
            if filter_ref is None:
                self._slots[worker_id].set_weights.remote(ref)
            else:  # the driver's merged observation-filter statistics travel with the weights
                self._slots[worker_id].set_weights.remote(ref, filter_ref)

    # --- env statistics ---------------------------------------------------------
    def get_env_state(self) -> dict[str, np.ndarray]:
        """The env statistics a checkpoint keeps (``VectorEnv.get_state``: ``env.wrappers_vector``'s).

        Each worker's envs keep their own statistics. Without remote workers they are the local
        worker's; with them, the first live remote worker's (the local worker does not sample,
        so its statistics never move).
        """
        for worker_id in self.remote_worker_ids:
            handle = self._slots[worker_id]
            try:
                return self._remote.ray.get(handle.apply.remote(_env_state))
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
        return self.local_worker.env.get_state()

    def set_env_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Give every worker's envs these statistics (a resume: all continue from the checkpoint's)."""
        self.foreach_worker(lambda w, a=arrays: w.env.set_state(a))

    # --- failures ---------------------------------------------------------------
    def replace_worker(self, worker_id: int, failed_handle: Any, error: BaseException | None = None) -> Any:
        """Start a replacement for the actor in ``worker_id``'s slot, which failed with ``error``.

        The replacement starts in the background with the current weights;
        until it answers, the slot is pending and this returns None (or the new
        handle when it answered at once). Idempotent per failure: when the slot
        already holds another handle, or is already pending (an op saw the same
        death first), that is returned. Raises
        :class:`~rlgear.distributed.ray_session.WorkerFailureError` when recreation is off
        or ``workers.max_restarts`` is used up.
        """
        current = self._slots.get(worker_id)
        if current is not failed_handle:
            return current
        self._remote.kill(failed_handle)
        self._pending_metrics.pop(worker_id, None)  # its episodes died with it
        self.league_known.pop(worker_id, None)  # its replacement's league mirror holds no snapshot
        self._remote.check_restart_allowed(worker_id, self.num_restarts - self._restarts_before_resume, error)
        self.num_restarts += 1
        self.failure_reasons[failure_reason(error)] += 1
        del self._slots[worker_id]
        self._pending[worker_id] = _PendingStart()
        self.poll_replacements()
        return self._slots.get(worker_id)

    def poll_replacements(self) -> None:
        """Move answered replacements into their slots and (re)start the ones that are due. Never blocks."""
        if not self._pending:
            return
        ray = self._remote.ray
        now = time.monotonic()
        for worker_id, pending in list(self._pending.items()):
            if pending.handle is None:
                if now >= pending.next_try:
                    pending.handle, pending.ping = self._remote.launch(worker_id, self.config)
                continue
            ready, _ = ray.wait([pending.ping], timeout=0)
            if not ready:
                continue  # still being placed or starting: Ray schedules it when a node has room
            try:
                ray.get(pending.ping)
            except Exception as err:
                self._remote.raise_if_not_failure(err)  # a bug in the worker's setup is not a crash
                self._start_failed(pending, err)
                continue
            del self._pending[worker_id]
            self._slots[worker_id] = pending.handle
            self._delivered_steps.setdefault(worker_id, 0)
            self.sync_weights([worker_id])

    def _start_failed(self, pending: _PendingStart, error: BaseException) -> None:
        """A replacement died before answering: try again after a backoff (1, 2, 4 ... 30 s)."""
        self._remote.kill(pending.handle)
        self.num_start_failures += 1
        pending.last_error = f"{type(error).__name__}: {_first_line(error)}"
        pending.handle = pending.ping = None
        pending.next_try = time.monotonic() + min(2.0**pending.attempts, _MAX_BACKOFF_S)
        pending.attempts += 1

    def wait_for_live_workers(self) -> None:
        """Block until at least one remote worker is live, for up to ``workers.ray.worker_start_timeout_s``.

        Called by the ops when every slot is pending: sampling cannot go on
        without a worker, so the run waits for the cluster to place the
        replacements, then stops with an error naming why they did not start.
        """
        from rlgear.distributed.ray_session import WorkerFailureError

        timeout = self.config.workers.ray.worker_start_timeout_s
        deadline = time.monotonic() + timeout
        ray = self._remote.ray
        while not self._slots:
            self.poll_replacements()
            if self._slots:
                return
            now = time.monotonic()
            if now >= deadline:
                reasons = sorted({p.last_error for p in self._pending.values() if p.last_error})
                free = ray.available_resources().get("CPU", 0.0)
                raise WorkerFailureError(
                    f"no remote worker has been live for {timeout:g} s (workers.ray.worker_start_timeout_s): "
                    f"{len(self._pending)} replacement(s) could not start"
                    + (f" ({'; '.join(reasons)})" if reasons else "")
                    + f"; the cluster has {free:g} CPUs free, each worker needs "
                    f"{self.config.workers.num_cpus_per_worker}"
                )
            pings = [p.ping for p in self._pending.values() if p.ping is not None]
            next_try = min((p.next_try for p in self._pending.values() if p.handle is None), default=deadline)
            pause = max(0.01, min(deadline, next_try, now + 1.0) - now)
            if pings:
                ray.wait(pings, num_returns=1, timeout=pause)
            else:
                time.sleep(pause)

    def record_env_steps(self, worker_id: int, steps: int) -> None:
        """Count env steps the learner received from a remote worker (reported by ``pop_metrics``).

        Remote env steps are counted when their batch (or gradient) reaches
        the learner, so requests lost with a dead worker are never counted.
        """
        if worker_id in self._delivered_steps:
            self._delivered_steps[worker_id] += int(steps)

    # --- per-worker work -------------------------------------------------------------
    def foreach_worker(self, fn: Callable[[RolloutWorker], Any]) -> list[Any]:
        """``fn(evaluator)`` on the local and every remote evaluator (replaced ones are skipped)."""
        return [result for _, result in self.foreach_worker_with_id(lambda _, w: fn(w))]

    def foreach_worker_with_id(self, fn: Callable[[int, RolloutWorker], Any]) -> list[tuple[int, Any]]:
        """``fn(worker_id, evaluator)`` everywhere; ``(worker_id, result)`` pairs, local first."""
        out = [(0, fn(0, self.local_worker))]
        if not self._slots:
            return out
        ray = self._remote.ray
        calls = {
            worker_id: (handle, handle.apply.remote(_bind_id(fn, worker_id)))
            for worker_id, handle in sorted(self._slots.items())
        }  # all workers at once, then collect in slot order
        for worker_id, (handle, ref) in calls.items():
            try:
                out.append((worker_id, ray.get(ref)))
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
        return out

    def apply_each(self, fn: Callable[..., Any], args_by_id: dict[int, tuple[Any, ...]]) -> None:
        """``fn(evaluator, *args_by_id[worker_id])`` on each remote worker named, all at once (a worker
        replaced since is skipped; a failed one is replaced, as sampling does)."""
        if not self._slots:
            return
        ray = self._remote.ray
        calls = {
            worker_id: (self._slots[worker_id], self._slots[worker_id].apply.remote(fn, *args))
            for worker_id, args in args_by_id.items()
            if worker_id in self._slots
        }
        for worker_id, (handle, ref) in calls.items():
            try:
                ray.get(ref)
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)

    def pop_metrics(self) -> Iterable[dict[str, Any]]:
        """Episodes finished and env steps taken since the last call, per worker.

        Never waits longer than ``workers.metrics_timeout_s`` for a remote
        worker: a late answer is kept and collected next time.
        """
        out = [self.local_worker.pop_metrics()]
        if not self._slots and not self._pending:
            return out
        ray = self._remote.ray
        refs = {}
        for worker_id in self.remote_worker_ids:
            handle = self._slots[worker_id]
            ref, pending_handle = self._pending_metrics.pop(worker_id, (None, None))
            if pending_handle is not handle:
                ref = handle.pop_metrics.remote()
            refs[ref] = (worker_id, handle)
        ready, not_ready = (
            ray.wait(list(refs), num_returns=len(refs), timeout=self.config.workers.metrics_timeout_s)
            if refs
            else ([], [])
        )
        for ref in not_ready:
            worker_id, handle = refs[ref]
            self._pending_metrics[worker_id] = (ref, handle)
            self.num_metrics_timeouts += 1
        for ref in ready:
            worker_id, handle = refs[ref]
            try:
                metrics = ray.get(ref)
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
                metrics = {"episodes": []}
            delta = metrics.pop(OBS_FILTER_DELTA, None)
            if delta is not None:
                self.local_worker.merge_obs_filter_delta(delta)  # the global filters
            games = metrics.pop(league_remote.LEAGUE_REPORT, None)
            if games is not None:  # a league worker's games: the driver's league records them
                self.league_known[worker_id] = league_remote.absorb(self.local_worker.league, games)
            metrics["env_steps"] = self._delivered_steps.get(worker_id, 0)
            self._delivered_steps[worker_id] = 0
            out.append(metrics)
        late = [refs[ref][0] for ref in not_ready]
        # Steps are counted even if episodes are late, or their worker died after delivering them.
        for worker_id in [*late, *self._pending]:
            out.append({"episodes": [], "env_steps": self._delivered_steps.get(worker_id, 0)})
            self._delivered_steps[worker_id] = 0
        return out

    def get_fault_state(self) -> dict[str, Any]:
        """The failure counters, for checkpoints: a resumed run keeps counting from them."""
        return {
            "num_restarts": self.num_restarts,
            "num_start_failures": self.num_start_failures,
            "num_dropped_requests": self.num_dropped_requests,
            "num_metrics_timeouts": self.num_metrics_timeouts,
            "failure_reasons": dict(self.failure_reasons),
        }

    def set_fault_state(self, state: dict[str, Any]) -> None:
        """Counters from :meth:`get_fault_state` (missing ones, from older checkpoints, stay 0).

        ``workers.max_restarts`` counts from the resume: a run stopped by it can
        be resumed once its cause is fixed.
        """
        self.num_restarts = int(state.get("num_restarts", 0))
        self._restarts_before_resume = self.num_restarts
        self.num_start_failures = int(state.get("num_start_failures", 0))
        self.num_dropped_requests = int(state.get("num_dropped_requests", 0))
        self.num_metrics_timeouts = int(state.get("num_metrics_timeouts", 0))
        self.failure_reasons = Counter({str(k): int(v) for k, v in state.get("failure_reasons", {}).items()})

    def fault_stats(self) -> dict[str, int]:
        """Result keys about remote-worker failures (empty without remote workers)."""
        if self.config.workers.num_workers == 0:
            return {}
        stats = {
            "num_worker_restarts": self.num_restarts,
            "num_worker_start_failures": self.num_start_failures,
            "num_dropped_requests": self.num_dropped_requests,
            "num_metrics_timeouts": self.num_metrics_timeouts,
            "num_healthy_workers": len(self.healthy_remote_ids()),
            "num_pending_workers": len(self._pending),
        }
        stats.update({f"worker_failures/{reason}": n for reason, n in sorted(self.failure_reasons.items())})
        return stats

    def stop(self) -> None:
        self.local_worker.stop()
        if self._slots:
            # Let the workers close their envs (subprocesses of async vector envs) before the kill.
            closing = [handle.stop.remote() for handle in self._slots.values()]
            self._remote.ray.wait(closing, num_returns=len(closing), timeout=2.0)
            for handle in self._slots.values():
                self._remote.kill(handle)
            self._slots = {}
        for pending in self._pending.values():
            if pending.handle is not None:
                self._remote.kill(pending.handle)
        self._pending = {}


_MAX_BACKOFF_S = 30.0


@dataclass
class _PendingStart:
    """A slot whose replacement actor has not answered yet."""

    handle: Any = None  # the actor being started (None: waiting for ``next_try``)
    ping: Any = None  # its first call's ref: ready once the actor runs
    attempts: int = 0  # replacements of this slot that died before answering
    next_try: float = 0.0  # monotonic time of the next start
    last_error: str = ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def failure_reason(error: BaseException | None) -> str:
    """A short, countable reason for a worker failure (the ``worker_failures/<reason>`` result keys).

    ``node_lost``: Ray says the actor's node died; ``unreachable``: the
    actor's process stopped answering (a killed node often shows this first);
    ``hung``: no answer within ``workers.sample_timeout_s``; ``worker_died``:
    the worker process died on a live node.
    """
    if error is None:
        return "unknown"
    if isinstance(error, TimeoutError):
        return "hung"
    text = str(error)
    if "node has died" in text or "node was terminated" in text or "NodeDiedError" in type(error).__name__:
        return "node_lost"
    if type(error).__name__ == "ActorUnavailableError":
        return "unreachable"
    return "worker_died"


def _env_state(evaluator: RolloutWorker) -> dict[str, np.ndarray]:
    return evaluator.env.get_state()


def _bind_id(fn: Callable[[int, RolloutWorker], Any], worker_id: int) -> Callable[[RolloutWorker], Any]:
    def call(evaluator: RolloutWorker) -> Any:
        return fn(worker_id, evaluator)

    return call
