"""The Ray trial executor: each trial's trainer is a Ray actor with its own CPUs.

A trial asks for ``workers.num_cpus_for_driver`` CPUs (its remote rollout
workers, if any, are actors of their own). A trial starts only when that many
CPUs are free in the cluster, so the others wait PENDING instead of queueing
inside Ray. Iterations of all running trials proceed in parallel; the runner
takes whichever finishes first. Ray is started (or attached to) through
:mod:`rlgear.distributed.ray_session`; this module is imported only for ``tune.executor: ray``.

Trial folders must be reachable from every node (one machine, or a shared
filesystem), since actors write their checkpoints there.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import numpy as np

from rlgear.config import RunConfig
from rlgear.distributed.ray_session import cluster_resources, import_ray, init_ray, shutdown_ray
from rlgear.scheduler import Trial
from rlgear.tune.config import TuneConfig
from rlgear.tune.executor import TrialExecutor


class _TrialActor:
    """Runs inside the actor process: one rlgear Trainer."""

    def __init__(self, config: dict[str, Any], logdir: str | None):
        from rlgear import config as config_mod
        from rlgear.discovery import registry

        run_config = config_mod.resolve(config)
        self.trainer = registry.load_algorithm(run_config.algorithm)(run_config, logdir=logdir)

    def train(self) -> dict[str, Any]:
        return self.trainer.train()

    def save(self, checkpoint_dir: str | None) -> str:
        return self.trainer.save(checkpoint_dir)

    def restore(self, path: str) -> None:
        self.trainer.restore(path)

    def save_to_object(self) -> dict[str, Any]:
        return self.trainer.save_to_object()

    def restore_from_object(self, snapshot: dict[str, Any], source: str) -> None:
        # Arrays from the object store are read-only; torch wants writable ones.
        snapshot = {**snapshot, "arrays": {k: np.array(v, copy=True) for k, v in snapshot["arrays"].items()}}
        self.trainer.restore_from_object(snapshot, source=source)

    def reset_config(self, config: dict[str, Any]) -> bool:
        from rlgear import config as config_mod

        return bool(self.trainer.reset_config(config_mod.resolve(config)))

    def reseed(self, seed: int) -> None:
        self.trainer.reseed(seed)

    def stop(self) -> None:
        self.trainer.stop()


class RayExecutor(TrialExecutor):
    def __init__(self, tune: TuneConfig):
        self.ray = import_ray()
        self._owns_session = not self.ray.is_initialized()  # leave a session we found running
        init_ray(num_cpus=tune.ray_num_cpus or os.cpu_count() or 1, address=tune.ray_address)
        self.total_cpus = float(cluster_resources().get("CPU", 0))
        self.peak_cpus = self.total_cpus  # the cluster may shrink (a lost node) and grow back
        self.max_concurrent = tune.max_concurrent
        self.actors: dict[str, Any] = {}
        self.cpus: dict[str, float] = {}
        self._trials: dict[str, Trial] = {}
        self._futures: dict[Any, str] = {}
        self.train_time_s = 0.0

    def has_resources(self, trial: Trial, config: RunConfig) -> bool:
        if self.max_concurrent and len(self.actors) >= self.max_concurrent:
            return False
        need = float(config.workers.num_cpus_for_driver)
        self.total_cpus = float(cluster_resources().get("CPU", 0))  # nodes come and go
        self.peak_cpus = max(self.peak_cpus, self.total_cpus)
        if need > self.peak_cpus:
            from rlgear.distributed.ray_session import RayResourceError

            raise RayResourceError(
                f"{trial.trial_id}: workers.num_cpus_for_driver is {need:g}, the Ray cluster has "
                f"{self.total_cpus:g} CPUs; lower it or attach to a bigger cluster (tune.ray_address)"
            )
        return sum(self.cpus.values()) + need <= self.total_cpus

    def start_trial(self, trial: Trial, config: RunConfig) -> None:
        need = float(config.workers.num_cpus_for_driver)
        actor_cls = self.ray.remote(num_cpus=need, max_restarts=0)(_TrialActor)
        self.actors[trial.trial_id] = actor_cls.remote(config.to_dict(), trial.logdir)
        self.cpus[trial.trial_id] = need
        self._trials[trial.trial_id] = trial

    def _call(self, trial: Trial, method: str, *args: Any) -> Any:
        return self.ray.get(getattr(self.actors[trial.trial_id], method).remote(*args))

    def continue_training(self, trial: Trial) -> None:
        self._futures[self.actors[trial.trial_id].train.remote()] = trial.trial_id

    def in_flight(self) -> int:
        return len(self._futures)

    def get_next_result(self) -> tuple[Trial, dict[str, Any] | BaseException]:
        (ready,), _ = self.ray.wait(list(self._futures), num_returns=1)
        trial = self._trials[self._futures.pop(ready)]
        try:
            result = self.ray.get(ready)
        except Exception as err:  # RayTaskError (the trainer raised) or the actor died
            return trial, err
        self.train_time_s += float(result.get("time_this_iter_s", 0.0))
        return trial, result

    def save(self, trial: Trial, checkpoint_dir: str | None = None) -> str:
        return self._call(trial, "save", checkpoint_dir)

    def restore(self, trial: Trial, path: str) -> None:
        self._call(trial, "restore", path)

    def save_to_object(self, trial: Trial) -> dict[str, Any]:
        return self._call(trial, "save_to_object")

    def restore_from_object(self, trial: Trial, snapshot: dict[str, Any]) -> None:
        self._call(trial, "restore_from_object", snapshot, f"exploit checkpoint for {trial.trial_id}")

    def reset_config(self, trial: Trial, config: RunConfig) -> bool:
        return bool(self._call(trial, "reset_config", config.to_dict()))

    def reseed(self, trial: Trial, seed: int) -> None:
        self._call(trial, "reseed", seed)

    def is_lost_actor(self, error: BaseException) -> bool:
        from rlgear.distributed.ray_session import is_actor_failure

        return is_actor_failure(error)

    def wait_for_resources(self, timeout_s: float) -> bool:
        """Poll the cluster until it has a free CPU again (a node came back), up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if float(self.ray.available_resources().get("CPU", 0.0)) >= 1.0:
                return True
            time.sleep(0.5)
        return False

    def is_live(self, trial: Trial) -> bool:
        return trial.trial_id in self.actors

    def stop_trial(self, trial: Trial) -> None:
        actor = self.actors.pop(trial.trial_id, None)
        self.cpus.pop(trial.trial_id, None)
        self._trials.pop(trial.trial_id, None)
        for ref in [r for r, tid in self._futures.items() if tid == trial.trial_id]:
            del self._futures[ref]
        if actor is None:
            return
        with contextlib.suppress(Exception):  # a dead actor is already stopped
            self.ray.get(actor.stop.remote(), timeout=30)
        self.ray.kill(actor)

    def shutdown(self) -> None:
        for trial in list(self._trials.values()):
            self.stop_trial(trial)
        if self._owns_session:
            shutdown_ray()
