"""The one place rlgear starts, attaches to and stops Ray.

Ray is optional: nothing here imports it at module import time, and a run
with no remote workers (the embedded default) never calls into this module.
Remote workers, async ops and the Ray trial executor all call
:func:`init_ray` so that a run gets one quiet Ray session, started with the
run's CPU budget, or attached to a cluster the user already runs.

Ray's own failures that a user can fix (no cluster at the address, not
enough CPUs, Ray not installed) are raised as :class:`RayResourceError` /
:class:`RaySessionError`, whose messages say what was asked for and what the
cluster has.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rlgear.errors import PluginError, RLGearError, RunError

#: Environment set before Ray starts (defaults: a variable the user set wins): no token-auth warning on
#: every init (DEPENDENCY-NOTES.md), no usage-stats prompt, and worker processes at the driver's
#: priority. Ray renices its workers to 15 by default, but here they are the run's sampling, which
#: the driver waits on: next to any other busy process a niced worker gets a sliver of a core
#: (measured: a league iteration's remote sampling took 3.0 s of wall clock for 0.3 s of CPU beside
#: two busy processes on 2 cores, 0.3-0.4 s at niceness 0). It only applies to a Ray this process
#: starts; a cluster's raylets keep the niceness they were started with.
_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}

_started_here = False  # True when init_ray started the session (and so may shut it down)


class RaySessionError(RLGearError):
    """Ray could not be started or attached to."""


class RayResourceError(RLGearError):
    """The workers asked for more CPUs/GPUs than the Ray cluster has."""


class WorkerFailureError(RunError):
    """Remote workers kept failing (more restarts than ``workers.max_restarts``, or recreation off)."""


class LearnerFailureError(RunError):
    """Learner actors kept failing (more group restarts than ``learners.max_restarts``)."""


def import_ray() -> Any:
    """``import ray``, or a PluginError with the install hint when it is missing."""
    try:
        import ray
    except ImportError as err:
        raise PluginError(
            "remote workers (workers.num_workers > 0) need Ray, which is not installed: "
            "pip install 'rlgear[ray]' (or set workers.num_workers: 0 to sample in the driver process)"
        ) from err
    return ray


def init_ray(
    *,
    num_cpus: int,
    address: str | None = None,
    object_store_memory: int | None = None,
    quiet: bool = True,
) -> bool:
    """Start a local Ray with ``num_cpus`` CPUs, or attach to the cluster at ``address``.

    Returns True when this call started a local Ray (False: attached, or already running).

    Idempotent: when Ray is already initialized in this process (by an earlier
    call, a test fixture or the user's own ``ray.init``), the running session
    is used as it is. ``address='auto'`` attaches to a cluster started with
    ``ray start``; ``num_cpus`` and ``object_store_memory`` then belong to the
    cluster, not to this call. ``quiet`` keeps the dashboard off and worker
    logs out of the driver's terminal.
    """
    global _started_here
    for key, value in _RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray = import_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": not quiet,
        "logging_level": logging.WARNING if quiet else logging.INFO,
    }
    if address is None:
        # "local" always starts a new Ray: without it, ray.init() attaches to a cluster that
        # `ray start` (or a test's Cluster) left running on this machine and then refuses num_cpus.
        kwargs["address"] = "local"
        kwargs["num_cpus"] = max(1, int(num_cpus))
        if object_store_memory is not None:
            kwargs["object_store_memory"] = int(object_store_memory)
    else:
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except ConnectionError as err:
        raise RaySessionError(
            f"workers.ray.address: no Ray cluster found at '{address}' ({err}); start one with "
            "'ray start --head', or remove workers.ray.address to start a local Ray for this run"
        ) from err
    except ValueError as err:  # e.g. object_store_memory below Ray's minimum
        raise RaySessionError(f"workers.ray: Ray refused the settings: {err}") from err
    except RuntimeError as err:
        raise RaySessionError(f"could not start Ray: {err}") from err
    _started_here = address is None
    return _started_here


def shutdown_ray(force: bool = False) -> None:
    """Stop the Ray session if :func:`init_ray` started it (or always, with ``force``).

    A session the user (or a cluster) owns is left running: only our
    connection to it is closed when ``force`` is set.
    """
    global _started_here
    if not (_started_here or force):
        return
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    _started_here = False


def cluster_resources() -> dict[str, float]:
    """The cluster's total resources (``CPU``, ``GPU``, ...), as Ray reports them."""
    return dict(import_ray().cluster_resources())


def check_resources(num_workers: int, num_cpus_per_worker: float, num_gpus_per_worker: float) -> None:
    """Fail early, with numbers, when the workers can never fit on the cluster.

    Ray itself would only queue the actors forever with a warning in its logs.
    """
    _check_fits("workers", num_workers, num_cpus_per_worker, num_gpus_per_worker)


def run_num_cpus(config: Any) -> int:
    """The CPUs a local Ray is started with: the remote workers' plus the learner actors'."""
    w, learners = config.workers, config.learners
    return int(w.num_workers * w.num_cpus_per_worker + learners.num_learners * learners.num_cpus_per_learner)


def check_learner_resources(
    num_learners: int, num_cpus_per_learner: float, num_gpus_per_learner: float
) -> None:
    """Fail before anything starts, with numbers, when the learner actors can never fit on the
    cluster (Ray would queue them forever)."""
    _check_fits("learners", num_learners, num_cpus_per_learner, num_gpus_per_learner)


def _check_fits(section: str, count: int, cpus_each: float, gpus_each: float) -> None:
    """``count`` actors of ``cpus_each`` CPUs and ``gpus_each`` GPUs against the cluster's totals: a
    :class:`RayResourceError` naming the keys of ``section`` (``workers``, ``learners``) when they
    can never fit."""
    total = cluster_resources()
    plural, singular = section, section.removesuffix("s")
    for name, each in (("CPU", cpus_each), ("GPU", gpus_each)):
        if each <= 0:
            continue
        have = total.get(name, 0.0)
        if count * each > have:
            raise RayResourceError(
                f"{section}: asked for {count} {plural} x {_number(each)} {name}, "
                f"the cluster has {_number(have)} {name}s; lower {section}.num_{plural} or "
                f"{section}.num_{name.lower()}s_per_{singular}, or attach to a bigger cluster "
                "(workers.ray.address)"
            )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def is_actor_failure(err: BaseException) -> bool:
    """True when ``err`` says a Ray actor (a remote worker) died or became unreachable."""
    ray = import_ray()
    exceptions = ray.exceptions
    kinds = tuple(
        getattr(exceptions, name)
        for name in ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")
        if hasattr(exceptions, name)
    )
    return isinstance(err, kinds)
