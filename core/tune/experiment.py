"""An experiment from a config: build the searcher and the runner, run or resume it.

This is what ``rlgear tune CONFIG [--resume EXPERIMENT_DIR]`` and
``rlgear.tune.run()`` do. With a searcher whose suggestions never depend on
results (``random``, ``grid``) every trial config is built and validated before
any trial starts, so a mistake in one corner of the search space fails at once;
a model-based searcher (``optuna``) is asked as trials finish, each suggestion
validated when it is made, after one drawn config was validated up front.
"""

from __future__ import annotations

import copy
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config.overrides import _failer
from rlgear.errors import ConfigError, RLGearError, did_you_mean
from rlgear.scheduler import Trial, TrialStatus
from rlgear.tune import experiment_state as es
from rlgear.tune import search_space
from rlgear.tune.config import TuneConfig, build_tune, make_scheduler, make_searcher, split_tune_section
from rlgear.tune.display import TrialTable
from rlgear.tune.runner import TrialRunner
from rlgear.tune.trial_source import TrialSource

#: Keys a resumed experiment may change: how it is shown and where it runs, not what it trains.
#: ``logging.dir`` and ``tune.name`` only place a new experiment's folder; ``--resume DIR`` names it.
RESUMABLE_CHANGES = (
    "logging.dir",
    "tune.name",
    "logging.progress",
    "logging.progress_interval_s",
    "tune.max_concurrent",
    "tune.executor",
    "tune.ray_address",
    "tune.ray_num_cpus",
)


@dataclass
class TuneResult:
    """What an experiment produced."""

    experiment_dir: Path
    trials: list[Trial]
    metric: str
    mode: str
    best_trial: Trial | None
    events: list[dict[str, Any]] = field(default_factory=list)
    exploits: int = 0
    recreations: int = 0
    exploit_seconds: list[float] = field(default_factory=list)
    iterations: int = 0
    loop_time_s: float = 0.0
    start_time_s: float = 0.0
    train_time_s: float = 0.0

    @property
    def best_config(self) -> dict[str, Any] | None:
        return None if self.best_trial is None else self.best_trial.config

    @property
    def best_checkpoint(self) -> str | None:
        return None if self.best_trial is None else self.best_trial.checkpoint

    @property
    def best_result(self) -> dict[str, Any] | None:
        return None if self.best_trial is None else self.best_trial.last_result


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and data and not search_space.is_search_space(data):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def check_resume_config(saved: Mapping[str, Any], given: Mapping[str, Any], experiment_dir: Path) -> None:
    """Refuse to resume with a config that changes what the experiment trains."""
    old, new = _flatten(saved), _flatten(given)
    for path in sorted(set(old) | set(new)):
        if path.startswith(RESUMABLE_CHANGES):
            continue
        if old.get(path, "<unset>") != new.get(path, "<unset>"):
            raise ConfigError(
                f"--resume {experiment_dir}: the config no longer matches the experiment: '{path}' is "
                f"{new.get(path, '<unset>')!r}, the experiment ran with {old.get(path, '<unset>')!r}; "
                f"resume with the experiment's own config ({experiment_dir / es.CONFIG_FILE}) or start "
                "a new experiment"
            )


def new_experiment_dir(base: Mapping[str, Any], tune: TuneConfig) -> Path:
    parent = Path((base.get("logging") or {}).get("dir") or "./runs")
    if tune.name:
        path = parent / tune.name
        if (path / es.STATE_FILE).exists():
            raise ConfigError(
                f"tune.name: experiment folder {path} already holds an experiment; continue it with "
                f"--resume {path}, or pick another name"
            )
        return path
    env = re.sub(r"[^A-Za-z0-9_.-]+", "-", str((base.get("env") or {}).get("name", "env"))).strip("-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = parent / f"tune_{base.get('algorithm')}_{env}_{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = parent / f"tune_{base.get('algorithm')}_{env}_{stamp}_{suffix}"
    return path


def search_seed(base: Mapping[str, Any], tune: TuneConfig) -> int:
    """``tune.seed``, else the config's ``seed``, else 0."""
    if tune.seed is not None:
        return int(tune.seed)
    return int(base["seed"]) if isinstance(base.get("seed"), int) else 0


def make_source(base: dict[str, Any], tune: TuneConfig, fail: Any) -> TrialSource:
    """The searcher ``tune.searcher`` over the config's search spaces, checked, as a trial source."""
    seed = search_seed(base, tune)
    spaces = search_space.find(base, fail)
    searcher = make_searcher(tune, spaces, seed, fail)
    return TrialSource(base, searcher, tune.searcher, seed, fail.source)


def make_trials(base: dict[str, Any], tune: TuneConfig, fail: Any) -> list[Trial]:
    """Every trial of a searcher that does not wait for results (random, grid), each config validated."""
    return drain(make_source(base, tune, fail))


def drain(source: TrialSource) -> list[Trial]:
    trials = []
    while (trial := source.next_trial()) is not None:
        trials.append(trial)
    if not source.done:
        raise RLGearError(
            f"searcher '{source.name}' is marked deterministic but waited for a result after "
            f"{len(trials)} trials; a searcher that uses results must not set deterministic = True"
        )
    return trials


def check_a_drawn_config(base: dict[str, Any], source: TrialSource, fail: Any) -> None:
    """Validate the config with one value drawn from every search space (before a lazy searcher runs)."""
    rng = np.random.default_rng(source.seed)
    values = {path: domain.sample(rng) for path, domain in source.searcher.space.items()}
    config = copy.deepcopy(base)
    for path, value in values.items():
        search_space.set_path(config, path, value)
    if config.get("seed") is None:
        config["seed"] = 0
    config_mod.resolve(config, source=f"{fail.source} (a drawn config: {values})")


class _Fail:
    """The config module's error style: '<file>: <key path>: <message>' (or the --set override)."""

    def __init__(self, source: str, origins: Mapping[str, str]):
        self.source = source
        self._fail = _failer(source, origins)

    def __call__(self, path: str, message: str) -> ConfigError:
        return self._fail(path, message)


def resume_search(source: TrialSource, state: Mapping[str, Any], trials: Sequence[Trial]) -> None:
    """Continue the search of a saved experiment: no trial suggested twice, in-flight trials kept.

    An experiment saved before searchers existed has every trial already: its search is over.
    """
    saved = state.get("search")
    if saved is None:
        source.created, source.done = len(trials), True
        return
    source.set_state(saved)


def make_executor(tune: TuneConfig, hooks: Iterable[Any]) -> Any:
    if tune.executor == "ray":
        from rlgear.tune.ray_executor import RayExecutor

        return RayExecutor(tune)
    from rlgear.tune.executor import LocalExecutor

    return LocalExecutor(tune.max_concurrent, hooks)


def run(
    config: Mapping[str, Any] | str | os.PathLike,
    *,
    overrides: Sequence[str] = (),
    resume: str | os.PathLike | None = None,
    hooks: Iterable[Any] = (),
    progress: str | None = "none",
) -> TuneResult:
    """Run (or resume) the experiment a config describes; returns the trials and the best one.

    Args:
        config: a YAML path or a mapping with the same keys (a ``tune`` section
            and search spaces allowed).
        overrides: ``["tune.num_samples=4", ...]`` as with ``--set``.
        resume: an experiment folder (or a folder holding experiments: the newest)
            to continue; the config must match the experiment's.
        hooks: ``@rlgear.hookimpl`` objects given to every trainer (local executor).
        progress: "none" (default in code), "plain", "rich" or "auto".
    """
    if isinstance(config, Mapping):
        raw, source = dict(config), "config"
    else:
        raw, source = config_mod.read_yaml(config), str(config)
    raw, origins = config_mod.apply_overrides(raw, overrides)
    fail = _Fail(source, origins)
    for key in raw:
        if key not in config_mod.TOP_LEVEL_KEYS:
            raise fail(str(key), f"unknown key{did_you_mean(str(key), config_mod.TOP_LEVEL_KEYS)}")
    base, tune_raw = split_tune_section(raw)
    tune = build_tune(tune_raw, fail)
    scheduler = make_scheduler(tune, fail)
    source = make_source(base, tune, fail)
    if resume is not None:
        experiment_dir = es.find_experiment(resume)
        saved_raw = config_mod.yaml_load((experiment_dir / es.CONFIG_FILE).read_text())
        check_resume_config(saved_raw, config_mod.redact_secrets(raw), experiment_dir)
        state = es.read_state(experiment_dir)
        trials = [es.trial_from_json(t) for t in state["trials"]]
        for trial in trials:  # secrets were redacted in the state file: take them from the given config
            trial.config = config_mod.restore_secrets(trial.config, base)
            if trial.checkpoint_config is not None:
                trial.checkpoint_config = config_mod.restore_secrets(trial.checkpoint_config, base)
        for trial in trials:
            if trial.status not in (TrialStatus.TERMINATED, TrialStatus.ERROR):
                trial.status = TrialStatus.PENDING  # restarts from its last checkpoint
        source.searcher.attach(experiment_dir)
        resume_search(source, state, trials)
    else:
        if source.searcher.deterministic:
            trials = drain(source)  # every trial config validated before the folder exists
        else:
            check_a_drawn_config(base, source, fail)
            trials = []
        experiment_dir = new_experiment_dir(base, tune)
        experiment_dir.mkdir(parents=True, exist_ok=True)
        (experiment_dir / es.CONFIG_FILE).write_text(config_mod.dump_yaml(raw))
        source.searcher.attach(experiment_dir)
        state = None
    logging_raw = base.get("logging") or {}
    display = TrialTable(
        progress or logging_raw.get("progress", "auto"),
        tune.metric,
        float(logging_raw.get("progress_interval_s", 2.0)),
    )
    runner = TrialRunner(
        experiment_dir,
        tune,
        scheduler,
        make_executor(tune, hooks),
        trials,
        source,
        display,
        resumed_state=state,
        trial_source=source,
    )
    finished = sum(t.status in (TrialStatus.TERMINATED, TrialStatus.ERROR) for t in trials)
    total = source.total_trials()
    count = f"{total} trials, {total - finished} to run" if total is not None else f"{finished} trials done"
    display.message(
        f"experiment folder: {experiment_dir} ({count}, searcher {tune.searcher}, "
        f"scheduler {tune.scheduler}, executor {tune.executor})"
    )
    runner.run()
    best = runner.best_trial()
    if best is not None:
        display.message(
            f"best trial: {best.trial_id} {tune.metric}={best.last_result.get(tune.metric)} "
            f"config values {dict((p, search_space.get_path(best.config, p)) for p in best.values)}"
        )
        if best.checkpoint:
            display.message(f"best checkpoint: {best.checkpoint}")
            display.message(f"evaluate it: rlgear evaluate {best.checkpoint}")
    elif any(t.last_result for t in runner.trials):
        display.message(
            f"no best trial: no trial's last result has tune.metric '{tune.metric}', so the scheduler "
            f"could not rank the trials either (a custom metric needs its hook; results have: "
            f"{', '.join(sorted(next(t.last_result for t in runner.trials if t.last_result)))})"
        )
    return TuneResult(
        experiment_dir=experiment_dir,
        trials=runner.trials,
        metric=tune.metric,
        mode=tune.mode,
        best_trial=best,
        events=runner.events,
        exploits=runner.exploits,
        recreations=runner.recreations,
        exploit_seconds=runner.exploit_seconds,
        iterations=runner.iterations,
        loop_time_s=runner.loop_time_s,
        start_time_s=runner.start_time_s,
        train_time_s=runner.executor.train_time_s,
    )
