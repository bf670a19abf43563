"""``progress.jsonl``: one JSON object per iteration, the run's own record.

``--resume``, ``rlgear plot`` and ``rlgear tune`` read it, so every run has this
logger (the config refuses ``logging.loggers`` without it). On a resume the
runner has already moved the rows logged after the restored checkpoint to
``progress.discarded.jsonl`` (:func:`rlgear.run.logger.discard_results_after`);
this logger appends after the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import PROGRESS_FILE, Logger, ResumePoint, jsonable


class JsonlLogger(Logger):
    description = "progress.jsonl: one JSON result per line (required: --resume and rlgear plot read it)"

    def __init__(self) -> None:
        self._file = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        self._file = open(run_dir / PROGRESS_FILE, "a", buffering=1)  # noqa: SIM115 - closed in close()

    def log(self, result: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(jsonable(dict(result)), allow_nan=False) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
