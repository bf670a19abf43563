"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks", arXiv:1711.09846), asynchronous as in Ray Tune.

Every ``perturbation_interval`` (in ``time_attr`` units) a trial reaches a
perturbation point and is ranked by its latest metric among the live trials:

* in the bottom ``quantile_fraction`` it **exploits**: it takes the config and
  the weights of a trial from the top quantile, then **explores**: each key of
  ``hyperparam_mutations`` is resampled (probability ``resample_probability``)
  or perturbed (numbers x 0.8 or x 1.2, lists one step up or down), then an
  optional ``custom_explore_fn`` edits the config;
* otherwise it is snapshotted, so other trials can clone it later.

What rlgear does differently from its peers (the point of this plugin):

* the exploit runs ``reset_config`` + restore on the **live** trainer; only a
  trainer whose ``reset_config`` returns False (e.g. the model changed) is
  destroyed and rebuilt, and the runner counts those;
* a donor is cloned only from the snapshot taken at **its latest
  perturbation point**, and not if that snapshot is older than
  ``max_checkpoint_age`` of the donor's progress (a stale donor is skipped);
* snapshots are held by the runner in memory with a disk fallback, so a clone
  never fails on an evicted object;
* every exploit (and every skipped one) goes to the experiment's event log
  with the old, the donor's and the new values.

Each trial keeps its own ``seed`` when it takes a donor's config, so the
population does not collapse onto one random stream.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.config.schema import doc, is_search_space
from rlgear.discovery import registry
from rlgear.errors import CheckpointError, ConfigError
from rlgear.scheduler import Trial, TrialRunnerView, TrialScheduler, TrialStatus
from rlgear.tune.display import metric_value
from rlgear.tune.search_space import Domain, get_path, parse, set_path

OPTIONS = "tune.scheduler_options"


@dataclass
class PBTOptions:
    """``tune.scheduler_options`` of the pbt scheduler."""

    time_attr: str = doc("Result key that measures training progress (monotonic).", "training_iteration")
    perturbation_interval: float = doc("Progress between two perturbation points of a trial.", 5)
    hyperparam_mutations: dict[str, Any] = doc(
        "{dotted config path: distribution ({uniform: [lo, hi]}, {loguniform: ..}, {choice: [..]}, "
        "{randint: ..}) or a list of values}",
        factory=dict,
    )
    quantile_fraction: float = doc("Bottom fraction that exploits, top fraction that donates.", 0.25)
    resample_probability: float = doc("Chance to resample a value instead of perturbing it.", 0.25)
    perturbation_factors: list[float] = doc(
        "Factors a numeric value is multiplied by.", factory=lambda: [0.8, 1.2]
    )
    custom_explore_fn: str | None = doc(
        "'module:function' (config -> config) run after the built-in explore.", None
    )
    max_checkpoint_age: float | None = doc(
        "Skip a donor whose snapshot is older than this (in time_attr units) against its progress "
        "(null: one perturbation_interval).",
        None,
    )
    seed: int | None = doc("Seed of the explore and donor choices (null: random).", None)

    def check(self, fail: Any) -> None:
        if self.perturbation_interval <= 0:
            raise fail(
                f"{OPTIONS}.perturbation_interval",
                f"expected a positive number, got {self.perturbation_interval}",
            )
        if not 0 < self.quantile_fraction <= 0.5:
            raise fail(
                f"{OPTIONS}.quantile_fraction", f"expected a number in (0, 0.5], got {self.quantile_fraction}"
            )
        if not 0 <= self.resample_probability <= 1:
            raise fail(
                f"{OPTIONS}.resample_probability",
                f"expected a number in [0, 1], got {self.resample_probability}",
            )
        if not self.perturbation_factors or any(f <= 0 for f in self.perturbation_factors):
            raise fail(
                f"{OPTIONS}.perturbation_factors",
                f"expected positive numbers, got {self.perturbation_factors}",
            )
        if not self.hyperparam_mutations and not self.custom_explore_fn:
            raise fail(
                f"{OPTIONS}.hyperparam_mutations",
                "pbt needs hyperparam_mutations (or a custom_explore_fn) to explore anything",
            )
        parse_mutations(self.hyperparam_mutations, fail)
        if self.custom_explore_fn:
            try:
                fn = registry.resolve_object(self.custom_explore_fn, f"{OPTIONS}.custom_explore_fn")
            except Exception as err:
                raise fail(f"{OPTIONS}.custom_explore_fn", str(err)) from err
            if not callable(fn):
                raise fail(f"{OPTIONS}.custom_explore_fn", f"'{self.custom_explore_fn}' is not callable")
        if self.max_checkpoint_age is not None and self.max_checkpoint_age < 0:
            raise fail(f"{OPTIONS}.max_checkpoint_age", f"expected 0 or more, got {self.max_checkpoint_age}")


def parse_mutations(
    mutations: Mapping[str, Any], fail: Any, prefix: str = ""
) -> dict[str, Domain | list[Any]]:
    """``{dotted path: Domain or list}``; nested mappings are flattened into dotted paths."""
    out: dict[str, Domain | list[Any]] = {}
    for key, spec in mutations.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        where = f"{OPTIONS}.hyperparam_mutations.{path}"
        if isinstance(spec, list):
            if not spec:
                raise fail(where, "expected a non-empty list of values")
            out[path] = list(spec)
        elif is_search_space(spec):
            domain = parse(spec, where, fail)
            if domain.kind == "grid_search":
                raise fail(where, "grid_search can't be sampled; use a list or choice")
            out[path] = domain
        elif isinstance(spec, Mapping):
            out.update(parse_mutations(spec, fail, path))
        else:
            raise fail(
                where,
                f"expected a list of values or a distribution ({{uniform: [lo, hi]}} ...), got {spec!r}",
            )
    return out


@dataclass
class _TrialState:
    last_perturbation_time: float = 0.0
    last_score: float | None = None
    checkpoint: Any = None  # the runner's handle on the snapshot at the latest perturbation point
    progress: float = 0.0


@dataclass
class PopulationBasedTraining(TrialScheduler):
    """See the module docstring."""

    description = "population-based training: exploit (reset_config + restore, live) and explore"
    options_class = PBTOptions
    # pbt needs something to explore: `rlgear plugins --check pbt` mutates the learning rate.
    check_options = {"hyperparam_mutations": {"training.lr": {"loguniform": [1e-4, 1e-2]}}, "seed": 0}

    metric: str | None = None
    mode: str = "max"
    time_attr: str = "training_iteration"
    perturbation_interval: float = 5
    hyperparam_mutations: dict[str, Any] = field(default_factory=dict)
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    perturbation_factors: list[float] = field(default_factory=lambda: [0.8, 1.2])
    custom_explore_fn: str | None = None
    max_checkpoint_age: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        TrialScheduler.__init__(self, self.metric, self.mode)
        options = PBTOptions(
            self.time_attr, self.perturbation_interval, self.hyperparam_mutations, self.quantile_fraction,
            self.resample_probability, list(self.perturbation_factors), self.custom_explore_fn,
            self.max_checkpoint_age, self.seed,
        )  # fmt: skip
        options.check(_config_error)
        self.mutations = parse_mutations(self.hyperparam_mutations, _config_error)
        self.explore_fn = (
            registry.resolve_object(self.custom_explore_fn, f"{OPTIONS}.custom_explore_fn")
            if self.custom_explore_fn
            else None
        )
        self.rng = np.random.default_rng(self.seed)
        self.states: dict[str, _TrialState] = {}
        self.num_exploits = 0
        self.num_skipped = 0

    # --- the scheduler contract ------------------------------------------------
    def on_trial_add(self, runner: TrialRunnerView, trial: Trial) -> None:
        self.states.setdefault(trial.trial_id, _TrialState())

    def on_trial_result(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> str:
        progress = result.get(self.time_attr)
        if progress is None:
            raise ConfigError(f"{OPTIONS}.time_attr: results have no key '{self.time_attr}'")
        state = self.states.setdefault(trial.trial_id, _TrialState())
        state.progress = float(progress)
        if progress - state.last_perturbation_time < self.perturbation_interval:
            return self.CONTINUE
        score = self._score(result)
        if score is None:
            return self.CONTINUE  # nothing to rank by yet (no finished episode)
        state.last_score = score
        state.last_perturbation_time = float(progress)
        lower, upper = self._quantiles(runner)
        if trial.trial_id in lower:
            self._exploit(runner, trial, state, upper)
        else:  # a possible donor: snapshot it at this perturbation point
            state.checkpoint = runner.save_trial_to_memory(trial, float(progress))
        return self.CONTINUE

    def on_trial_complete(self, runner: TrialRunnerView, trial: Trial, result: dict[str, Any]) -> None:
        self._drop(trial)

    def on_trial_remove(self, runner: TrialRunnerView, trial: Trial) -> None:
        self._drop(trial)

    def on_trial_error(self, runner: TrialRunnerView, trial: Trial) -> None:
        self._drop(trial)

    def _drop(self, trial: Trial) -> None:
        state = self.states.get(trial.trial_id)
        if state is not None:
            state.last_score = None  # finished trials neither rank nor donate

    def held_checkpoints(self) -> list[Any]:
        return [s.checkpoint for s in self.states.values() if s.checkpoint is not None]

    # --- ranking, exploit, explore --------------------------------------------
    def _score(self, result: dict[str, Any]) -> float | None:
        value = metric_value(result, self.metric) if self.metric else None
        if not isinstance(value, int | float) or math.isnan(value):
            return None
        return float(value) if self.mode == "max" else -float(value)

    def _quantiles(self, runner: TrialRunnerView) -> tuple[list[str], list[str]]:
        live = {
            t.trial_id
            for t in runner.get_trials()
            if t.status not in (TrialStatus.TERMINATED, TrialStatus.ERROR)
        }
        ranked = sorted(
            (tid for tid, s in self.states.items() if tid in live and s.last_score is not None),
            key=lambda tid: self.states[tid].last_score,
        )
        if len(ranked) <= 1:
            return [], []
        size = math.ceil(len(ranked) * self.quantile_fraction)
        size = min(size, len(ranked) // 2)
        return ranked[:size], ranked[-size:]

    def _fresh_donors(self, upper: list[str]) -> tuple[list[str], list[str]]:
        max_age = self.perturbation_interval if self.max_checkpoint_age is None else self.max_checkpoint_age
        fresh, stale = [], []
        for tid in upper:
            state = self.states[tid]
            snapshot = state.checkpoint
            ok = (
                snapshot is not None
                and snapshot.time_attr_value == state.last_perturbation_time
                and state.progress - snapshot.time_attr_value <= max_age
            )
            (fresh if ok else stale).append(tid)
        return fresh, stale

    def _exploit(self, runner: TrialRunnerView, trial: Trial, state: _TrialState, upper: list[str]) -> None:
        trials = {t.trial_id: t for t in runner.get_trials()}
        fresh, stale = self._fresh_donors(upper)
        if not fresh:
            self.num_skipped += 1
            runner.log_event(
                {"event": "exploit_skipped", "trial_id": trial.trial_id, "stale_donors": stale,
                 "reason": "no donor has a snapshot from its latest perturbation point within max_checkpoint_age"}
            )  # fmt: skip
            return
        donor_id = fresh[int(self.rng.integers(len(fresh)))]
        donor, snapshot = trials[donor_id], self.states[donor_id].checkpoint
        new_config = self.explore(donor.config)
        new_config["seed"] = trial.config.get("seed")
        paths = list(self.mutations)
        old_values = {p: get_path(trial.config, p) for p in paths}
        start = time.perf_counter()
        try:
            in_place = runner.exploit_trial(trial, snapshot, new_config)
        except CheckpointError as err:  # the snapshot can't be read: skip this donor, change nothing
            self.num_skipped += 1
            runner.log_event({"event": "exploit_skipped", "trial_id": trial.trial_id, "reason": str(err)})
            return
        seconds = time.perf_counter() - start
        state.last_perturbation_time = snapshot.time_attr_value  # its progress is now the donor's
        state.progress = snapshot.time_attr_value
        state.checkpoint = None  # its own snapshot no longer describes it
        self.num_exploits += 1
        runner.log_event(
            {
                "event": "exploit",
                "trial_id": trial.trial_id,
                "donor": donor_id,
                "donor_iteration": snapshot.training_iteration,
                "donor_time_attr": snapshot.time_attr_value,
                "donor_score": self.states[donor_id].last_score,
                "own_score": state.last_score,
                "old_config": old_values,
                "donor_config": {p: get_path(donor.config, p) for p in paths},
                "new_config": {p: get_path(new_config, p) for p in paths},
                "reset_in_place": in_place,
                "seconds": seconds,
            }
        )

    def explore(self, config: dict[str, Any]) -> dict[str, Any]:
        """A perturbed copy of ``config`` (Ray Tune's rules), then the custom explore function."""
        new = copy.deepcopy(config)
        for path, spec in self.mutations.items():
            current = get_path(config, path)
            resample = self.rng.random() < self.resample_probability
            if isinstance(spec, list):
                if resample or current not in spec:
                    value = copy.deepcopy(spec[int(self.rng.integers(len(spec)))])
                else:
                    index = spec.index(current) + int(self.rng.choice([-1, 1]))
                    value = copy.deepcopy(spec[min(max(index, 0), len(spec) - 1)])
            elif resample or not isinstance(current, int | float) or isinstance(current, bool):
                value = spec.sample(self.rng)
            else:
                factor = float(
                    self.perturbation_factors[int(self.rng.integers(len(self.perturbation_factors)))]
                )
                value = spec.clip(current * factor)
                if isinstance(current, int) and spec.kind != "uniform":
                    value = int(value)
            set_path(new, path, value)
        if self.explore_fn is not None:
            explored = self.explore_fn(new)
            if not isinstance(explored, Mapping):
                raise ConfigError(
                    f"{OPTIONS}.custom_explore_fn: '{self.custom_explore_fn}' must return the config "
                    f"mapping, returned {type(explored).__name__}"
                )
            new = dict(explored)
        return new

    # --- state ---------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {
            "trials": {
                tid: {
                    "last_perturbation_time": s.last_perturbation_time,
                    "last_score": s.last_score,
                    "progress": s.progress,
                }
                for tid, s in self.states.items()
            },
            "rng": self.rng.bit_generator.state,
            "num_exploits": self.num_exploits,
            "num_skipped": self.num_skipped,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        for tid, saved in state.get("trials", {}).items():
            # Snapshots lived in the killed process's memory: a donor needs a new perturbation point.
            self.states[tid] = _TrialState(
                float(saved["last_perturbation_time"]),
                saved.get("last_score"),
                None,
                float(saved.get("progress", 0)),
            )
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        self.num_exploits = int(state.get("num_exploits", 0))
        self.num_skipped = int(state.get("num_skipped", 0))


def _config_error(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")
