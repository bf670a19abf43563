"""``optuna``: Optuna's samplers (TPE by default) as an rlgear searcher (``pip install 'rlgear[optuna]'``).

How it fits rlgear:

* **The study lives in the experiment folder**, as SQLite (``optuna_study.db``).
  SQLite commits every ask and tell atomically through its own journal and the
  kernel drops its file locks when the process dies, so a SIGKILL at any moment
  leaves the study as of the last commit, with nothing to repair and no stale
  lock. (Optuna's journal-file backend, the other file storage, would leave a
  torn last line and a lock file that blocks the next open for 30 s.)
* **Resume** (``rlgear tune --resume DIR``) loads the same study. Trials the
  experiment state knows are never asked again: finished ones are in the study
  already, and ones in flight at the kill restart from their checkpoint and are
  told when they end. A trial the study asked but the experiment state never
  recorded (killed between the two writes) is marked FAIL, so TPE ignores it.
* **Optuna's pruner is off** (``NopPruner``): rlgear's scheduler (``asha``) alone
  stops trials. A trial stopped early is told as COMPLETE with its metric at the
  stop, the value ASHA ranked it by: TPE then counts it among the worse
  configurations, which is what ASHA judged it. (Telling it PRUNED would need
  every intermediate value in the study, one database write per iteration.)
* Search spaces map to Optuna distributions: ``uniform`` and ``loguniform`` to
  ``FloatDistribution`` (``log=True``), ``randint [lo, hi)`` to
  ``IntDistribution(lo, hi - 1)``, ``choice`` to ``CategoricalDistribution``.
  ``grid_search`` (a sampler draws, it does not enumerate) and choices that are
  not None, bool, int, float or str are config errors.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import optuna

from rlgear.config.schema import doc
from rlgear.errors import did_you_mean
from rlgear.searcher import Fail, Searcher
from rlgear.tune.search_space import Domain
from rlgear.tune.trial_source import metric_of

STUDY_FILE = "optuna_study.db"
OPTIONS = "tune.searcher_options"
#: Optuna samplers that cannot be built from a name and keyword arguments alone.
NOT_BY_NAME = ("BaseSampler", "BaseGASampler", "PartialFixedSampler", "GridSampler")
_CATEGORY_TYPES = (type(None), bool, int, float, str)


def sampler_names() -> list[str]:
    return [n for n in optuna.samplers.__all__ if n[0].isupper() and n not in NOT_BY_NAME]


@dataclass
class OptunaOptions:
    """``tune.searcher_options`` of the optuna searcher."""

    sampler: str = doc(
        "Optuna sampler class in optuna.samplers: TPESampler, RandomSampler, GPSampler, CmaEsSampler, "
        "QMCSampler, NSGAIISampler ...",
        "TPESampler",
    )
    sampler_kwargs: dict[str, Any] = doc(
        "Keyword arguments of the sampler, e.g. {n_startup_trials: 5, multivariate: true}; seed "
        "defaults to tune.seed.",
        factory=dict,
    )
    max_concurrent: int = doc(
        "Trials suggested before the results of earlier ones are known (1: every suggestion sees every "
        "finished trial; raise it to tune.max_concurrent with the ray executor).",
        1,
    )
    study_name: str = doc("Name of the study in the experiment folder's optuna_study.db.", "rlgear")

    def check(self, fail: Fail) -> None:
        if self.max_concurrent < 1:
            raise fail(f"{OPTIONS}.max_concurrent", f"expected 1 or more, got {self.max_concurrent}")
        names = sampler_names()
        if self.sampler not in names:
            raise fail(
                f"{OPTIONS}.sampler",
                f"unknown Optuna sampler '{self.sampler}'{did_you_mean(self.sampler, names)} "
                f"(samplers: {', '.join(names)})",
            )
        cls = getattr(optuna.samplers, self.sampler)
        params = inspect.signature(cls.__init__).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            for key in self.sampler_kwargs:
                if key not in params or key == "self":
                    known = [n for n in params if n != "self"]
                    raise fail(
                        f"{OPTIONS}.sampler_kwargs.{key}",
                        f"not a parameter of optuna.samplers.{self.sampler}{did_you_mean(str(key), known)} "
                        f"(parameters: {', '.join(known)})",
                    )
        try:
            make_sampler(self.sampler, self.sampler_kwargs, seed=0)
        except (TypeError, ValueError) as err:
            raise fail(
                f"{OPTIONS}.sampler_kwargs", f"optuna.samplers.{self.sampler} refused them: {err}"
            ) from err


def make_sampler(name: str, kwargs: Mapping[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    """``optuna.samplers.<name>(**kwargs)``, seeded with ``seed`` unless ``kwargs`` has one."""
    cls = getattr(optuna.samplers, name)
    kwargs = dict(kwargs)
    if "seed" in inspect.signature(cls.__init__).parameters:
        kwargs.setdefault("seed", seed)
    return cls(**kwargs)


def distribution(domain: Domain) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution of a search-space domain (:meth:`OptunaSearcher.check_space` ran first)."""
    if domain.kind == "uniform":
        return optuna.distributions.FloatDistribution(*domain.args)
    if domain.kind == "loguniform":
        return optuna.distributions.FloatDistribution(*domain.args, log=True)
    if domain.kind == "randint":
        low, high = domain.args
        return optuna.distributions.IntDistribution(low, high - 1)  # rlgear's upper bound is excluded
    if domain.kind == "choice":
        return optuna.distributions.CategoricalDistribution(domain.args)
    raise AssertionError(domain.kind)  # pragma: no cover - check_space refuses the rest


class OptunaSearcher(Searcher):
    """Optuna's ask-and-tell over the config's search spaces; the study in the experiment folder."""

    description: ClassVar[str] = "Optuna samplers (TPE by default); pip install 'rlgear[optuna]'"
    options_class: ClassVar[type | None] = OptunaOptions

    def __init__(
        self,
        space: Mapping[str, Domain],
        *,
        metric: str,
        mode: str = "max",
        num_samples: int = 1,
        seed: int = 0,
        sampler: str = "TPESampler",
        sampler_kwargs: Mapping[str, Any] | None = None,
        max_concurrent: int = 1,
        study_name: str = "rlgear",
    ):
        super().__init__(space, metric=metric, mode=mode, num_samples=num_samples, seed=seed)
        self.distributions = {path: distribution(domain) for path, domain in self.space.items()}
        self.sampler = make_sampler(sampler, sampler_kwargs or {}, seed)
        self.max_concurrent = max_concurrent
        self.study_name = study_name
        self.study: optuna.Study | None = None
        #: rlgear trial id -> Optuna trial number, for every trial asked (in the experiment's state).
        self.numbers: dict[str, int] = {}
        self.live: set[str] = set()
        #: Optuna trials marked FAIL on resume: asked, but never recorded by the experiment.
        self.orphans_failed: list[int] = []

    @classmethod
    def check_space(cls, space: Mapping[str, Domain], fail: Fail) -> None:
        for path, domain in space.items():
            if domain.kind == "grid_search":
                raise fail(
                    f"{path}.grid_search",
                    "tune.searcher optuna samples values, it does not enumerate a grid: write "
                    "{choice: [...]} here, or use tune.searcher: grid (or random) for a grid",
                )
            if domain.kind == "choice":
                bad = next((v for v in domain.args if not isinstance(v, _CATEGORY_TYPES)), None)
                if bad is not None:
                    raise fail(
                        f"{path}.choice",
                        f"Optuna chooses only among None, bool, int, float and str values, got "
                        f"{type(bad).__name__} {bad!r}: search a scalar that selects it, or use "
                        "tune.searcher: random",
                    )

    def attach(self, experiment_dir: Path) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # rlgear's table shows every trial
        storage = optuna.storages.RDBStorage(f"sqlite:///{Path(experiment_dir).resolve() / STUDY_FILE}")
        self.study = optuna.create_study(
            storage=storage,
            study_name=self.study_name,
            sampler=self.sampler,
            pruner=optuna.pruners.NopPruner(),  # rlgear's scheduler decides stopping
            direction="maximize" if self.mode == "max" else "minimize",
            load_if_exists=True,
        )

    def _study(self) -> optuna.Study:
        if self.study is None:
            raise RuntimeError("OptunaSearcher.attach(experiment_dir) must be called before it is used")
        return self.study

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if len(self.numbers) >= self.num_samples:
            return self.FINISHED
        if len(self.live) >= self.max_concurrent:
            return None
        trial = self._study().ask(self.distributions)
        trial.set_user_attr("rlgear_trial_id", trial_id)
        self.numbers[trial_id] = trial.number
        self.live.add(trial_id)
        return {path: trial.params[path] for path in self.distributions}

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        number = self.numbers.get(trial_id)
        if number is None:
            return
        self.live.discard(trial_id)
        value = None if error else metric_of(result, self.metric)
        study = self._study()
        if value is None:  # failed, or never reported the metric: TPE must not rank it
            study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        else:  # skip_if_finished: the kill came after this tell and before the state was saved
            study.tell(number, value, skip_if_finished=True)

    def total_trials(self) -> int | None:
        return self.num_samples

    def get_state(self) -> dict[str, Any]:
        return {"numbers": self.numbers, "live": sorted(self.live)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.numbers = {str(k): int(v) for k, v in (state.get("numbers") or {}).items()}
        self.live = set(state.get("live") or ()) & set(self.numbers)
        known = set(self.numbers.values())
        study = self._study()
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for frozen in running:
            if frozen.number not in known:
                with contextlib.suppress(RuntimeError, ValueError):  # finished meanwhile
                    study.tell(frozen.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                self.orphans_failed.append(frozen.number)
