"""The TrialRunner: the event loop of an experiment.

Each step first asks the searcher (through a :class:`~rlgear.tune.trial_source.TrialSource`)
for the trials it suggests now, then starts the trials the scheduler picks while the executor has room,
takes the next finished iteration of any trial, lets the stop criteria and the
scheduler decide (CONTINUE, PAUSE or STOP; PBT exploits inside that call),
logs the result to the trial's ``progress.jsonl``, checkpoints the trial on its
schedule, and rewrites ``experiment_state.json`` atomically. A trial that
raises is retried from its last checkpoint (with the config that checkpoint
was written with) up to ``tune.max_failures`` times, then marked ERROR.

Trial states: PENDING (waiting for a trainer), RUNNING (has one), PAUSED
(checkpointed, trainer released, may run again), TERMINATED, ERROR.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.errors import RLGearError
from rlgear.run import checkpoint as ckpt
from rlgear.run.logger import ResultLogger
from rlgear.run.runner import interrupt_handler, should_stop
from rlgear.scheduler import Trial, TrialScheduler, TrialStatus
from rlgear.tune import experiment_state as es
from rlgear.tune.checkpoint_store import CheckpointStore, TrialCheckpoint
from rlgear.tune.config import TuneConfig
from rlgear.tune.display import TrialTable, metric_value
from rlgear.tune.executor import TrialExecutor
from rlgear.tune.trial_source import TrialSource

DEFAULT_CHECKPOINT_FREQ = 5
FINISHED = (TrialStatus.TERMINATED, TrialStatus.ERROR)


class ExploitFailed(Exception):
    """reset_config or restore raised during an exploit; the trial is handled as failed."""


class TrialRunner:
    """Drives trials through an executor under a scheduler; see the module docstring."""

    def __init__(
        self,
        experiment_dir: str | os.PathLike,
        tune: TuneConfig,
        scheduler: TrialScheduler,
        executor: TrialExecutor,
        trials: Sequence[Trial],
        source: str = "config",
        display: TrialTable | None = None,
        resumed_state: dict[str, Any] | None = None,
        trial_source: TrialSource | None = None,
    ):
        self.experiment_dir = Path(experiment_dir)
        self.tune = tune
        self._key_check: config_mod.ResultKeyCheck | None = None  # built at the first result
        self.scheduler = scheduler
        self.executor = executor
        self.trials = list(trials)
        #: Where new trials come from (the searcher); None: ``trials`` is the whole experiment.
        self.trial_source = trial_source
        self.source = source
        self.display = display or TrialTable("none", tune.metric)
        self.store = CheckpointStore(
            self.experiment_dir / ".exploit_checkpoints", tune.checkpoint_memory_mb * 2**20
        )
        self.events: list[dict[str, Any]] = []
        self.iterations = 0
        self.exploits = 0
        self.recreations = 0
        self.exploit_seconds: list[float] = []
        self.loop_time_s = 0.0
        self.start_time_s = 0.0  # of loop_time_s: building (and restoring) trainers
        self._loggers: dict[str, ResultLogger] = {}
        self._since_checkpoint: dict[str, int] = {}
        self._progress_lines: dict[str, int] = {}
        self._checkpoint_lines: dict[str, int] = {}
        self._memory_checkpoints: dict[str, TrialCheckpoint] = {}
        self._pending_result_keys: dict[str, dict[str, Any]] = {}
        self._run_configs: dict[str, tuple[str, RunConfig]] = {}
        self._interrupted = False
        self._trial_json_cache: dict[str, tuple[tuple[Any, ...], str]] = {}
        for trial in self.trials:
            self.scheduler.on_trial_add(self, trial)
        if resumed_state is not None:
            self._load_resumed(resumed_state)

    # --- what schedulers see (rlgear.scheduler.TrialRunnerView) -------------
    def get_trials(self) -> list[Trial]:
        return self.trials

    def save_trial_to_memory(self, trial: Trial, time_attr_value: float) -> TrialCheckpoint:
        snapshot = self.executor.save_to_object(trial)
        handle = TrialCheckpoint(
            trial.trial_id, int(snapshot["metadata"]["training_iteration"]), float(time_attr_value)
        )
        self.store.put(handle, snapshot)
        previous = self._memory_checkpoints.get(trial.trial_id)
        self._memory_checkpoints[trial.trial_id] = handle
        if previous is not None and not self._still_referenced(previous):
            self.store.release(previous)
        return handle

    def _still_referenced(self, handle: TrialCheckpoint) -> bool:
        held = getattr(self.scheduler, "held_checkpoints", None)
        return bool(held and handle.key in {h.key for h in held()})

    def exploit_trial(self, trial: Trial, checkpoint: TrialCheckpoint, new_config: dict[str, Any]) -> bool:
        """reset_config + restore on the live trainer; recreate only if reset_config refuses."""
        start = time.perf_counter()
        snapshot = self.store.get(checkpoint)  # CheckpointError: nothing changed, the donor is skipped
        run_config = self.run_config(trial, new_config)
        try:
            in_place = self.executor.reset_config(trial, run_config)
            if not in_place:
                self.executor.stop_trial(trial)
                self.executor.start_trial(trial, run_config)
                trial.num_recreations += 1
                self.recreations += 1
            self.executor.restore_from_object(trial, snapshot)
            # Weights, optimizer and config come from the donor; randomness must not, or two
            # trials that took the same donor (and explored value) would run identically.
            self.executor.reseed(trial, exploit_seed(new_config.get("seed"), trial.trial_id, self.exploits))
        except Exception as err:  # the trial's trainer is half-changed: a trial failure (retried)
            raise ExploitFailed(trial.trial_id) from err
        trial.config = new_config
        self.exploit_seconds.append(time.perf_counter() - start)
        self.exploits += 1
        return in_place

    def log_event(self, event: dict[str, Any]) -> None:
        event = {"time": time.time(), **event}
        self.events.append(event)
        es.append_event(self.experiment_dir, event)
        trial_id = event.get("trial_id")
        for trial in self.trials:  # show mutated keys in the table even when they were not searched
            if trial.trial_id == trial_id and isinstance(event.get("new_config"), dict):
                for path, value in event["new_config"].items():
                    trial.values.setdefault(path, value)
        if trial_id is not None:
            self._pending_result_keys.setdefault(trial_id, {}).update(
                {f"{event['event']}/{k}": v for k, v in event.items() if k not in ("event", "trial_id")}
            )
        self.display.message(describe_event(event))

    # --- configs ----------------------------------------------------------------
    def run_config(self, trial: Trial, raw: dict[str, Any] | None = None) -> RunConfig:
        """The validated RunConfig of a trial's raw config (cached while the config is unchanged)."""
        raw = trial.config if raw is None else raw
        key = repr(raw)
        cached = self._run_configs.get(trial.trial_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        config = config_mod.resolve(raw, source=f"{self.source} ({trial.trial_id})")
        self._run_configs[trial.trial_id] = (key, config)
        return config

    def checkpoint_freq(self, config: RunConfig) -> int:
        return self.tune.checkpoint_freq or config.checkpoint.every or DEFAULT_CHECKPOINT_FREQ

    # --- the loop ---------------------------------------------------------------------
    def is_finished(self) -> bool:
        searching = self.trial_source is not None and not self.trial_source.done
        return not searching and all(t.status in FINISHED for t in self.trials)

    def _add_suggested_trials(self) -> None:
        """Every trial the searcher suggests now (until it waits for a result or is done)."""
        if self.trial_source is None:
            return
        while (trial := self.trial_source.next_trial()) is not None:
            self.trials.append(trial)
            self.scheduler.on_trial_add(self, trial)

    def _trial_finished(self, trial: Trial) -> None:
        """The trial is TERMINATED or ERROR for good: the searcher hears its last result."""
        if self.trial_source is not None:
            self.trial_source.on_trial_complete(trial)

    def run(self) -> None:
        """Step until every trial is TERMINATED or ERROR (or Ctrl-C: checkpoint, save state, return)."""

        def on_interrupt() -> None:
            self._interrupted = True
            if hasattr(self.executor, "request_stop"):
                self.executor.request_stop()
            self.display.message("stopping: checkpointing every running trial (resume with --resume)")

        try:
            with interrupt_handler(on_interrupt):
                self.save_state()
                while not self.is_finished() and not self._interrupted:
                    self.step()
                if self._interrupted:
                    self._checkpoint_live_trials()
                    self.save_state()
                    self.display.message(
                        f"interrupted; continue with: rlgear tune CONFIG --resume {self.experiment_dir}"
                    )
        finally:
            self.executor.shutdown()
            for logger in self._loggers.values():
                logger.close()
            self._loggers.clear()
            self.display.close(self.trials)

    def step(self) -> None:
        """Start what can start, then process one finished iteration; save the state."""
        start = time.perf_counter()
        self._start_trials()
        self.start_time_s += time.perf_counter() - start
        if self.executor.in_flight() == 0:
            if not self.is_finished() and self.executor.wait_for_resources(self.tune.resource_timeout_s):
                return  # the cluster has room again (a node came back): start trials next step
            if not self.is_finished():
                waiting = [t.trial_id for t in self.trials if t.status not in FINISHED]
                if not waiting:
                    raise RLGearError(
                        f"searcher '{self.tune.searcher}' suggested no trial although none is running: "
                        "it must return a suggestion or Searcher.FINISHED then (None only while trials run)"
                    )
                raise RLGearError(
                    f"trials {', '.join(waiting)} can never start: the executor has no room for them "
                    "(check tune.max_concurrent and the Ray cluster's CPUs against workers.num_cpus_for_driver)"
                )
            return
        trial, outcome = self.executor.get_next_result()
        if isinstance(outcome, BaseException):
            self._on_error(trial, outcome)
        else:
            self._on_result(trial, outcome)
        self.save_state()
        self.display.update(self.trials)
        self.loop_time_s += time.perf_counter() - start

    def _start_trials(self) -> None:
        if not self._interrupted:
            self._add_suggested_trials()
        while not self._interrupted:
            trial = self.scheduler.choose_trial_to_run(self)
            if trial is None or trial.status in FINISHED or trial.status == TrialStatus.RUNNING:
                return
            raw = trial.checkpoint_config if trial.checkpoint and trial.checkpoint_config else trial.config
            config = self.run_config(trial, raw)  # a bad config is the user's: it stops the experiment
            if not self.executor.has_resources(trial, config):
                return
            try:
                trial.config = raw
                trial.logdir = trial.logdir or str(self.experiment_dir / trial.trial_id)
                self.executor.start_trial(trial, config)
                if trial.checkpoint:
                    self.executor.restore(trial, trial.checkpoint)
                    self._truncate_progress(trial)
            except Exception as err:
                self._on_error(trial, err)
                continue
            trial.status = TrialStatus.RUNNING
            self._since_checkpoint[trial.trial_id] = 0
            self.executor.continue_training(trial)

    def _on_result(self, trial: Trial, result: dict[str, Any]) -> None:
        self.iterations += 1
        result = {**result, "trial_id": trial.trial_id, "timestamp": time.time()}
        trial.last_result = result
        config = self.run_config(trial)
        if self._key_check is None:
            keys = {key: f"stop.{key}" for key in config.stop}
            self._key_check = config_mod.ResultKeyCheck({**keys, self.tune.metric: "tune.metric"})
        self._key_check.check(result)
        reason = should_stop(result, config.stop)
        if reason:
            decision = TrialScheduler.STOP
            self.scheduler.on_trial_complete(self, trial, result)
        else:
            try:
                decision = self.scheduler.on_trial_result(self, trial, result)
            except ExploitFailed as err:
                self._log_result(trial, result)
                self._on_error(trial, err.__cause__ or err)
                return
        result.update(self._pending_result_keys.pop(trial.trial_id, {}))
        self._log_result(trial, result)
        self._since_checkpoint[trial.trial_id] = self._since_checkpoint.get(trial.trial_id, 0) + 1
        try:
            self._apply_decision(trial, decision, reason)
        except Exception as err:  # a save or stop on an actor whose node just died
            if not self.executor.is_lost_actor(err):
                raise
            self._on_error(trial, err)

    def _apply_decision(self, trial: Trial, decision: str, reason: str | None) -> None:
        """Checkpoint, continue, pause or stop the trial as the scheduler (or its stop criteria) decided."""
        if decision == TrialScheduler.CONTINUE:
            if self._since_checkpoint[trial.trial_id] >= self.checkpoint_freq(self.run_config(trial)):
                self._save_checkpoint(trial)
            self.executor.continue_training(trial)
        elif decision == TrialScheduler.PAUSE:
            self._save_checkpoint(trial)
            self.executor.stop_trial(trial)
            trial.status = TrialStatus.PAUSED
        elif decision == TrialScheduler.STOP:
            if self.run_config(trial).checkpoint.at_end:
                self._save_checkpoint(trial)
            self.executor.stop_trial(trial)
            trial.status = TrialStatus.TERMINATED
            self._trial_finished(trial)
            if not reason:
                self.scheduler.on_trial_remove(self, trial)
                self.display.message(f"{trial.trial_id} stopped early by the {self.tune.scheduler} scheduler")
        else:
            raise RLGearError(
                f"scheduler '{self.tune.scheduler}' returned {decision!r}; expected CONTINUE, PAUSE or STOP"
            )

    def _on_error(self, trial: Trial, err: BaseException) -> None:
        self.executor.stop_trial(trial)
        if self.executor.is_lost_actor(err) and trial.num_lost_actors < self.tune.max_lost_actors:
            # Its process or node is gone, not its code: restart from the checkpoint, not a failure.
            trial.num_lost_actors += 1
            trial.status = TrialStatus.PENDING
            where = f"from {Path(trial.checkpoint).name}" if trial.checkpoint else "from the start"
            self.log_event(
                {
                    "event": "actor_lost",
                    "trial_id": trial.trial_id,
                    "lost": trial.num_lost_actors,
                    "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
                }
            )
            self.display.message(
                f"{trial.trial_id}: its trainer actor was lost ({type(err).__name__}); restarting {where}"
            )
            return
        trial.num_failures += 1
        message = f"{type(err).__name__}: {err}"
        if trial.num_failures <= self.tune.max_failures:
            trial.status = TrialStatus.PENDING
            where = f"from {Path(trial.checkpoint).name}" if trial.checkpoint else "from the start"
            self.log_event(
                {
                    "event": "retry",
                    "trial_id": trial.trial_id,
                    "failure": trial.num_failures,
                    "error": message,
                }
            )
            self.display.message(f"{trial.trial_id} failed ({message}); retrying {where}")
        else:
            trial.status = TrialStatus.ERROR
            trial.error = message
            self.scheduler.on_trial_error(self, trial)
            self._trial_finished(trial)
            self.log_event({"event": "error", "trial_id": trial.trial_id, "error": message})

    # --- results and checkpoints ----------------------------------------------------------
    def _log_result(self, trial: Trial, result: dict[str, Any]) -> None:
        logger = self._loggers.get(trial.trial_id)
        if logger is None:
            tensorboard = self.run_config(trial).logging.tensorboard
            logger = self._loggers[trial.trial_id] = ResultLogger(trial.logdir, tensorboard)
            if trial.trial_id not in self._progress_lines:
                self._progress_lines[trial.trial_id] = _count_lines(Path(trial.logdir) / "progress.jsonl")
        logger.log(result)
        self._progress_lines[trial.trial_id] = self._progress_lines.get(trial.trial_id, 0) + 1

    def _truncate_progress(self, trial: Trial) -> None:
        """After a restore from disk: drop results logged after that checkpoint (they are redone)."""
        keep = self._checkpoint_lines.get(trial.trial_id)
        path = Path(trial.logdir) / "progress.jsonl"
        if keep is None or not path.exists():
            return
        logger = self._loggers.pop(trial.trial_id, None)
        if logger is not None:
            logger.close()
        lines = path.read_text().splitlines(keepends=True)
        if len(lines) > keep:
            path.write_text("".join(lines[:keep]))
        self._progress_lines[trial.trial_id] = min(len(lines), keep)

    def _save_checkpoint(self, trial: Trial) -> None:
        path = self.executor.save(trial)
        trial.checkpoint = path
        trial.checkpoint_config = copy.deepcopy(trial.config)
        self._checkpoint_lines[trial.trial_id] = self._progress_lines.get(trial.trial_id, 0)
        self._since_checkpoint[trial.trial_id] = 0
        _prune_by_age(Path(trial.logdir), self.run_config(trial).checkpoint.keep, keep_path=path)

    def _checkpoint_live_trials(self) -> None:
        for trial in self.trials:
            if trial.status == TrialStatus.RUNNING and self.executor.is_live(trial):
                try:
                    self._save_checkpoint(trial)
                except Exception as err:  # keep the older checkpoint; resume continues from it
                    self.display.message(f"{trial.trial_id}: could not checkpoint ({err})")

    # --- state ----------------------------------------------------------------------------
    def _trial_json(self, trial: Trial) -> str:
        """The trial's JSON, re-serialized only when something in it changed (keeps a step cheap)."""
        lines = self._checkpoint_lines.get(trial.trial_id)
        key = (
            trial.status, id(trial.last_result), id(trial.config), trial.checkpoint, trial.num_failures,
            trial.num_recreations, trial.error, trial.logdir, lines, len(trial.values),
        )  # fmt: skip
        cached = self._trial_json_cache.get(trial.trial_id)
        if cached is None or cached[0] != key:
            cached = (key, es.dump_trial(trial, {"progress_lines_at_checkpoint": lines}))
            self._trial_json_cache[trial.trial_id] = cached
        return cached[1]

    def save_state(self) -> None:
        es.write_state(
            self.experiment_dir,
            [self._trial_json(t) for t in self.trials],
            {
                "scheduler": {"name": self.tune.scheduler, "state": self.scheduler.get_state()},
                **({"search": self.trial_source.get_state()} if self.trial_source is not None else {}),
                "runner": {
                    "iterations": self.iterations,
                    "exploits": self.exploits,
                    "recreations": self.recreations,
                },
                "timestamp": time.time(),
            },
        )

    def _load_resumed(self, state: dict[str, Any]) -> None:
        for data in state["trials"]:
            lines = data.get("progress_lines_at_checkpoint")
            if lines is not None:
                self._checkpoint_lines[data["trial_id"]] = int(lines)
        self.scheduler.set_state(state.get("scheduler", {}).get("state", {}))
        runner = state.get("runner", {})
        self.iterations = int(runner.get("iterations", 0))
        self.exploits = int(runner.get("exploits", 0))
        self.recreations = int(runner.get("recreations", 0))

    # --- results ----------------------------------------------------------------------------
    def best_trial(self) -> Trial | None:
        return best_trial(self.trials, self.tune.metric, self.tune.mode)


def best_trial(trials: Sequence[Trial], metric: str, mode: str) -> Trial | None:
    """The trial whose last result has the best ``metric`` (None if no trial reported it)."""
    scored = [(metric_value(t.last_result, metric), t) for t in trials]
    scored = [(v, t) for v, t in scored if isinstance(v, int | float)]
    if not scored:
        return None
    pick = max if mode == "max" else min
    return pick(scored, key=lambda pair: pair[0])[1]


def describe_event(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "exploit":
        how = "in place" if event.get("reset_in_place") else "trainer recreated"
        return (
            f"pbt: {event['trial_id']} exploits {event['donor']} (checkpoint at iteration "
            f"{event['donor_iteration']}, {how}); explore {event.get('old_config')} -> {event.get('new_config')}"
        )
    details = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "time"))
    return f"{kind}: {details}"


def exploit_seed(seed: int | None, trial_id: str, exploit_count: int) -> int:
    """The seed a trial's random streams restart from after an exploit.

    Derived from the trial's own seed, its id (trials may share a seed) and the
    experiment's exploit count, so it differs between trials and exploits and a
    resumed experiment draws the same ones again.
    """
    entropy = [int(seed or 0), zlib.crc32(trial_id.encode()), int(exploit_count)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] % 2**31)


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def _prune_by_age(run_dir: Path, keep: int | None, keep_path: str) -> None:
    """Keep the newest ``keep`` checkpoints by write time (PBT can move a trial's iteration back)."""
    if keep is None:
        return
    found = sorted(ckpt.list_checkpoints(run_dir), key=lambda p: p.stat().st_mtime)
    for path in found[:-keep]:
        if str(path) != str(keep_path):
            shutil.rmtree(path, ignore_errors=True)
