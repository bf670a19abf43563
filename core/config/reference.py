"""The config reference, written from the help texts of the config dataclasses.

Every config key is a dataclass field declared with :func:`rlgear.config.schema.doc`,
so its type, default and help text live next to the code that reads it.
:func:`reference_markdown` turns them into Markdown tables: the documentation
site renders one page for the sections every run has and one per algorithm
(its ``training`` section), so the reference cannot drift from the code.

A plugin's config class documents itself the same way: ``reference_markdown("my_algo")``
works for any installed algorithm.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, get_type_hints

from rlgear.config.exploration import ExplorationConfig
from rlgear.config.league import LeagueConfig
from rlgear.config.multiagent import MultiAgentConfig
from rlgear.config.schema import field_help
from rlgear.config.sections import (
    CheckpointConfig,
    EnvConfig,
    LearnersConfig,
    LoggingConfig,
    ModelConfig,
    OfflineConfig,
    WorkersConfig,
)
from rlgear.config.training import TrainingConfig

#: The top-level keys of a run config (``RunConfig`` itself carries no help texts).
TOP_LEVEL = (
    ("algorithm", "a string", "(required)",
     "Algorithm plugin (entry-point group rlgear.algorithms): ppo, pg, a2c, dqn, impala, a3c or an installed "
     "third-party name; {name: ..., package: ...} picks one package's plugin when several register the name."),
    ("backend", "a string", "torch", "Framework backend plugin (entry-point group rlgear.backends): torch or tf."),
    ("env", "a mapping", "(required)",
     "Which environment, through which adapter: the env section below. Offline algorithms (bc, marwil) "
     "may leave it out: it then only serves evaluation episodes."),
    ("model", "a mapping", "{}", "The network: the model section below."),
    ("training", "a mapping", "{}",
     "The algorithm's hyperparameters: the common keys below plus the algorithm's own (its page)."),
    ("workers", "a mapping", "{}", "Sampling: workers, envs, fragments (the workers section below)."),
    ("learners", "a mapping", "{}", "Learning: the device and the number of learner processes (below)."),
    ("offline", "a mapping", "{}", "Datasets: record the run to a Minari dataset, or read datasets (below)."),
    ("exploration", "a mapping", "{}",
     "An exploration plugin (entry-point group rlgear.exploration), e.g. {name: rnd}: intrinsic rewards "
     "for hard-exploration envs (the exploration section below)."),
    ("stop", "a mapping", "{}",
     "Result key -> threshold; the run ends when any is reached (>=). Keys: training_iteration, "
     "timesteps_total, episode_return_mean, ... or a learner/*, evaluation/* or custom_metrics/* path."),
    ("checkpoint", "a mapping", "{}", "When checkpoints are written and how many are kept."),
    ("logging", "a mapping", "{}", "Where run folders go and what is shown while training."),
    ("seed", "an integer or null", "null",
     "Seed of envs, policies and the framework; null picks one and records it in the run's config.yaml."),
    ("multiagent", "a mapping", "(none)",
     "Policies of a multi-agent env and which agent acts with which (the multiagent section below); "
     "without it every agent shares one policy, 'default'."),
    ("league", "a mapping", "(none)",
     "League self-play for a two-player env: learning players of three kinds, frozen snapshots, "
     "matchmaking and ratings (the league section below); it names the run's policies."),
    ("tune", "a mapping", "(none)", "Only for rlgear tune: how the trials of an experiment run (below)."),
)  # fmt: skip

#: ``(key, dataclass, one-line description)`` of every section with fixed keys, in config-file order.
SECTIONS: tuple[tuple[str, type, str], ...] = (
    ("env", EnvConfig, "Which environment to run and how to vectorize it."),
    ("model", ModelConfig, "The network: the built-in MLP catalog, or your own model class."),
    ("workers", WorkersConfig, "Sampling: rollout workers, envs per worker, and how experience is cut."),
    ("learners", LearnersConfig, "Learning: the device, and N data-parallel learner actors on Ray."),
    ("offline", OfflineConfig, "Datasets: record every transition to a Minari dataset, or read datasets."),
    ("training", TrainingConfig, "Hyperparameters every algorithm has; each algorithm adds its own."),
    (
        "exploration",
        ExplorationConfig,
        "An exploration plugin and its options (docs/plugins/exploration.md): the keys every plugin has; "
        "each plugin's own follow below the tables.",
    ),
    ("checkpoint", CheckpointConfig, "When checkpoints are written and how many are kept."),
    ("logging", LoggingConfig, "Run folders, TensorBoard and the progress display."),
    (
        "multiagent",
        MultiAgentConfig,
        "Multi-agent envs: the policies, the agent -> policy mapping, which learn.",
    ),
    (
        "league",
        LeagueConfig,
        "League self-play for two-player games (docs/multi-agent.md#league-self-play): players, "
        "snapshots, prioritized fictitious self-play, Elo ratings.",
    ),
)


def _default(value: Any) -> str:
    """A default as it would be written in YAML (``null``, ``true``, ``[64, 64]``, ``3e-4``)."""
    if value == "(required)":
        return "required"
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)


def _escape(text: str) -> str:
    """Help text safe inside a Markdown table cell (no pipes, no HTML tags, no stray emphasis)."""
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("*", "\\*")
        .replace("\n", " ")
    )


def _rows(cls: type, prefix: str, changed: set[str] | None = None) -> list[str]:
    """Table rows for every field of ``cls`` (nested config dataclasses expanded as ``prefix.name.*``)."""
    hints = get_type_hints(cls)
    rows = []
    for name, (type_text, default, help_text) in field_help(cls).items():
        key = f"{prefix}.{name}" if prefix else name
        if dataclasses.is_dataclass(hints[name]):
            rows.append(f"| `{key}` | a mapping | | {_escape(help_text)} Its keys follow. |")
            rows.extend(_rows(hints[name], key))
            continue
        mark = " ★" if changed is not None and name in changed else ""
        rows.append(
            f"| `{key}`{mark} | {_escape(type_text)} | `{_default(default)}` | {_escape(help_text)} |"
        )
    return rows


def _table(cls: type, prefix: str, changed: set[str] | None = None) -> str:
    header = "| key | type | default | meaning |\n| --- | --- | --- | --- |"
    return "\n".join([header, *_rows(cls, prefix, changed)])


def _scheduler_sections(kind: str = "scheduler") -> list[str]:
    """``tune.<kind>_options`` of every installed scheduler (or searcher) that declares an ``options_class``."""
    from rlgear.discovery import registry
    from rlgear.errors import PluginError

    out = []
    for info in registry.available(kind):
        try:
            cls = registry.load_typed(kind, info.name)
        except PluginError:
            continue  # a broken plugin (or one whose extra is not installed) is reported by `rlgear plugins`
        options = getattr(cls, "options_class", None)
        if options is None:
            out.append(f"**`{info.name}`** ({info.package}): no options.\n")
            continue
        out.append(f"**`{info.name}`** ({info.package}):\n\n{_table(options, f'tune.{kind}_options')}\n")
    return out


def _exploration_sections() -> list[str]:
    """The options of every installed exploration plugin (its ``config_class``), with the algorithms it declares."""
    from rlgear.discovery import registry
    from rlgear.errors import PluginError

    out = []
    for info in registry.available("exploration"):
        try:
            cls = registry.load_exploration(info.name)
        except PluginError:
            continue  # reported by `rlgear plugins`
        algorithms = ", ".join(f"{name} ({mode} mode)" for name, mode in sorted(cls.algorithms.items()))
        own = [f.name for f in dataclasses.fields(cls.config_class) if f.name not in _BASE_EXPLORATION]
        rows = [
            row for row in _rows(cls.config_class, "exploration") if row.split("`")[1].split(".")[1] in own
        ]
        header = "| key | type | default | meaning |\n| --- | --- | --- | --- |"
        out.append(
            f"**`{info.name}`** ({info.package}; algorithms: {algorithms}):\n\n"
            + "\n".join([header, *rows])
            + "\n"
        )
    return out


_BASE_EXPLORATION = {f.name for f in dataclasses.fields(ExplorationConfig)}


def common_markdown() -> str:
    """Every section a run config has, with ``training`` holding the keys common to every algorithm."""
    from rlgear.tune.config import TuneConfig

    parts = [
        "# Config reference",
        "",
        "A run is one YAML file; every key below is checked when the file is read (unknown keys, wrong "
        "types and out-of-range values are errors naming the file or the `--set`, and the key). "
        "This page is generated from the help texts of the config classes (`rlgear.config`), "
        "by `rlgear.config.reference.reference_markdown()`. Each algorithm's own `training` keys "
        "are on its page.",
        "",
        "## Top-level keys",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
        *(f"| `{key}` | {tp} | `{default}` | {_escape(text)} |" for key, tp, default, text in TOP_LEVEL),
        "",
    ]
    for key, cls, intro in SECTIONS:
        parts += [f"## `{key}`", "", intro, "", _table(cls, key), ""]
        if key == "exploration":
            parts += ["### Each plugin's own keys", "", *_exploration_sections(), ""]
    parts += [
        "## `tune`",
        "",
        "Read by `rlgear tune` only (`rlgear train` refuses a config that has it).",
        "",
        _table(TuneConfig, "tune"),
        "",
        "### `tune.scheduler_options`",
        "",
        "Checked by the scheduler's own `options_class` (a dataclass like the sections above) and "
        "passed to its constructor as keyword arguments.",
        "",
        *_scheduler_sections(),
        "",
        "### `tune.searcher_options`",
        "",
        "Checked by the searcher's own `options_class` and passed to its constructor as keyword "
        "arguments (a searcher whose extra is not installed is not listed).",
        "",
        *_scheduler_sections("searcher"),
    ]
    return "\n".join(parts).rstrip() + "\n"


def _backends_text(backends: list[str]) -> str:
    if "*" in backends:  # a framework-free policy
        others = [b for b in backends if b != "*"]
        return "any (framework-free numpy policy" + (
            f"; own policies for {', '.join(others)})" if others else ")"
        )
    return ", ".join(backends) or "none"


def algorithm_markdown(algorithm: str) -> str:
    """The ``training`` section of ``algorithm``: every key its config class has, inherited ones too."""
    from rlgear.discovery import registry

    trainer = registry.load_algorithm(algorithm)
    cls = trainer.config_class
    common = field_help(TrainingConfig)
    own = field_help(cls)
    changed = {
        name
        for name, (_, default, help_text) in own.items()
        if name not in common or common[name][1] != default or common[name][2] != help_text
    }
    package = next((p.package for p in registry.available("algorithm") if p.name == algorithm), "?")
    caps = trainer.capabilities()
    spaces = ", ".join(k for k in ("discrete", "continuous") if caps[k]) or "none"
    lines = [
        f"# `training` for `{algorithm}`",
        "",
        f"`algorithm: {algorithm}` ({trainer.__module__}.{trainer.__qualname__}, package {package}). "
        f"Actions: {spaces}; backends: {_backends_text(caps['backends'])}.",
        "",
    ]
    if trainer.description:
        lines += [f"{_escape(trainer.description)}.", ""]
    lines += [
        f"Every key of its config class, `{cls.__module__}.{cls.__qualname__}`; ★ marks the keys "
        "this algorithm adds or whose default or meaning differs from the common `training` keys. "
        "The other sections (`env`, `model`, `workers`, ...) are the same for every algorithm.",
        "",
        _table(cls, "training", changed),
    ]
    return "\n".join(lines) + "\n"


def reference_markdown(algorithm: str | None = None) -> str:
    """The config reference as Markdown.

    Args:
        algorithm: None for every section of a run config (top-level keys,
            ``env``, ``model``, ``workers``, the common ``training`` keys,
            ``checkpoint``, ``logging``, ``tune`` and each installed scheduler's
            ``tune.scheduler_options``); an installed algorithm's name for its
            ``training`` section (every key, inherited ones included).
    Returns:
        Markdown: a title, then one table per section with each key's type,
        default and help text.
    """
    return common_markdown() if algorithm is None else algorithm_markdown(algorithm)
