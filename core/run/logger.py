"""Where results go: ``progress.jsonl`` (one JSON object per iteration) and TensorBoard."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """Numbers as plain Python numbers; NaN and infinities as null (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


PROGRESS_FILE = "progress.jsonl"
DISCARDED_FILE = "progress.discarded.jsonl"


def discard_results_after(run_dir: str | os.PathLike, iteration: int) -> int:
    """Move the rows of ``progress.jsonl`` logged after ``iteration`` to ``progress.discarded.jsonl``.

    Why: a run killed after its last checkpoint has logged iterations that a
    resume from that checkpoint runs again; without this they would appear
    twice. Nothing is lost: the rows move aside (appended, so several resumes
    keep them all), and a torn last line (the kill came mid-write) goes with
    them. ``progress.jsonl`` is replaced atomically. Returns how many rows moved.
    """
    path = Path(run_dir) / PROGRESS_FILE
    if not path.exists():
        return 0
    kept, dropped = [], []
    for line in path.read_text().splitlines(keepends=True):
        try:
            row_iteration = int(json.loads(line)["training_iteration"])
        except (ValueError, KeyError, TypeError):
            row_iteration = None  # torn or foreign: not a result row of this run
        (kept if row_iteration is not None and row_iteration <= iteration else dropped).append(line)
    if not dropped:
        return 0
    with open(Path(run_dir) / DISCARDED_FILE, "a") as aside:
        aside.writelines(line if line.endswith("\n") else line + "\n" for line in dropped)
        aside.flush()
        os.fsync(aside.fileno())
    temporary = path.with_name(path.name + ".tmp-resume")
    temporary.write_text("".join(kept))
    os.replace(temporary, path)
    return len(dropped)


class ResultLogger:
    """Appends results to ``<run_dir>/progress.jsonl`` and, optionally, TensorBoard events.

    ``purge_step``: on a resume, the first TensorBoard step that belongs to the
    resumed run (the checkpoint's ``timesteps_total + 1``); TensorBoard hides
    events at or after it written before the resume, so curves don't double back.
    """

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True, purge_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._progress = open(self.run_dir / PROGRESS_FILE, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter  # imported only when used

            self._writer = SummaryWriter(logdir=str(self.run_dir), flush_secs=10, purge_step=purge_step)

    def log(self, result: dict[str, Any]) -> None:
        self._progress.write(json.dumps(jsonable(result), allow_nan=False) + "\n")
        if self._writer is not None:
            step = int(result.get("timesteps_total", 0))
            for key, value in result.items():
                numeric = isinstance(value, int | float | np.number) and not isinstance(value, bool)
                if numeric and math.isfinite(float(value)):
                    self._writer.add_scalar(f"rlgear/{key}", float(value), global_step=step)

    def close(self) -> None:
        self._progress.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
