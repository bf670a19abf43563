"""The searcher contract (entry-point group ``rlgear.searchers``).

A :class:`Searcher` decides *which* configurations an ``rlgear tune`` experiment
tries; a :class:`~rlgear.scheduler.TrialScheduler` decides how long each one
trains. The trial runner asks the searcher for a new trial whenever it could
start one (``suggest``), and tells it how every trial ended
(``on_trial_complete``), so a model-based searcher (Optuna's TPE) can use the
results of finished trials for the next suggestion. Its ``get_state()`` is
saved with the experiment after every runner step, so ``--resume`` continues
the search instead of starting it again.

A suggestion is ``{dotted config path: value}`` for the search spaces of the
config (``{"training.lr": 3e-4}``); the runner sets those values in a copy of
the config, gives the trial its own seed and validates it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # pragma: no cover
    from rlgear.errors import ConfigError
    from rlgear.tune.search_space import Domain

#: ``fail(key path, message)``: a :class:`~rlgear.errors.ConfigError` naming the file (or ``--set``) and key.
Fail = Callable[[str, str], "ConfigError"]


class Searcher(ABC):
    """Base class of searchers: suggests trial configs, hears how trials ended.

    Built once per experiment (and again on ``--resume``) as
    ``SearcherClass(space, metric=..., mode=..., num_samples=..., seed=..., **options)``
    where ``options`` come from ``tune.searcher_options`` (checked against
    ``options_class`` when the class has one, as for schedulers).
    """

    #: What :meth:`suggest` returns when the search is over (no trial will ever be suggested again).
    FINISHED: ClassVar[str] = "FINISHED"

    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""
    #: A dataclass of ``tune.searcher_options`` (fields declared with ``rlgear.config.schema.doc``);
    #: every field is passed to ``__init__`` as a keyword. ``None``: options are ``__init__`` parameters.
    options_class: ClassVar[type | None] = None
    #: True when suggestions never depend on results (random, grid): rlgear then builds and
    #: validates every trial config before the first trial runs, and lists them all from the start.
    deterministic: ClassVar[bool] = False

    def __init__(
        self,
        space: Mapping[str, Domain],
        *,
        metric: str,
        mode: str = "max",
        num_samples: int = 1,
        seed: int = 0,
    ):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.space = dict(space)
        self.metric = metric
        self.mode = mode
        self.num_samples = num_samples
        self.seed = seed

    @classmethod
    def check_space(cls, space: Mapping[str, Domain], fail: Fail) -> None:
        """Refuse search spaces this searcher cannot search: ``raise fail(path, message)``.

        Called before anything is created, so a space the searcher cannot express
        (a grid for a sampler, a list among a sampler's choices) is one config error.
        """

    def attach(self, experiment_dir: Path) -> None:
        """The experiment folder, where the searcher may keep files (a study's journal).

        Called once before the first :meth:`suggest` or :meth:`set_state`.
        """

    @abstractmethod
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The search-space values of trial ``trial_id``: ``{dotted path: value}``.

        Return ``None`` for "not now" (wait until a running trial completes: the
        runner asks again after each completion) and :attr:`FINISHED` when the
        search is over. Never return ``None`` while no trial of yours is running.
        """

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Trial ``trial_id`` ended: ``result`` is its last result (``None`` if it had none).

        Called once per trial when it reaches its stop criteria, is stopped early
        by the scheduler (its last result then is the metric at that point), or
        fails for good (``error=True``). Read the metric with ``self.metric``.
        """

    def total_trials(self) -> int | None:
        """How many trials the search will suggest in all, if known (shown when the experiment starts)."""
        return None

    def get_state(self) -> dict[str, Any]:
        """JSON-able searcher state, saved with the experiment after every runner step."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (``--resume``); ``attach`` was called before."""
