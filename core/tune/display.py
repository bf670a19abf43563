"""The live table of trials: status, iteration, steps, metric and the searched hyperparameters.

``rich`` redraws a table in place (on a terminal); ``plain`` prints the table
at most every ``interval_s`` seconds (logs, CI); ``none`` prints nothing.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rlgear.scheduler import Trial
from rlgear.tune.search_space import get_path


def metric_value(result: dict[str, Any], metric: str) -> Any:
    """A result value by key path: a flat key (``custom_metrics/x_mean``) or nested with '/' or '.'."""
    if metric in result:
        return result[metric]
    for sep in ("/", "."):
        node: Any = result
        for part in metric.split(sep):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is not None:
            return node
    return None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_rows(trials: Sequence[Trial], metric: str) -> tuple[list[str], list[list[str]]]:
    """Column names and one row per trial (hyperparameters read from the trial's current config)."""
    paths: list[str] = []
    for trial in trials:
        for path in trial.values:
            if path not in paths:
                paths.append(path)
    header = ["trial", "status", "iter", "steps", metric, *paths]
    rows = []
    for trial in trials:
        result = trial.last_result
        rows.append(
            [
                trial.trial_id,
                trial.status.value,
                _fmt(result.get("training_iteration")),
                _fmt(result.get("timesteps_total")),
                _fmt(metric_value(result, metric)),
                *[_fmt(get_path(trial.config, p)) for p in paths],
            ]
        )
    return header, rows


def status_line(trials: Sequence[Trial]) -> str:
    counts = Counter(t.status.value for t in trials)
    return f"{len(trials)} trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


class TrialTable:
    def __init__(self, mode: str, metric: str, interval_s: float = 2.0):
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode, self.metric, self.interval_s = mode, metric, interval_s
        self._last = 0.0
        self._last_plain = ""
        self._live = None
        self._console = None

    def _rich_table(self, trials: Sequence[Trial]) -> Any:
        from rich.table import Table

        header, rows = table_rows(trials, self.metric)
        table = Table(title=status_line(trials))
        for name in header:
            table.add_column(name)
        for row in rows:
            table.add_row(*row)
        return table

    def update(self, trials: Sequence[Trial], force: bool = False) -> None:
        if self.mode == "none":
            return
        now = time.monotonic()
        if self.mode == "rich":
            if self._live is None:
                from rich.live import Live

                self._live = Live(self._rich_table(trials), auto_refresh=False)
                self._live.start()
            if force or now - self._last >= 0.25:
                self._live.update(self._rich_table(trials), refresh=True)
                self._last = now
            return
        if force or now - self._last >= self.interval_s:
            self._print_plain(trials)
            self._last = now

    def _print_plain(self, trials: Sequence[Trial]) -> None:
        """Print the table unless it is the one printed last (the final table would repeat)."""
        text = self.render_plain(trials)
        if text != self._last_plain:
            print(text, flush=True)
            self._last_plain = text

    def render_plain(self, trials: Sequence[Trial]) -> str:
        header, rows = table_rows(trials, self.metric)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [status_line(trials)]
        for row in [header, *rows]:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        return "\n".join(lines)

    def message(self, text: str) -> None:
        if self.mode == "rich" and self._live is not None:
            self._live.console.print(text, highlight=False, soft_wrap=True)
        elif self.mode == "rich" and self._console is not None:
            self._console.print(text, highlight=False, soft_wrap=True)
        elif self.mode != "none":
            print(text, flush=True)

    def close(self, trials: Sequence[Trial] | None = None) -> None:
        if self.mode == "rich" and self._live is not None:
            if trials is not None:
                self._live.update(self._rich_table(trials), refresh=True)
            self._live.stop()
            self._console = self._live.console
            self._console.line()  # Live leaves the cursor at the end of the table
            self._live = None
        elif self.mode == "plain" and trials is not None:
            self._print_plain(trials)
