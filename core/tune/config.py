"""The ``tune`` section of a config, read by ``rlgear tune`` (``rlgear train`` refuses it).

It is validated like every other section: unknown keys, wrong types and
out-of-range values are :class:`~rlgear.errors.ConfigError` naming the file (or
``--set``), the key path and what was expected. The scheduler is named by
``tune.scheduler`` (a plugin of group ``rlgear.schedulers``) and configured by
``tune.scheduler_options``, which the scheduler's own ``options_class`` checks;
the searcher likewise by ``tune.searcher`` (group ``rlgear.searchers``) and
``tune.searcher_options``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rlgear.config import check_result_key
from rlgear.config.schema import build, doc
from rlgear.discovery import registry
from rlgear.errors import ConfigError, PluginError, did_you_mean

Fail = Callable[[str, str], ConfigError]


@dataclass
class TuneConfig:
    """How ``rlgear tune`` runs an experiment."""

    num_samples: int = doc("Repetitions of the search-space grid (each draws its distributions anew).", 1)
    metric: str = doc(
        "Result key the schedulers rank trials by and the best trial is chosen by: any result key "
        "path, e.g. episode_return_mean, evaluation/episode_return_mean, custom_metrics/x_mean.",
        "episode_return_mean",
    )
    mode: Literal["max", "min"] = doc("Whether a higher or a lower metric is better.", "max")
    scheduler: str = doc(
        "Trial scheduler plugin: fifo, asha, pbt (entry-point group rlgear.schedulers).", "fifo"
    )
    scheduler_options: dict[str, Any] = doc(
        "Options of the scheduler (see docs/tune.md; e.g. asha: grace_period, max_t ...).", factory=dict
    )
    searcher: str = doc(
        "Searcher plugin that picks each trial's values: random (grids crossed, distributions drawn; the "
        "default), grid (grid_search only), optuna (TPE or any Optuna sampler; pip install 'rlgear[optuna]') "
        "(entry-point group rlgear.searchers).",
        "random",
    )
    searcher_options: dict[str, Any] = doc(
        "Options of the searcher (see docs/tune.md; e.g. optuna: sampler, sampler_kwargs, max_concurrent).",
        factory=dict,
    )
    max_concurrent: int = doc("Trials that hold a trainer at once (0: all of them). Others wait PENDING.", 0)
    max_failures: int = doc(
        "Times a trial that raised is retried from its last checkpoint before it is marked ERROR.", 0
    )
    checkpoint_freq: int | None = doc(
        "Each trial writes a checkpoint every N of its iterations, for resume and retries "
        "(null: checkpoint.every, or 5 when that is 0). checkpoint.keep and checkpoint.at_end apply.",
        None,
    )
    executor: Literal["local", "ray"] = doc(
        "'local': all trials in this process, one iteration at a time in turn; 'ray': each trial "
        "a Ray actor with its own CPUs, trials wait PENDING while the cluster is full.",
        "local",
    )
    ray_address: str | None = doc(
        "executor ray: attach to this cluster ('auto'), else start a local Ray.", None
    )
    ray_num_cpus: int | None = doc("executor ray: CPUs of the local Ray (null: all cores).", None)
    max_lost_actors: int = doc(
        "executor ray: times a trial's trainer actor may be lost (its process killed, its node gone) and "
        "restarted from the trial's checkpoint without counting as a failure (max_failures).",
        20,
    )
    resource_timeout_s: float = doc(
        "executor ray: how long to wait for the cluster to have room again when no trial can run "
        "(nodes lost) before the experiment stops with an error.",
        300.0,
    )
    name: str | None = doc(
        "Experiment folder name under logging.dir (default tune_<algorithm>_<env>_<time>).", None
    )
    seed: int | None = doc(
        "Seed of the searcher (search-space sampling, Optuna's sampler) and PBT (null: the config's seed, else 0).",
        None,
    )
    checkpoint_memory_mb: float = doc(
        "In-memory budget for PBT's exploit checkpoints; older ones spill to the experiment folder.", 512.0
    )


def build_tune(value: Any, fail: Fail) -> TuneConfig:
    """Validate the raw ``tune`` mapping."""
    tune = build(TuneConfig, value, "tune", fail)
    for path, number in (("tune.num_samples", tune.num_samples),):
        if number < 1:
            raise fail(path, f"expected 1 or more, got {number}")
    for path, number in (
        ("tune.max_concurrent", tune.max_concurrent),
        ("tune.max_failures", tune.max_failures),
    ):
        if number < 0:
            raise fail(path, f"expected 0 or more, got {number}")
    if tune.checkpoint_freq is not None and tune.checkpoint_freq < 1:
        raise fail("tune.checkpoint_freq", f"expected 1 or more (or null), got {tune.checkpoint_freq}")
    if tune.ray_num_cpus is not None and tune.ray_num_cpus < 1:
        raise fail("tune.ray_num_cpus", f"expected 1 or more (or null), got {tune.ray_num_cpus}")
    if tune.checkpoint_memory_mb < 0:
        raise fail("tune.checkpoint_memory_mb", f"expected 0 or more, got {tune.checkpoint_memory_mb}")
    if not tune.metric:
        raise fail("tune.metric", "expected a result key, got an empty string")
    check_result_key(tune.metric, "tune.metric", fail)
    return tune


def make_scheduler(tune: TuneConfig, fail: Fail) -> Any:
    """Load ``tune.scheduler`` and build it with ``tune.scheduler_options``, checked."""
    try:
        cls = registry.load_scheduler(tune.scheduler)
    except PluginError as err:
        raise PluginError(str(fail("tune.scheduler", str(err)))) from err
    kwargs = plugin_options(
        cls, tune.scheduler_options, "tune.scheduler_options", f"scheduler '{tune.scheduler}'", fail
    )
    scheduler = cls(metric=tune.metric, mode=tune.mode, **kwargs)
    return scheduler


def make_searcher(tune: TuneConfig, space: Mapping[str, Any], seed: int, fail: Fail) -> Any:
    """Load ``tune.searcher``, check the search space and ``tune.searcher_options``, and build it."""
    try:
        cls = registry.load_searcher(tune.searcher)
    except PluginError as err:
        raise PluginError(str(fail("tune.searcher", str(err)))) from err
    cls.check_space(space, fail)
    kwargs = plugin_options(
        cls, tune.searcher_options, "tune.searcher_options", f"searcher '{tune.searcher}'", fail
    )
    return cls(space, metric=tune.metric, mode=tune.mode, num_samples=tune.num_samples, seed=seed, **kwargs)


#: Constructor parameters the runner passes itself, never from ``*_options``.
_GIVEN = ("self", "metric", "mode", "space", "num_samples", "seed")


def plugin_options(cls: type, options: Mapping[str, Any], key: str, what: str, fail: Fail) -> dict[str, Any]:
    """The keyword arguments of a scheduler or searcher from its options mapping, checked.

    With an ``options_class`` (a dataclass), the mapping is validated like a config
    section and every field is passed; without, each key must be an ``__init__`` parameter.
    """
    options = dict(options)
    options_class = getattr(cls, "options_class", None)
    if options_class is not None:
        built = build(options_class, options, key, fail)
        if hasattr(built, "check"):
            built.check(fail)
        return {f.name: getattr(built, f.name) for f in dataclasses.fields(built)}
    params = [
        name
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name not in _GIVEN and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    for option in options:
        if option not in params:
            raise fail(
                f"{key}.{option}",
                f"unknown option of {what}"
                f"{did_you_mean(str(option), params)} (options: {', '.join(params) or 'none'})",
            )
    return options


def split_tune_section(raw: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """``(config without 'tune', the raw tune section)``."""
    config = {k: v for k, v in raw.items() if k != "tune"}
    return config, raw.get("tune")
