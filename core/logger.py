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


class ResultLogger:
    """Appends results to ``<run_dir>/progress.jsonl`` and, optionally, TensorBoard events."""

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._progress = open(self.run_dir / "progress.jsonl", "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter  # imported only when used

            self._writer = SummaryWriter(logdir=str(self.run_dir), flush_secs=10)

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
