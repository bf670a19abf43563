"""``rlgear plot DIR``: learning curves as a PNG (matplotlib, Agg backend, imported only here).

For an experiment folder: one line per trial (the metric against
``timesteps_total``), and a marker where a PBT exploit replaced a trial's
weights and config (the results that carry ``exploit/donor``). For a single
run folder: its one curve.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlgear.errors import PluginError, RLGearError
from rlgear.tune import experiment_state as es
from rlgear.tune.display import metric_value


@dataclass
class PlotSummary:
    """What was drawn (read back from the figure): for scripts and tests."""

    path: Path
    lines: int
    exploit_marks: int
    metric: str


def _read_progress(folder: Path) -> list[dict[str, Any]]:
    path = folder / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _series(folder: Path) -> tuple[str, dict[str, Path]]:
    """The default metric and ``{label: run folder}`` for an experiment or a run folder."""
    if (folder / es.STATE_FILE).exists():
        state = es.read_state(folder)
        metric = "episode_return_mean"
        config_file = folder / es.CONFIG_FILE
        if config_file.exists():
            from rlgear.config import yaml_load

            metric = ((yaml_load(config_file.read_text()) or {}).get("tune") or {}).get("metric", metric)
        runs = {}
        for trial in state["trials"]:
            logdir = Path(trial.get("logdir") or folder / trial["trial_id"])
            if not logdir.is_absolute() and not logdir.exists():
                logdir = folder / logdir.name
            runs[trial["trial_id"]] = logdir
        return metric, runs
    if (folder / "progress.jsonl").exists():
        return "episode_return_mean", {folder.name: folder}
    raise RLGearError(
        f"{folder}: neither an experiment folder ({es.STATE_FILE}) nor a run folder (progress.jsonl)"
    )


def plot(
    folder: str | os.PathLike,
    metric: str | None = None,
    x: str = "timesteps_total",
    out: str | os.PathLike | None = None,
) -> PlotSummary:
    """Write the PNG and return what it shows."""
    folder = Path(folder)
    default_metric, runs = _series(folder)
    metric = metric or default_metric
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise PluginError(
            "rlgear plot needs matplotlib, which is not installed: pip install 'rlgear[plot]'"
        ) from err
    fig, ax = plt.subplots(figsize=(9, 5.5))
    marked = 0
    try:
        for label, run_dir in runs.items():
            rows = [r for r in _read_progress(run_dir) if isinstance(metric_value(r, metric), int | float)]
            if not rows:
                continue
            xs = [r.get(x, i) for i, r in enumerate(rows)]
            ys = [metric_value(r, metric) for r in rows]
            (line,) = ax.plot(xs, ys, label=label, linewidth=1.4)
            exploits = [(xv, yv) for xv, yv, r in zip(xs, ys, rows, strict=True) if "exploit/donor" in r]
            if exploits:
                ax.scatter(*zip(*exploits, strict=True), marker="v", s=40, color=line.get_color(), zorder=3)
                marked += len(exploits)
        lines = len(ax.get_lines())
        if lines == 0:
            raise RLGearError(f"{folder}: no results with '{metric}' to plot")
        if marked:
            ax.scatter([], [], marker="v", color="gray", label="PBT exploit")
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.set_title(folder.name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        path = Path(out) if out else folder / f"{metric.replace('/', '_')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return PlotSummary(path=path, lines=lines, exploit_marks=marked, metric=metric)
