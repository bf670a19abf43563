"""A logger plugin: ``best.json``, the best result of the run so far (docs/plugins/loggers.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint


class BestResultLogger(Logger):
    description = "best.json: the result with the highest value of one metric"

    def __init__(self, metric: str = "episode_return_mean") -> None:
        self.metric = metric
        self.path: Path | None = None
        self.best: dict[str, Any] | None = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        self.path = run_dir / "best.json"
        if resume is not None and self.path.exists():
            saved = json.loads(self.path.read_text())
            # a result logged after the restored checkpoint is about to run again: forget it
            if saved["training_iteration"] <= resume.iteration:
                self.best = saved

    def log(self, result: Mapping[str, Any]) -> None:
        value = result.get(self.metric)
        if value is None:
            return  # no episode has ended yet
        if self.best is None or value > self.best[self.metric]:
            self.best = {"training_iteration": result["training_iteration"], self.metric: value}
            temporary = self.path.with_name(".best.json.tmp")
            temporary.write_text(json.dumps(self.best) + "\n")
            os.replace(temporary, self.path)  # a reader never sees half a file

    def close(self) -> None:
        self.best = None
