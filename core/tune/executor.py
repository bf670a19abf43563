"""Trial executors: where trials' trainers live and how their iterations are run.

The :class:`~rlgear.tune.runner.TrialRunner` asks an executor to start a trial
(build its trainer, optionally restore it), to run one more iteration, and for
the next finished iteration of any trial. Two executors:

* :class:`LocalExecutor` (the default): every trainer lives in this process
  and trials take turns, one iteration each (time slicing). No Ray needed.
* :class:`~rlgear.tune.ray_executor.RayExecutor`: each trial is a Ray actor
  with its CPUs; trials wait PENDING while the cluster is full.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable
from typing import Any

from rlgear.config import RunConfig
from rlgear.discovery import registry
from rlgear.scheduler import Trial


class TrialExecutor(ABC):
    """The contract both executors implement (the runner calls nothing else)."""

    #: Seconds spent inside ``Trainer.train()`` (for the runner-overhead benchmark).
    train_time_s: float = 0.0

    @abstractmethod
    def has_resources(self, trial: Trial, config: RunConfig) -> bool:
        """Whether the trial could start now (the local executor: under ``max_concurrent``; Ray: free CPUs)."""

    @abstractmethod
    def start_trial(self, trial: Trial, config: RunConfig) -> None:
        """Build the trial's trainer (errors propagate: the runner counts them as trial failures)."""

    @abstractmethod
    def continue_training(self, trial: Trial) -> None:
        """Schedule one more iteration of a started trial."""

    @abstractmethod
    def in_flight(self) -> int:
        """Iterations scheduled and not yet returned."""

    @abstractmethod
    def get_next_result(self) -> tuple[Trial, dict[str, Any] | BaseException]:
        """The next finished iteration: ``(trial, result)``, or ``(trial, exception)`` if it raised."""

    @abstractmethod
    def save(self, trial: Trial, checkpoint_dir: str | None = None) -> str:
        """Write the trial's checkpoint (to ``checkpoint_dir`` or the trial's folder); returns its path."""

    @abstractmethod
    def restore(self, trial: Trial, path: str) -> None:
        """Load the checkpoint at ``path`` into the trial's live trainer."""

    @abstractmethod
    def save_to_object(self, trial: Trial) -> dict[str, Any]:
        """An in-memory snapshot of the trial's trainer (PBT's exploit source)."""

    @abstractmethod
    def restore_from_object(self, trial: Trial, snapshot: dict[str, Any]) -> None:
        """Load a snapshot from :meth:`save_to_object` into the trial's live trainer."""

    @abstractmethod
    def reset_config(self, trial: Trial, config: RunConfig) -> bool:
        """Give the live trainer new hyperparameters in place; False if it needs rebuilding."""

    @abstractmethod
    def reseed(self, trial: Trial, seed: int) -> None:
        """New random streams for the trial's live trainer (``Trainer.reseed``), after an exploit."""

    def is_lost_actor(self, error: BaseException) -> bool:
        """Whether ``error`` says the trial's trainer process (or its node) is gone, not that it raised."""
        return False

    def wait_for_resources(self, timeout_s: float) -> bool:
        """No trial can start now: wait up to ``timeout_s`` for room; True if there may be room again."""
        return False

    @abstractmethod
    def stop_trial(self, trial: Trial) -> None:
        """Release the trial's trainer (never raises: a dead trainer is already stopped)."""

    @abstractmethod
    def is_live(self, trial: Trial) -> bool:
        """Whether the trial holds a started trainer."""

    def shutdown(self) -> None:
        """Stop every trainer still alive."""


class LocalExecutor(TrialExecutor):
    """Trainers in this process; ``get_next_result`` runs the next queued trial's ``train()``."""

    def __init__(self, max_concurrent: int = 0, hooks: Iterable[Any] = ()):
        self.max_concurrent = max_concurrent
        self.hooks = list(hooks)
        self.trainers: dict[str, Any] = {}
        self._trials: dict[str, Trial] = {}
        self._queue: deque[str] = deque()
        self.train_time_s = 0.0

    def has_resources(self, trial: Trial, config: RunConfig) -> bool:
        return not self.max_concurrent or len(self.trainers) < self.max_concurrent

    def start_trial(self, trial: Trial, config: RunConfig) -> None:
        trainer_cls = registry.load_algorithm(config.algorithm)
        self.trainers[trial.trial_id] = trainer_cls(config, hooks=self.hooks, logdir=trial.logdir)
        self._trials[trial.trial_id] = trial

    def continue_training(self, trial: Trial) -> None:
        self._queue.append(trial.trial_id)

    def in_flight(self) -> int:
        return len(self._queue)

    def get_next_result(self) -> tuple[Trial, dict[str, Any] | BaseException]:
        trial_id = self._queue.popleft()
        trial = self._trials[trial_id]
        start = time.perf_counter()
        try:
            return trial, self.trainers[trial_id].train()
        except Exception as err:  # a trial's failure is the runner's to handle (retry or ERROR)
            return trial, err
        finally:
            self.train_time_s += time.perf_counter() - start

    def request_stop(self) -> None:
        """Ctrl-C: make the trainer that is training now return after its current step."""
        for trainer in self.trainers.values():
            trainer.request_stop()

    def trainer(self, trial: Trial) -> Any:
        return self.trainers[trial.trial_id]

    def save(self, trial: Trial, checkpoint_dir: str | None = None) -> str:
        return self.trainers[trial.trial_id].save(checkpoint_dir)

    def restore(self, trial: Trial, path: str) -> None:
        self.trainers[trial.trial_id].restore(path)

    def save_to_object(self, trial: Trial) -> dict[str, Any]:
        return self.trainers[trial.trial_id].save_to_object()

    def restore_from_object(self, trial: Trial, snapshot: dict[str, Any]) -> None:
        self.trainers[trial.trial_id].restore_from_object(
            snapshot, source=f"exploit checkpoint for {trial.trial_id}"
        )

    def reset_config(self, trial: Trial, config: RunConfig) -> bool:
        return bool(self.trainers[trial.trial_id].reset_config(config))

    def reseed(self, trial: Trial, seed: int) -> None:
        self.trainers[trial.trial_id].reseed(seed)

    def is_live(self, trial: Trial) -> bool:
        return trial.trial_id in self.trainers

    def stop_trial(self, trial: Trial) -> None:
        trainer = self.trainers.pop(trial.trial_id, None)
        self._trials.pop(trial.trial_id, None)
        if trial.trial_id in self._queue:
            self._queue.remove(trial.trial_id)
        if trainer is not None:
            with contextlib.suppress(Exception):  # a broken trainer is being discarded anyway
                trainer.stop()

    def shutdown(self) -> None:
        for trial in list(self._trials.values()):
            self.stop_trial(trial)
