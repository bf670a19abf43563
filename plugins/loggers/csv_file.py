"""``progress.csv``: the results as a table, one row per iteration, for spreadsheets and pandas.

Columns are every key seen so far, in the order first seen. Results gain keys
as a run goes on (``evaluation/*`` at the first evaluation, ``custom_metrics/*``
once an episode ends), so when one brings a new key the file is rewritten with
the wider header (atomically; older rows leave the new columns empty). A
missing value (``None``, NaN) is an empty cell. On a resume, rows after the
restored iteration are dropped, as ``progress.jsonl``'s are.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint, jsonable

CSV_FILE = "progress.csv"


def _cell(value: Any) -> Any:
    value = jsonable(value)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return value


class CsvLogger(Logger):
    description = "progress.csv: one row per iteration, a column per result key"

    def __init__(self) -> None:
        self.path: Path | None = None
        self.columns: list[str] = []
        self._file = None
        self._writer = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        self.path = run_dir / CSV_FILE
        rows: list[dict[str, str]] = []
        if self.path.exists():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or [])
                rows = list(reader)
            if resume is not None:
                rows = [r for r in rows if _iteration(r) is not None and _iteration(r) <= resume.iteration]
        self._rewrite(rows)

    def _rewrite(self, rows: list[Mapping[str, Any]]) -> None:
        """Write the header and ``rows`` to a temporary file, replace the CSV with it, and append from there."""
        if self._file is not None:
            self._file.close()
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with open(temporary, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            if self.columns:
                writer.writeheader()
            writer.writerows(rows)
        os.replace(temporary, self.path)
        self._file = open(self.path, "a", newline="", buffering=1)  # noqa: SIM115 - closed in close()
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")

    def log(self, result: Mapping[str, Any]) -> None:
        row = {str(k): _cell(v) for k, v in result.items()}
        new = [key for key in row if key not in self.columns]
        if new:
            self._file.close()
            self._file = None
            with open(self.path, newline="") as f:
                old_rows = list(csv.DictReader(f)) if self.columns else []
            self.columns += new
            self._rewrite(old_rows)
        self._writer.writerow(row)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _iteration(row: Mapping[str, str]) -> int | None:
    try:
        return int(float(row.get("training_iteration") or ""))
    except ValueError:
        return None
