"""The Ray-actor form of an :class:`~rlgear.sampling.rollout_worker.RolloutWorker`.

:class:`RemoteEvaluator` is a plain class; :func:`make_actor_class` turns it
into a Ray actor class only when remote workers are asked for, so importing
this module never imports Ray. Everything it returns is numpy (SampleBatch,
weights, gradients, episode summaries), so nothing framework-specific crosses
the process boundary.

Arrays that arrive through the object store are read-only views into shared
memory; :meth:`RemoteEvaluator.set_weights` copies them before the framework
sees them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.sampling.rollout_worker import PostprocessFn, RolloutWorker, env_seed, worker_seed


def writable(arrays: dict[str, Any]) -> dict[str, Any]:
    """Copies of read-only arrays (``ray.get`` results live in shared memory); nested dicts
    (several policies' weights, ``{policy id: {name: array}}``) are copied the same way."""
    return {
        k: writable(v) if isinstance(v, dict) else v if v.flags.writeable else np.array(v)
        for k, v in arrays.items()
    }


class RemoteEvaluator:
    """One remote rollout worker: an RolloutWorker with its own backend, seeds and hooks.

    Args:
        config: the resolved RunConfig (picklable plain data).
        policy_class, env_adapter_class, postprocess_fn: as for RolloutWorker
            (pickled by reference: the worker imports the same modules).
        worker_index: the worker's stable slot id (1..N); a replacement
            actor gets the slot id of the one it replaces.
        backend_class: the backend to set up in the worker process (threads, seed).
        hook_plugins: in-code hook plugins to register in the worker (entry-point
            hooks are loaded there as in the driver).
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        env_adapter_class: type,
        postprocess_fn: PostprocessFn,
        worker_index: int,
        backend_class: type | None = None,
        hook_plugins: Sequence[Any] = (),
        check_spaces: Callable[[Any, Any, Any], None] | None = None,
    ):
        seed = worker_seed(config.seed, worker_index)
        if backend_class is None:
            from rlgear.backend import backend_class_for

            backend_class = backend_class_for(policy_class, config.backend)
        self.backend = backend_class()
        self.backend.setup(config.workers.num_cpus_per_worker, seed)
        from rlgear.discovery.hooks import make_plugin_manager

        hooks = make_plugin_manager(hook_plugins)
        # The policy's action sampling is seeded from config.seed: give each worker
        # its own seed so workers don't draw identical action noise, then hand the
        # evaluator the run's config back (its envs are reseeded the documented way).
        policy_config = dataclasses.replace(config, seed=seed)
        self.evaluator = RolloutWorker(
            policy_config, policy_class, env_adapter_class, postprocess_fn, worker_index, hooks, check_spaces
        )
        self.evaluator.config = config
        self.evaluator.reset(env_seed(config.seed, worker_index))

    # --- identity and health ---------------------------------------------------
    def pid(self) -> int:
        """The actor's process id (tests kill it to simulate a crash)."""
        return os.getpid()

    def ping(self) -> int:
        return self.evaluator.worker_index

    def node_id(self) -> str:
        """The Ray node this worker runs on (hex id)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def steps_per_sample(self) -> int:
        return self.evaluator.steps_per_sample

    # --- the evaluator's work --------------------------------------------------------
    def sample_with_count(self) -> tuple[SampleBatch, int]:
        return self.evaluator.sample_with_count()

    def sample_with_episodes(self) -> tuple[SampleBatch, int, list[dict[str, Any]]]:
        return self.evaluator.sample_with_episodes()

    def compute_gradients_with_count(self) -> tuple[dict[str, np.ndarray], dict[str, float], int]:
        """Sample one batch and return the policy's gradients on it (A3C's worker step)."""
        batch, steps = self.evaluator.sample_with_count()
        grads, stats = self.evaluator.compute_gradients(batch)
        return grads, stats, steps

    def pop_metrics(self) -> dict[str, Any]:
        return self.evaluator.pop_metrics()

    def set_weights(
        self, weights: dict[str, np.ndarray], obs_filter: dict[str, np.ndarray] | None = None
    ) -> None:
        """The learner's weights, and the driver's merged observation-filter statistics (if any)."""
        self.evaluator.set_weights(writable(weights), obs_filter)

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.evaluator.get_weights()

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(evaluator, *args)`` in the worker process."""
        return fn(self.evaluator, *args)

    def stop(self) -> None:
        self.evaluator.stop()


def make_actor_class(num_cpus: float, num_gpus: float) -> Any:
    """``ray.remote(RemoteEvaluator)`` with the worker's resources.

    ``max_restarts=0``: a dead actor stays dead and its calls raise
    ``ActorDiedError``; the WorkerSet replaces it with a fresh actor holding
    the current weights (Ray's own restart would rerun ``__init__`` with the
    initial weights and hide the failure from the restart count).
    """
    from rlgear.distributed.ray_session import import_ray

    ray = import_ray()
    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0, max_concurrency=1)(
        RemoteEvaluator
    )


def warn_if_oversubscribed(num_workers: int, num_cpus_per_worker: float) -> None:
    """Warn when the local Ray this run started has more CPUs than this machine has.

    A local Ray is started with exactly the CPUs the workers ask for, so such a
    run still works, but its workers share cores and sample slower than fewer
    workers would: the user should know. (A cluster, or a Ray the user started,
    has its own CPU count, checked by :func:`rlgear.distributed.ray_session.check_resources`.)
    """
    asked, cores = num_workers * num_cpus_per_worker, os.cpu_count() or 1
    if asked > cores:
        warnings.warn(
            f"workers.num_workers: {num_workers} workers x {num_cpus_per_worker:g} CPU = {asked:g} CPUs "
            f"on a machine with {cores} cores; the workers will share cores "
            f"(at most {max(1, int(cores // num_cpus_per_worker))} workers is usually faster here)",
            RuntimeWarning,
            stacklevel=2,
        )


class RemoteWorkerFactory:
    """Starts, health-checks and kills the remote evaluator actors of one WorkerSet.

    Created only when ``workers.num_workers > 0``: it starts (or attaches to)
    Ray through :func:`rlgear.distributed.ray_session.init_ray` and checks up front that
    the cluster can ever hold the workers.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        env_adapter_class: type,
        postprocess_fn: PostprocessFn,
        hooks: Any = None,
        check_spaces: Callable[[Any, Any, Any], None] | None = None,
    ):
        from rlgear.distributed import ray_session

        w = config.workers
        started_local_ray = ray_session.init_ray(
            num_cpus=ray_session.run_num_cpus(config),
            address=w.ray.address,
            object_store_memory=w.ray.object_store_memory,
            quiet=not w.ray.log_to_driver,
        )
        if started_local_ray:
            warn_if_oversubscribed(w.num_workers, w.num_cpus_per_worker)
        ray_session.check_resources(w.num_workers, w.num_cpus_per_worker, w.num_gpus_per_worker)
        self.ray = ray_session.import_ray()
        self.config = config
        self._classes = (policy_class, env_adapter_class, postprocess_fn)
        self._check_spaces = check_spaces
        self._hook_plugins = self._picklable_plugins(hooks)
        self._actor_class = make_actor_class(w.num_cpus_per_worker, w.num_gpus_per_worker)

    def _picklable_plugins(self, hooks: Any) -> list[Any]:
        """Hook plugins registered in code (entry-point hooks are loaded again in each worker)."""
        if hooks is None:
            return []
        import importlib.metadata

        from rlgear.discovery.registry import HOOKS_GROUP

        entry_point_names = {ep.name for ep in importlib.metadata.entry_points(group=HOOKS_GROUP)}
        plugins = []
        for name, plugin in hooks.list_name_plugin():
            if name in entry_point_names:
                continue
            try:
                self.ray.cloudpickle.dumps(plugin)
            except Exception as err:  # any pickling failure means "driver only"
                warnings.warn(
                    f"hook plugin {name!r} cannot be sent to remote workers ({err}); its episode "
                    "hooks run only for the local evaluator",
                    stacklevel=2,
                )
                continue
            plugins.append(plugin)
        return plugins

    def start(self, worker_ids: Any, config: Any) -> dict[int, Any]:
        """New actors for ``worker_ids`` built from ``config`` (the run's current one).

        Returned once each answers; workers that can't be placed give a resource error.
        """
        from rlgear.distributed.ray_session import RayResourceError

        launched = {worker_id: self.launch(worker_id, config) for worker_id in worker_ids}
        handles = {worker_id: handle for worker_id, (handle, _) in launched.items()}
        timeout = self.config.workers.ray.worker_start_timeout_s
        pings = [ping for _, ping in launched.values()]
        try:
            self.ray.get(pings, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            for handle in handles.values():
                self.kill(handle)
            free = self.ray.available_resources().get("CPU", 0.0)
            raise RayResourceError(
                f"workers: {len(handles)} remote worker(s) did not start within {timeout:g} s "
                f"(workers.ray.worker_start_timeout_s); the cluster has {free:g} CPUs free now, "
                f"each worker needs {self.config.workers.num_cpus_per_worker}"
            ) from None
        except Exception as err:
            for handle in handles.values():
                self.kill(handle)
            self.raise_if_not_failure(err)
            raise
        return handles

    def launch(self, worker_id: int, config: Any) -> tuple[Any, Any]:
        """Create the actor for ``worker_id`` without waiting: ``(handle, ref of its first ping)``."""
        handle = self._actor_class.remote(
            config, *self._classes, worker_id, None, self._hook_plugins, self._check_spaces
        )
        return handle, handle.ping.remote()

    def kill(self, handle: Any) -> None:
        with contextlib.suppress(Exception):  # already gone is fine
            self.ray.kill(handle, no_restart=True)

    def check_restart_allowed(self, worker_id: int, restarts: int, error: BaseException | None) -> None:
        from rlgear.distributed.ray_session import WorkerFailureError

        w = self.config.workers
        why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}" if error else ""
        if not w.recreate_failed:
            raise WorkerFailureError(
                f"remote worker {worker_id} failed ({why}) and workers.recreate_failed is false"
            ) from error
        if restarts >= w.max_restarts:
            raise WorkerFailureError(
                f"remote worker {worker_id} failed ({why}) after {restarts} worker restarts since the run (re)started; "
                f"workers.max_restarts is {w.max_restarts}: the workers keep dying (out of memory? a "
                "crashing env?), see the Ray logs (/tmp/ray/session_latest/logs)"
            ) from error

    def raise_if_not_failure(self, err: BaseException) -> None:
        """Re-raise ``err`` unless it means the worker died (a bug in the env or policy is not a crash).

        An :class:`~rlgear.errors.RLGearError` raised inside the worker comes
        back as itself, so the CLI shows its message, not a Ray traceback.
        """
        from rlgear.distributed.ray_session import is_actor_failure
        from rlgear.errors import RLGearError

        if is_actor_failure(err):
            return
        cause = getattr(err, "cause", None)
        if isinstance(err, self.ray.exceptions.RayTaskError) and isinstance(cause, RLGearError):
            raise cause from None
        raise err
