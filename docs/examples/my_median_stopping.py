"""median_stopping: stop a trial whose running mean is below the median of the others' (a scheduler plugin).

The median stopping rule of Google Vizier (Golovin et al. 2017): once a trial
has made ``grace_period`` progress (in ``time_attr`` units), it is stopped when
the mean of its metric so far is worse than the median of the other trials'
means over the same span of progress (as far as each got), counting the
trials past their own grace period, when there are at least
``min_samples_required`` of them.

Registered with ``rlgear.schedulers = median_stopping = my_median_stopping:MedianStoppingRule``;
in an experiment config::

    tune:
      scheduler: median_stopping
      scheduler_options: {grace_period: 3, min_samples_required: 2}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config.schema import doc
from rlgear.scheduler import Trial, TrialRunnerView, TrialScheduler


@dataclass
class MedianStoppingOptions:
    """``tune.scheduler_options`` of median_stopping: checked by rlgear, then passed to the constructor."""

    time_attr: str = doc("Result key that measures progress (monotonic).", "training_iteration")
    grace_period: float = doc("Progress before a trial can be stopped.", 3)
    min_samples_required: int = doc("Other trials that must have reached the same progress.", 2)

    def check(self, fail) -> None:
        if self.grace_period < 0:
            raise fail("tune.scheduler_options.grace_period", f"expected 0 or more, got {self.grace_period}")
        if self.min_samples_required < 1:
            raise fail(
                "tune.scheduler_options.min_samples_required",
                f"expected 1 or more, got {self.min_samples_required}",
            )


class MedianStoppingRule(TrialScheduler):
    description = "median stopping rule: stop trials whose running mean is below the median"
    options_class = MedianStoppingOptions

    def __init__(
        self,
        metric: str | None = None,
        mode: str = "max",
        time_attr: str = "training_iteration",
        grace_period: float = 3,
        min_samples_required: int = 2,
    ):
        super().__init__(metric, mode)  # tune.metric and tune.mode
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.history: dict[str, list[list[float]]] = {}  # trial id -> [[progress, score], ...]
        self.stopped: list[str] = []

    def _score(self, result: dict[str, Any]) -> float | None:
        value = result.get(self.metric)  # results are flat: "custom_metrics/x_mean" is one key
        if not isinstance(value, int | float):
            return None  # no episode has finished yet
        return float(value) if self.mode == "max" else -float(value)

    def on_trial_result(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> str:
        progress, score = result[self.time_attr], self._score(result)
        if score is None:
            return self.CONTINUE
        history = self.history.setdefault(trial.trial_id, [])
        history.append([float(progress), score])
        if progress < self.grace_period:
            return self.CONTINUE
        others = [  # each other trial past its grace period: its mean up to this trial's progress
            np.mean([s for p, s in points if p <= progress])
            for trial_id, points in self.history.items()
            if trial_id != trial.trial_id and points[-1][0] >= self.grace_period
        ]
        if len(others) < self.min_samples_required:
            return self.CONTINUE
        if np.mean([s for _, s in history]) < np.median(others):
            self.stopped.append(trial.trial_id)
            return self.STOP
        return self.CONTINUE

    def on_trial_complete(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> None:
        pass  # its history stays: later trials are compared with it

    def get_state(self) -> dict[str, Any]:
        return {"history": self.history, "stopped": self.stopped}  # JSON: saved with the experiment

    def set_state(self, state: dict[str, Any]) -> None:
        self.history = state.get("history", {})
        self.stopped = state.get("stopped", [])
