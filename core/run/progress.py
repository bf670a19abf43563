"""The live progress display of a training run.

``rich``: a live status line with a bar towards the first step-count stop
criterion, redrawn every iteration (on a terminal). ``plain``: one line per
report, at most one every ``progress_interval_s`` seconds (logs, CI).
"""

from __future__ import annotations

import sys
import time
from typing import Any


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if abs(value) < 10 and digits > 0:  # small returns (0..1 envs) need more digits
            return f"{value:.3f}"
        return f"{value:,.{digits}f}"
    return f"{value:,}"


#: Result keys of a run that learns from a dataset (it samples no env steps): the progress counts
#: its gradient steps and dataset epochs instead.
GRADIENT_STEPS_KEY = "learner/num_gradient_steps"
DATASET_EPOCHS_KEY = "offline/dataset_epochs"


def learns_from_data(result: dict[str, Any]) -> bool:
    """True for an offline run's result (it has dataset epochs): progress counts gradient steps."""
    return DATASET_EPOCHS_KEY in result


def progress_count(result: dict[str, Any]) -> float:
    """What the progress bar advances by: gradient steps for an offline run, else env steps."""
    if learns_from_data(result):
        return float(result.get(GRADIENT_STEPS_KEY, 0))
    return result["timesteps_total"]


def summary_line(result: dict[str, Any]) -> str:
    if learns_from_data(result):
        return (
            f"iter {result['training_iteration']:>4} | grad steps {int(progress_count(result)):>9,} | "
            f"epochs {result[DATASET_EPOCHS_KEY]:.2f} | "
            f"eval return {_fmt(result.get('evaluation/episode_return_mean'))} | "
            f"{result['time_total_s']:.1f} s"
        )
    return (
        f"iter {result['training_iteration']:>4} | steps {result['timesteps_total']:>9,} | "
        f"return {_fmt(result.get('episode_return_mean'))} "
        f"(min {_fmt(result.get('episode_return_min'))}, max {_fmt(result.get('episode_return_max'))}) | "
        f"{_fmt(result.get('env_steps_per_s'), 0)} steps/s | {result['time_total_s']:.1f} s"
    )


class Progress:
    def __init__(self, mode: str, stop: dict[str, float], interval_s: float = 2.0):
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode = mode
        self.interval_s = interval_s
        self._last_print = 0.0
        self._pending: dict[str, Any] | None = None
        self._progress = None
        self._task = None
        if mode == "rich":
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            # the bar runs towards the first step-count stop criterion (env steps, or gradient steps)
            total = stop.get("timesteps_total", stop.get(GRADIENT_STEPS_KEY))
            self._progress = Progress(
                TextColumn("[bold]training[/bold]"),
                BarColumn(),
                TextColumn("{task.fields[line]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._progress.add_task("train", total=total, line="starting ...")
            self._progress.start()

    def update(self, result: dict[str, Any]) -> None:
        if self.mode == "rich":
            self._progress.update(self._task, completed=progress_count(result), line=summary_line(result))
        elif self.mode == "plain":
            now = time.monotonic()
            if now - self._last_print >= self.interval_s:
                print(summary_line(result), flush=True)
                self._last_print = now
                self._pending = None
            else:
                self._pending = result

    def message(self, text: str) -> None:
        if self.mode == "rich":
            self._progress.console.print(text)
        elif self.mode == "plain":
            print(text, flush=True)

    def close(self) -> None:
        if self.mode == "rich" and self._progress.live.is_started:
            self._progress.stop()
        elif self.mode == "plain" and self._pending is not None:
            print(summary_line(self._pending), flush=True)
            self._pending = None
