"""Where results go: the logger contract, and the loggers of one run.

A logger is a plugin (entry-point group ``rlgear.loggers``) that a run names in
``logging.loggers``; the built-ins are ``jsonl`` (``progress.jsonl``, which
``--resume``, ``rlgear plot`` and ``rlgear tune`` read, so every run has it),
``tensorboard``, ``csv``, ``mlflow`` and ``wandb``. This module defines the
contract (:class:`Logger`), what a resumed run tells its loggers
(:class:`ResumePoint`), and :class:`RunLoggers`, which drives a run's loggers
together. It imports no logger: the registry loads the ones a run names.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rlgear.config.logger_options import check_options


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


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues: the restored checkpoint's counters.

    Rows of iterations after ``iteration`` were logged by the run before it
    stopped, and are logged again (the runner has already moved them out of
    ``progress.jsonl``): a logger that can forget them should (TensorBoard
    keeps only its points up to ``timesteps_total``), one that cannot says so
    in its documentation.
    """

    iteration: int
    timesteps_total: int


class Logger:
    """The contract of a logger plugin: where a run's config, results and checkpoints go.

    The runner builds the class as ``Logger(**options)`` (``logging.logger_options.<name>``:
    each key must be an ``__init__`` parameter), then calls, in order:

    * ``open(run_dir, config, resume)`` once, before the first result: ``run_dir``
      is the run folder, ``config`` the resolved config as plain data with its
      secrets already redacted (log it as the run's parameters), ``resume`` a
      :class:`ResumePoint` on ``--resume``, else ``None``;
    * ``log(result)`` after every iteration, with the flat result dict (numbers,
      ``None`` for a statistic with no data yet, a few strings such as
      ``evaluation/video``, a path relative to ``run_dir``);
    * ``on_checkpoint(path)`` after each checkpoint folder is written (upload it
      as an artifact where the tool has them);
    * ``close()`` once at the end, also when the run failed.

    A logger must not change the run folder's other files. Errors it raises stop
    the run (a checkpoint is written first), so an unreachable service should
    fail in ``open``, not hours later.
    """

    #: one line for ``rlgear plugins``
    description: ClassVar[str] = ""

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        """Start logging the run in ``run_dir``; ``config`` has its secrets redacted."""

    def log(self, result: Mapping[str, Any]) -> None:
        """Record one iteration's result."""
        raise TypeError(f"{type(self).__name__} must implement log()")

    def on_checkpoint(self, path: Path) -> None:
        """A checkpoint folder was written (default: nothing)."""

    def close(self) -> None:
        """Flush and release everything (default: nothing)."""


def numeric_items(result: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a result (no bools, no None, no strings): what metric stores take."""
    out = {}
    for key, value in result.items():
        numeric = isinstance(value, int | float | np.number) and not isinstance(value, bool)
        if numeric and math.isfinite(float(value)):
            out[key] = float(value)
    return out


#: the logger every run has (progress.jsonl: what --resume, rlgear plot and rlgear tune read)
REQUIRED_LOGGER = "jsonl"


def logger_names(logging: Any) -> list[str]:
    """The loggers a ``logging`` config section asks for: ``loggers``, without tensorboard when ``tensorboard: false``."""
    names = list(logging.loggers)
    if not logging.tensorboard:
        names = [n for n in names if n.partition("@")[0] != "tensorboard"]
    return names


class RunLoggers:
    """The loggers of one run, driven together; ``close`` closes every one, even after an error."""

    def __init__(self, loggers: Sequence[Logger], names: Sequence[str] | None = None):
        self.loggers = list(loggers)
        #: the plugin names, for errors (``logging.loggers``)
        self.names = list(names) if names is not None else [type(lg).__name__ for lg in self.loggers]

    @classmethod
    def build(
        cls, names: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None = None, fail: Any = None
    ) -> RunLoggers:
        """Load the named logger plugins and build each with its options (checked against ``__init__``)."""
        from rlgear.discovery import registry
        from rlgear.errors import ConfigError, PluginError

        def plain_fail(path: str, message: str) -> ConfigError:
            return ConfigError(f"{path}: {message}")

        fail = fail or plain_fail
        options = options or {}
        loggers = []
        for i, name in enumerate(names):
            try:
                logger_class = registry.load_logger(name)
            except PluginError as err:
                raise fail(f"logging.loggers[{i}]", str(err)) from err
            kwargs = check_options(logger_class, options.get(name, {}), name, fail)
            try:
                loggers.append(logger_class(**kwargs))
            except (TypeError, ValueError) as err:
                raise fail(f"logging.logger_options.{name}", f"logger '{name}' refused them: {err}") from err
        return cls(loggers, names)

    def open(
        self, run_dir: str | os.PathLike, config: Mapping[str, Any], resume: ResumePoint | None = None
    ) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        from rlgear.discovery.registry import missing_dependency_hint
        from rlgear.errors import PluginError

        for name, logger in zip(self.names, self.loggers, strict=True):
            try:
                logger.open(run_dir, config, resume)
            except ModuleNotFoundError as err:  # its tool is an extra: say which to install
                raise PluginError(f"logger '{name}' cannot start: {missing_dependency_hint(err)}") from err

    def log(self, result: Mapping[str, Any]) -> None:
        for logger in self.loggers:
            logger.log(result)

    def on_checkpoint(self, path: str | os.PathLike) -> None:
        for logger in self.loggers:
            logger.on_checkpoint(Path(path))

    def close(self) -> None:
        errors = []
        for logger in self.loggers:
            try:
                logger.close()
            except Exception as err:  # close the others; report the first
                errors.append(err)
        self.loggers = []
        if errors:
            raise errors[0]


class ResultLogger(RunLoggers):
    """``progress.jsonl`` and, optionally, TensorBoard, opened on ``run_dir``: a trial of ``rlgear tune``."""

    def __init__(
        self, run_dir: str | os.PathLike, tensorboard: bool = True, resume: ResumePoint | None = None
    ):
        names = [REQUIRED_LOGGER, "tensorboard"] if tensorboard else [REQUIRED_LOGGER]
        super().__init__(RunLoggers.build(names).loggers, names)
        self.run_dir = Path(run_dir)
        self.open(self.run_dir, {}, resume)
