"""The trial-scheduler contract (entry-point group ``rlgear.schedulers``).

A :class:`TrialScheduler` decides, after every result of every trial, whether
the trial continues, pauses or stops, and which trial runs next. The trial
runner that drives trials through an executor (local in-process, or Ray) calls
these methods; ``runner`` is that object and offers ``get_trials()``.
"""

from __future__ import annotations

import enum
import itertools
from abc import ABC
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


class TrialStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"


_trial_ids = itertools.count()


@dataclass
class Trial:
    """One configuration being trained."""

    config: dict[str, Any]
    trial_id: str = field(default_factory=lambda: f"trial_{next(_trial_ids):05d}")
    status: TrialStatus = TrialStatus.PENDING
    last_result: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    num_failures: int = 0
    #: The search-space values this trial took, ``{dotted path: value}`` (shown in the table).
    values: dict[str, Any] = field(default_factory=dict)
    logdir: str | None = None
    #: The config the trial's last disk checkpoint was written with (a retry restores both).
    checkpoint_config: dict[str, Any] | None = None
    #: Times the trainer had to be destroyed and rebuilt (PBT: reset_config returned False).
    num_recreations: int = 0
    #: Times the trial's trainer actor was lost (process or node) and restarted from its checkpoint.
    num_lost_actors: int = 0
    error: str | None = None


class TrialRunnerView(Protocol):
    """What schedulers may call on the trial runner."""

    def get_trials(self) -> list[Trial]: ...

    def save_trial_to_memory(self, trial: Trial, time_attr_value: float) -> Any:
        """Snapshot the trial's live trainer now (memory, with a disk fallback); returns a handle."""
        ...

    def exploit_trial(self, trial: Trial, checkpoint: Any, new_config: dict[str, Any]) -> bool:
        """Give ``trial`` the config ``new_config`` and the weights of ``checkpoint``.

        Done by ``reset_config`` + restore on the live trainer; returns False when
        the trainer refused the new config and had to be recreated.
        """
        ...

    def log_event(self, event: dict[str, Any]) -> None:
        """Record a scheduler decision (an exploit ...) in the experiment's event log."""
        ...


class TrialScheduler(ABC):
    """Base class: continue every trial, run trials in the order they were added."""

    CONTINUE: ClassVar[str] = "CONTINUE"
    PAUSE: ClassVar[str] = "PAUSE"
    STOP: ClassVar[str] = "STOP"

    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""
    #: ``tune.scheduler_options`` that ``rlgear plugins --check`` builds the scheduler with, for a
    #: scheduler that needs some (its synthetic trials' configs have ``training.lr`` and ``seed``).
    check_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, metric: str | None = None, mode: str = "max"):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.metric = metric
        self.mode = mode

    def set_search_properties(self, metric: str | None, mode: str) -> None:
        """The experiment's metric (any result key path) and whether higher is better."""
        self.metric = metric
        self.mode = mode

    def on_trial_add(self, runner: TrialRunnerView, trial: Trial) -> None:
        """A trial was added to the experiment."""

    def on_trial_result(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> str:
        """One iteration's result: return CONTINUE, PAUSE or STOP."""
        return self.CONTINUE

    def on_trial_complete(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> None:
        """The trial reached its stop criteria."""

    def on_trial_error(self, runner: TrialRunnerView, trial: Trial) -> None:
        """The trial raised (it may be retried from its last checkpoint)."""

    def on_trial_remove(self, runner: TrialRunnerView, trial: Trial) -> None:
        """The trial was stopped by the scheduler or removed."""

    def choose_trial_to_run(self, runner: TrialRunnerView) -> Trial | None:
        """The next PENDING or PAUSED trial to give resources to, or None."""
        for status in (TrialStatus.PENDING, TrialStatus.PAUSED):
            for trial in runner.get_trials():
                if trial.status == status:
                    return trial
        return None

    def get_state(self) -> dict[str, Any]:
        """JSON-able scheduler state, saved with the experiment."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned."""
