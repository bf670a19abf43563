"""Running one training job: run folder, results, checkpoints, stop criteria, Ctrl-C.

This is what ``rlgear train`` and ``rlgear.train()`` do. The trainer does the
learning; the runner owns everything around it that a user expects from a
run: a folder with the resolved config, ``progress.jsonl`` and TensorBoard
events, checkpoints on a schedule and at the end, a live progress display,
and a clean exit on Ctrl-C (a checkpoint is written, exit status 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from rlgear import config as config_mod
from rlgear import env as env_mod
from rlgear.config import RunConfig
from rlgear.config.deprecated import upgrade_saved
from rlgear.discovery import registry
from rlgear.errors import CheckpointError, ConfigError, RLGearError
from rlgear.run import checkpoint as ckpt
from rlgear.run.logger import DISCARDED_FILE, ResumePoint, RunLoggers, discard_results_after, logger_names
from rlgear.run.progress import Progress, summary_line

# Sections a resumed run may change (how long to run, how to save and log).
RESUMABLE_CHANGES = ("stop", "checkpoint", "logging")


def should_stop(result: dict[str, Any], stop: dict[str, float]) -> str | None:
    """The first stop criterion the result meets (as 'key >= threshold'), or None."""
    for key, threshold in stop.items():
        value = result.get(key)
        if value is not None and value >= threshold:
            return f"{key} >= {threshold}"
    return None


def new_run_dir(config: RunConfig) -> Path:
    parent = Path(config.logging.dir)
    if config.logging.name:
        run_dir = parent / config.logging.name
        if ckpt.list_checkpoints(run_dir) or (run_dir / "progress.jsonl").exists():
            raise ConfigError(
                f"logging.name: run folder {run_dir} already holds a run; continue it with "
                f"--resume {run_dir}, or pick another name"
            )
        return run_dir
    # a run without an env (an offline algorithm) is named after its data
    env = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.env.name or "dataset").strip("-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = parent / f"{config.algorithm}_{env}_{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = parent / f"{config.algorithm}_{env}_{stamp}_{suffix}"
    return run_dir


def check_resume_config(config: RunConfig, run_dir: Path) -> RunConfig:
    """The config to continue ``run_dir`` with; refuses one that changes what was trained."""
    saved_file = run_dir / "config.yaml"
    if not saved_file.exists():
        raise CheckpointError(f"--resume {run_dir}: not a run folder (no config.yaml)")
    saved = upgrade_saved(yaml.safe_load(saved_file.read_text()))  # a run saved with renamed keys resumes
    # the saved file has its secrets redacted; both sides under today's key names
    given = upgrade_saved(config_mod.redact_secrets(config.to_dict()))
    if given.get("seed") is None:
        given["seed"] = saved.get("seed")
    for section in given:
        if section in RESUMABLE_CHANGES:
            continue
        if given[section] != saved.get(section):
            raise ConfigError(
                f"--resume {run_dir}: the config's '{section}' differs from the run's "
                f"(run: {saved.get(section)!r}, given: {given[section]!r}); resume with the run's config "
                f"({saved_file}) or start a new run"
            )
    return dataclasses.replace(config, seed=given["seed"])


STOP_RECORD = "stopped.json"


def write_stop_record(
    run_dir: Path, reason: str, iteration: int, checkpoint: Path | None, error: BaseException | None = None
) -> None:
    """``<run_dir>/stopped.json``: why and where the run stopped (written atomically, replaced on resume)."""
    record: dict[str, Any] = {
        "reason": reason,
        "iteration": iteration,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if error is not None:
        record["error"] = {"type": type(error).__name__, "message": str(error)}
    temporary = run_dir / f".{STOP_RECORD}.tmp"
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(temporary, run_dir / STOP_RECORD)


@contextlib.contextmanager
def _saved_on_failure(trainer: Any, run_dir: Path, config: RunConfig) -> Iterator[None]:
    """An error escaping the training loop first leaves a checkpoint of the last good state.

    Why: a run that dies hours in (a lost cluster, a diverged loss, a crashing
    env) should cost only the iterations since it stopped: ``--resume`` goes on
    from this checkpoint. The weights are finite by construction (updates with a
    non-finite loss or gradient are skipped, and a checkpoint refuses NaN); if
    the save fails anyway, the newest earlier checkpoint stays the one to resume.
    A checkpoint of ``trainer.iteration`` already there (written when that
    iteration ended) is kept as it is: the trainer may hold part of the failed
    iteration's updates by now, and that checkpoint is the last good state.
    ``stopped.json`` records the cause either way. A second Ctrl-C (abort) saves nothing.
    """
    try:
        yield
    except KeyboardInterrupt:
        write_stop_record(run_dir, "aborted (second Ctrl-C)", trainer.iteration, ckpt.latest(run_dir))
        raise
    except BaseException as err:
        saved = None
        finished = run_dir / ckpt.checkpoint_name(trainer.iteration)
        if trainer.iteration > 0 and finished not in ckpt.list_checkpoints(run_dir):
            try:
                saved = Path(trainer.save())
                ckpt.prune(run_dir, config.checkpoint.keep)
            except Exception as save_error:  # keep the original error; say why there is no new checkpoint
                err.add_note(
                    f"rlgear: no checkpoint written at the failure ({type(save_error).__name__}: {save_error})"
                )
        newest = saved or ckpt.latest(run_dir)
        write_stop_record(run_dir, f"failed: {type(err).__name__}", trainer.iteration, newest, err)
        if newest is None:
            hint = f" (no checkpoint to resume from; see {run_dir / STOP_RECORD})"
        else:
            written = f"checkpoint {newest.name} written" if saved else f"newest checkpoint {newest.name}"
            hint = f" ({written}; continue with --resume {run_dir})"
        if isinstance(err, RLGearError):  # the CLI prints these as one line: the hint goes in it
            err.args = (f"{err}{hint}",)
        else:
            err.add_note(f"rlgear: the run stopped at iteration {trainer.iteration}{hint}")
        raise


@contextlib.contextmanager
def interrupt_handler(on_first: Any) -> Iterator[None]:
    """First Ctrl-C (or SIGTERM) asks the run to stop cleanly; a second Ctrl-C aborts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"count": 0}

    def handler(signum, frame):
        state["count"] += 1
        if state["count"] > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        on_first()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(
    config: RunConfig,
    resume: str | os.PathLike | None = None,
    hooks: Iterable[Any] = (),
    progress: str | None = None,
) -> dict[str, Any]:
    """Train until a stop criterion is met (or Ctrl-C); return the last result."""
    if resume is not None:
        run_dir = Path(resume)
        config = check_resume_config(config, run_dir)
        latest = ckpt.latest(run_dir)
        if latest is None:
            raise CheckpointError(f"--resume {run_dir}: the run has no complete checkpoint to continue from")
    else:
        if config.seed is None:  # pick one and record it, so every run can be repeated
            config = dataclasses.replace(config, seed=secrets.randbelow(2**31))
        run_dir = new_run_dir(config)
        latest = None
    trainer_cls = registry.load_algorithm(config.algorithm)
    try:
        trainer = trainer_cls(config, hooks=hooks, logdir=run_dir)  # fails before any work if unsupported
    except ConfigError as err:  # from plugin code (an adapter's make, a setup): say which config
        text = str(err)
        if text.startswith((f"{config.source}:", "--set ")):
            raise
        path, _, rest = text.partition(": ")
        if rest and path.split(".")[0] in config_mod.TOP_LEVEL_KEYS:  # "env.kwargs: ..." names its key
            raise config.fail(path, rest) from err
        raise ConfigError(f"{config.source}: {text}") from err
    display = Progress(progress or config.logging.progress, config.stop, config.logging.progress_interval_s)
    logger = None
    result: dict[str, Any] = {}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(config_mod.dump_yaml(config.to_dict()))
        resume_point = None
        if latest is not None:
            trainer.restore(latest)
            display.message(f"resumed {run_dir} from {latest.name} (iteration {trainer.iteration})")
            moved = discard_results_after(run_dir, trainer.iteration)
            if moved:
                display.message(
                    f"{moved} result row(s) logged after {latest.name} moved to {DISCARDED_FILE} "
                    "(those iterations run again)"
                )
            resume_point = ResumePoint(trainer.iteration, trainer.timesteps_total)
        else:
            display.message(f"run folder: {run_dir}")
        logger = RunLoggers.build(logger_names(config.logging), config.logging.logger_options, config.fail)
        logger.open(run_dir, config_mod.redact_secrets(config.to_dict()), resume_point)
        interrupted = False
        last_saved = -1
        reason = None

        def on_interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            trainer.request_stop()
            env_mod.stop_requested.set()  # an env blocked waiting for clients gives up
            display.message(
                "stopping after this training step and writing a checkpoint (Ctrl-C again to abort)"
            )

        env_mod.stop_requested.clear()
        key_check = config_mod.ResultKeyCheck({key: f"stop.{key}" for key in config.stop})
        with interrupt_handler(on_interrupt), _saved_on_failure(trainer, run_dir, config):
            while True:
                try:
                    result = trainer.train()
                except env_mod.EnvInterrupted:  # nothing sampled since the last iteration: save and stop
                    interrupted = True
                    break
                logger.log(result)
                display.update(result)
                key_check.check(result)
                reason = should_stop(result, config.stop)
                every = config.checkpoint.every
                if every and trainer.iteration % every == 0:
                    logger.on_checkpoint(trainer.save())
                    ckpt.prune(run_dir, config.checkpoint.keep)
                    last_saved = trainer.iteration
                if reason or interrupted:
                    break
            if (config.checkpoint.at_end or interrupted) and last_saved != trainer.iteration:
                logger.on_checkpoint(trainer.save())
                ckpt.prune(run_dir, config.checkpoint.keep)
        display.close()
        newest = ckpt.latest(run_dir)
        why = "interrupted" if interrupted else f"stop criterion met: {reason}"
        write_stop_record(run_dir, why, trainer.iteration, newest)
        display.message(f"done ({why}): {summary_line(result) if result else 'no iteration finished'}")
        display.message(f"run folder: {run_dir}")
        if newest is not None:
            display.message(f"checkpoint: {newest}")
            display.message(f"evaluate it: rlgear evaluate {newest}")
        return result
    finally:
        display.close()
        if logger is not None:
            logger.close()
        trainer.stop()
