"""The checks of a scheduler plugin (``rlgear plugins --check``)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from rlgear.discovery import registry
from rlgear.discovery.check._base import (
    _Broke,
    _Checks,
    _load,
)

#: Synthetic trials: result ``episode_return_mean`` at iteration t (nan at t=1: no episode finished yet).
_CURVES = {
    "rising_fast": lambda t: 10.0 * t,
    "rising_slow": lambda t: 2.0 * t,
    "flat": lambda t: 5.0,
    "falling": lambda t: 50.0 - 4.0 * t,
}
_PHASE_A, _PHASE_B = range(1, 9), range(9, 17)
_METRIC = "episode_return_mean"


class _Snapshot:
    """What ``save_trial_to_memory`` hands a scheduler (the attributes PBT reads)."""

    _ids = iter(range(10**9))

    def __init__(self, trial_id: str, training_iteration: int, time_attr_value: float):
        self.trial_id = trial_id
        self.training_iteration = training_iteration
        self.time_attr_value = time_attr_value
        self.key = next(self._ids)


class _FakeRunner:
    """A trial runner (:class:`rlgear.scheduler.TrialRunnerView`) with no trainers behind it."""

    def __init__(self, trials: list[Any]):
        self.trials = trials
        self.events: list[dict[str, Any]] = []

    def get_trials(self) -> list[Any]:
        return list(self.trials)

    def save_trial_to_memory(self, trial: Any, time_attr_value: float) -> _Snapshot:
        return _Snapshot(trial.trial_id, int(trial.last_result.get("training_iteration", 0)), time_attr_value)

    def exploit_trial(self, trial: Any, checkpoint: Any, new_config: dict[str, Any]) -> bool:
        trial.config = copy.deepcopy(new_config)
        return True

    def log_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def _result(curve: str, t: int) -> dict[str, Any]:
    value = float("nan") if t == 1 else float(_CURVES[curve](t))
    return {
        "training_iteration": t,
        "timesteps_total": 1000 * t,
        "time_total_s": float(t),
        "episodes_total": 10 * t,
        _METRIC: value,
        "episode_return_min": value,
        "episode_return_max": value,
    }


def _make_scheduler(cls: type) -> Any:
    """The scheduler as ``rlgear tune`` builds it: default options, plus the ones it declares for the check."""
    from rlgear.config.schema import build

    options = copy.deepcopy(dict(getattr(cls, "check_options", {}) or {}))
    options_class = getattr(cls, "options_class", None)
    if options_class is not None:

        def fail(path: str, message: str) -> Exception:
            return ValueError(f"{path}: {message}")

        built = build(options_class, options, "tune.scheduler_options", fail)
        if hasattr(built, "check"):
            built.check(fail)
        options = {f.name: getattr(built, f.name) for f in dataclasses.fields(built)}
    return cls(metric=_METRIC, mode="max", **options)


def _simulate(scheduler: Any, runner: _FakeRunner, iterations: range, finish: bool) -> list[tuple]:
    """Drive the trials as the trial runner does; returns every decision made, in order."""
    from rlgear.scheduler import Trial, TrialStatus

    decisions: list[tuple] = []
    valid = (scheduler.CONTINUE, scheduler.PAUSE, scheduler.STOP)

    def start_trials() -> None:
        for _ in range(len(runner.trials)):
            chosen = scheduler.choose_trial_to_run(runner)
            if chosen is None:
                return
            if not (isinstance(chosen, Trial) and any(chosen is t for t in runner.trials)):
                raise _Broke(
                    "choose_trial_to_run", f"returned {chosen!r}, not one of runner.get_trials() or None"
                )
            decisions.append(("choose", chosen.trial_id))
            if chosen.status not in (TrialStatus.PENDING, TrialStatus.PAUSED):
                return
            chosen.status = TrialStatus.RUNNING

    start_trials()
    for t in iterations:
        for trial in runner.trials:
            if trial.status != TrialStatus.RUNNING:
                continue
            result = _result(trial.config["curve"], t)
            trial.last_result = result
            if finish and t == iterations[-1]:
                scheduler.on_trial_complete(runner, trial, result)
                trial.status = TrialStatus.TERMINATED
                decisions.append((trial.trial_id, t, "complete"))
                continue
            decision = scheduler.on_trial_result(runner, trial, result)
            if decision not in valid:
                raise _Broke(
                    "decisions",
                    f"on_trial_result returned {decision!r} for {trial.trial_id} at iteration {t}; "
                    "expected CONTINUE, PAUSE or STOP",
                )
            decisions.append((trial.trial_id, t, decision))
            if decision == scheduler.PAUSE:
                trial.status = TrialStatus.PAUSED
            elif decision == scheduler.STOP:
                trial.status = TrialStatus.TERMINATED
                scheduler.on_trial_remove(runner, trial)
        start_trials()
    return decisions


def _new_trials() -> list[Any]:
    from rlgear.scheduler import Trial

    return [
        Trial({"curve": curve, "training": {"lr": 0.001 * (i + 1)}, "seed": i}, trial_id=f"check_{curve}")
        for i, curve in enumerate(_CURVES)
    ]


def _check_scheduler(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    build_fix = (
        "rlgear tune builds the scheduler as cls(metric=..., mode=..., **scheduler_options): accept "
        "metric and mode and give every option a default (an options_class dataclass is checked and "
        "passed); a scheduler that needs options declares them in check_options"
    )
    with checks.step("construct", build_fix):
        scheduler = _make_scheduler(cls)
    declared = getattr(cls, "check_options", {}) or {}
    checks.add(
        "construct",
        True,
        f"{cls.__qualname__}(metric='{_METRIC}', mode='max') with default options"
        + (f" and its check_options ({', '.join(declared)})" if declared else ""),
    )
    runner = _FakeRunner(_new_trials())
    for trial in runner.trials:
        with checks.step("on_trial_add", "on_trial_add(runner, trial) must accept any new trial"):
            scheduler.on_trial_add(runner, trial)
    decide_fix = (
        "return self.CONTINUE, self.PAUSE or self.STOP from on_trial_result; choose_trial_to_run "
        "returns one of runner.get_trials() (PENDING or PAUSED) or None"
    )
    with checks.step("decisions", decide_fix):
        first = _simulate(scheduler, runner, _PHASE_A, finish=False)
    made = [d[2] for d in first if d[0] != "choose"]
    checks.add(
        "decisions",
        True,
        f"{len(made)} results on rising, flat and falling trials: "
        + ", ".join(f"{made.count(d)} {d}" for d in dict.fromkeys(made)),
    )
    state_fix = (
        "get_state() must return JSON-able data (dicts, lists, str, numbers) that set_state() turns "
        "back into the same scheduler"
    )
    with checks.step("state is JSON", state_fix):
        saved = json.dumps(scheduler.get_state())
    checks.add("state is JSON", True, f"get_state() is {len(saved)} bytes of JSON")
    trials_b = copy.deepcopy(runner.trials)
    with checks.step("state round trip", state_fix):
        restored = _make_scheduler(cls)
        runner_b = _FakeRunner(trials_b)
        for trial in trials_b:
            restored.on_trial_add(runner_b, trial)
        restored.set_state(json.loads(saved))
    with checks.step("decisions", decide_fix):
        expected = _simulate(scheduler, runner, _PHASE_B, finish=True)
    with checks.step("state round trip", state_fix):
        got = _simulate(restored, runner_b, _PHASE_B, finish=True)
    differ = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    if differ is None and len(expected) != len(got):
        differ = min(len(expected), len(got))
    checks.add(
        "state round trip",
        differ is None,
        f"a fresh instance given set_state(get_state()) made the same {len(expected)} decisions"
        if differ is None
        else f"after set_state, decision {differ} differs: expected {_at(expected, differ)}, "
        f"got {_at(got, differ)}",
        state_fix,
    )


def _at(decisions: list[tuple], i: int) -> str:
    return repr(decisions[i]) if i < len(decisions) else "nothing"
