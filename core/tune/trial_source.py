"""Trials from a searcher: its suggested values set in the base config, a seed, validation.

The trial runner asks a :class:`TrialSource` for a new trial whenever it could
start one; the source asks the :class:`~rlgear.searcher.Searcher`, builds the
trial's config (a copy of the experiment's config with the suggested values
set), gives it its own seed when the config has none (drawn from a stream
seeded apart from the searcher's, so ``seed: null`` trials are repeatable), and
validates it. Its state (the searcher's, and how many trials it made) is saved
with the experiment, so ``--resume`` neither repeats nor skips a trial.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.scheduler import Trial, TrialStatus
from rlgear.searcher import Searcher
from rlgear.tune.display import metric_value
from rlgear.tune.search_space import set_path


class TrialSource:
    """Turns a searcher's suggestions into validated trials ``trial_000``, ``trial_001`` ..."""

    def __init__(self, base: Mapping[str, Any], searcher: Searcher, name: str, seed: int, source: str):
        self.base = dict(base)
        self.searcher = searcher
        self.name = name
        self.seed = int(seed)
        self.source = source
        self.created = 0
        self.done = False
        self._seed_draws = 0
        self._seeds = np.random.default_rng([self.seed, 1])  # apart from the searcher's stream
        self._told: set[str] = set()

    def next_trial(self) -> Trial | None:
        """A new trial, or None: the searcher waits for a running trial (or the search is over: ``done``)."""
        if self.done:
            return None
        trial_id = f"trial_{self.created:03d}"
        values = self.searcher.suggest(trial_id)
        if values is None:
            return None
        if isinstance(values, str) and values == Searcher.FINISHED:
            self.done = True
            return None
        if not isinstance(values, Mapping):
            raise TypeError(
                f"searcher '{self.name}' suggested {values!r} for {trial_id}; expected a mapping of "
                "{dotted config path: value}, None (wait) or Searcher.FINISHED"
            )
        self.created += 1
        return self.make_trial(trial_id, dict(values))

    def make_trial(self, trial_id: str, values: dict[str, Any]) -> Trial:
        """The trial of these values: the base config with them set, a seed if it has none, validated."""
        config = copy.deepcopy(self.base)
        for path, value in values.items():
            set_path(config, path, copy.deepcopy(value))
        if config.get("seed") is None:  # each trial its own seed, recorded so it can be repeated
            config["seed"] = int(self._seeds.integers(2**31))
            self._seed_draws += 1
        config_mod.resolve(config, source=f"{self.source} ({trial_id}: {values})")
        return Trial(config=config, trial_id=trial_id, values=values)

    def on_trial_complete(self, trial: Trial) -> None:
        """Tell the searcher, once, that ``trial`` ended (TERMINATED with its last result, or ERROR)."""
        if trial.trial_id in self._told:
            return
        self._told.add(trial.trial_id)
        error = trial.status == TrialStatus.ERROR
        self.searcher.on_trial_complete(trial.trial_id, trial.last_result or None, error=error)

    def total_trials(self) -> int | None:
        return self.searcher.total_trials()

    def get_state(self) -> dict[str, Any]:
        return {
            "searcher": self.name,
            "created": self.created,
            "done": self.done,
            "seed_draws": self._seed_draws,
            "told": sorted(self._told),
            "state": self.searcher.get_state(),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue where a saved experiment stopped (the searcher was attached to its folder)."""
        self.created = int(state.get("created", 0))
        self.done = bool(state.get("done", False))
        self._told = set(state.get("told", ()))
        self._seeds = np.random.default_rng([self.seed, 1])
        self._seed_draws = int(state.get("seed_draws", 0))
        for _ in range(self._seed_draws):  # one at a time, as they were drawn (a vector draw differs)
            self._seeds.integers(2**31)
        self.searcher.set_state(dict(state.get("state") or {}))


def metric_of(result: Mapping[str, Any] | None, metric: str) -> float | None:
    """The finite number ``metric`` has in ``result``, or None (no result, no such key, NaN)."""
    if not result:
        return None
    value = metric_value(dict(result), metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
