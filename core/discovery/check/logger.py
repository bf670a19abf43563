"""The checks of a logger plugin (``rlgear plugins --check NAME --kind logger``).

The logger is built as a run builds it (no ``logging.logger_options``) and driven
through a short run in a temporary run folder: ``open``, three results (with a
``None``, a NaN and a string among the values, as real results have),
``on_checkpoint`` with a checkpoint folder, ``close``; then a resume (``open``
with a :class:`~rlgear.run.logger.ResumePoint`), one more result and ``close``.
It must leave the run folder's own files (``config.yaml``, checkpoints) as they
were. Nothing is sent anywhere: W&B runs with ``WANDB_MODE=offline`` and
MLflow with its local store during the check.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rlgear.discovery import registry
from rlgear.discovery.check._base import _Checks, _load
from rlgear.run.logger import ResumePoint


def _result(iteration: int) -> dict:
    return {
        "training_iteration": iteration,
        "timesteps_total": 100 * iteration,
        "episode_return_mean": None if iteration == 1 else 10.0 * iteration,
        "learner/total_loss": float("nan") if iteration == 2 else 0.5,
        "info/note": "text",
    }


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in ("WANDB_MODE", "MLFLOW_TRACKING_URI", "WANDB_SILENT")}
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def _check_logger(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    with checks.step(
        "construct",
        "a run builds the logger as cls(**logging.logger_options.<name>): give every option a default",
    ):
        logger = cls()
    checks.add("construct", True, f"{cls.__qualname__}() with default options")
    config = {
        "algorithm": "ppo",
        "env": {"name": "CartPole-v1", "kwargs": {"token": "<redacted>"}},
        "seed": 0,
    }
    with tempfile.TemporaryDirectory(prefix="rlgear-check-") as folder, _offline():
        run_dir = Path(folder)
        (run_dir / "config.yaml").write_text("algorithm: ppo\n")
        checkpoint = run_dir / "checkpoint_000002"
        checkpoint.mkdir()
        (checkpoint / "state.json").write_text("{}\n")
        own = _snapshot(run_dir)
        run_fix = (
            "open(run_dir, config, resume), log(result), on_checkpoint(path) and close() must accept what a "
            "run passes: results hold None, NaN and strings besides numbers"
        )
        with checks.step("log a run", run_fix):
            logger.open(run_dir, config, None)
            for iteration in (1, 2):
                logger.log(_result(iteration))
            logger.on_checkpoint(checkpoint)
            logger.log(_result(3))
            logger.close()
        checks.add("log a run", True, "open, 3 results, on_checkpoint, close")
        resume_fix = "open() with a ResumePoint (a --resume) must continue the run's record, not fail"
        with checks.step("resume", resume_fix):
            logger = cls()
            logger.open(run_dir, config, ResumePoint(iteration=2, timesteps_total=200))
            logger.log(_result(3))
            logger.close()
        checks.add("resume", True, "open(resume=ResumePoint(2, 200)), 1 result, close")
        after = _snapshot(run_dir)
        changed = sorted(name for name, data in own.items() if after.get(name) != data)
        checks.add(
            "run folder",
            not changed,
            "config.yaml and the checkpoint are untouched"
            if not changed
            else f"changed or removed: {changed}",
            "write only the logger's own files: config.yaml and checkpoints belong to the run",
        )
