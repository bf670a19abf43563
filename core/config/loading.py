"""From a YAML file or a mapping to a validated :class:`~rlgear.config.RunConfig`.

Loading is two-phase: the mapping (with ``--set`` overrides applied) is checked
against the fixed sections, then the algorithm named in it is looked up (metadata
only, then its module) so that ``training`` is checked against that algorithm's own
config class; then the checks of :mod:`rlgear.config.checks` and the algorithm's own
``check_config`` run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from rlgear.config.checks import (
    check_env_adapter,
    check_ranges,
    check_recurrent_support,
    check_relational_support,
)
from rlgear.config.deprecated import rename_keys
from rlgear.config.exploration import build_exploration, check_exploration_support
from rlgear.config.league import LeagueConfig, check_league, check_league_support
from rlgear.config.multiagent import MultiAgentConfig, check_multiagent_config
from rlgear.config.overrides import _failer, apply_overrides
from rlgear.config.result_keys import build_stop
from rlgear.config.schema import build, is_search_space
from rlgear.config.sections import (
    TOP_LEVEL_KEYS,
    CheckpointConfig,
    EnvConfig,
    LearnersConfig,
    LoggingConfig,
    ModelConfig,
    OfflineConfig,
    RunConfig,
    WorkersConfig,
)
from rlgear.config.yaml_io import read_yaml
from rlgear.errors import ConfigError, PluginError, did_you_mean


def resolve(
    data: Mapping[str, Any],
    source: str = "config",
    overrides: Sequence[str] = (),
    training_class: type | None = None,
) -> RunConfig:
    """Validate a raw config mapping (plus overrides) into a :class:`RunConfig`.

    ``training_class`` defaults to the config class of the algorithm the config
    names, found through the plugin registry.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of config keys, got {type(data).__name__}")
    raw, origins = apply_overrides(dict(data), overrides)
    fail = _failer(source, origins)
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            raise fail(str(key), f"unknown key{did_you_mean(str(key), TOP_LEVEL_KEYS)}")
    if "tune" in raw:
        raise fail(
            "tune",
            "the 'tune' section describes an experiment: run it with 'rlgear tune CONFIG' "
            "('rlgear train' runs one config; remove the section to train once)",
        )
    if "algorithm" not in raw:
        raise fail("algorithm", "missing required key")
    algorithm = raw["algorithm"]
    if isinstance(algorithm, Mapping) and set(algorithm) <= {"name", "package"} and "name" in algorithm:
        # {name: ppo, package: rlgear-thirdparty}: which package's ppo, when several register one
        raw["algorithm"] = (
            f"{algorithm['name']}@{algorithm['package']}" if algorithm.get("package") else algorithm["name"]
        )
    if not isinstance(raw["algorithm"], str):
        raise fail(
            "algorithm",
            f"expected an algorithm name (a string, or {{name: ..., package: ...}}), got {raw['algorithm']!r}",
        )
    algorithm_class = None
    if training_class is None:
        from rlgear.discovery import registry

        try:
            algorithm_class = registry.load_algorithm(raw["algorithm"])
        except PluginError as err:  # name the file (or --set) and the key the user has to fix
            raise PluginError(str(fail("algorithm", str(err)))) from err
        training_class = algorithm_class.config_class
    if "env" not in raw and training_class.requires_env:
        raise fail("env", "missing required key")
    rename_keys(
        raw, fail, origins, declared={"training": {f.name for f in dataclasses.fields(training_class)}}
    )
    sections: dict[str, Any] = {
        "algorithm": raw["algorithm"],
        # No env section (an offline algorithm without evaluation): the empty name says so (has_env).
        "env": build(EnvConfig, raw["env"], "env", fail) if "env" in raw else EnvConfig(name=""),
        "training": build(training_class, raw.get("training"), "training", fail),
    }
    if "backend" in raw:
        if not isinstance(raw["backend"], str):
            raise fail("backend", f"expected a backend name (a string), got {raw['backend']!r}")
        sections["backend"] = raw["backend"]
    for key, cls in (
        ("model", ModelConfig),
        ("workers", WorkersConfig),
        ("learners", LearnersConfig),
        ("offline", OfflineConfig),
        ("checkpoint", CheckpointConfig),
        ("logging", LoggingConfig),
    ):
        if key in raw:
            sections[key] = build(cls, raw[key], key, fail)
    if "exploration" in raw:
        sections["exploration"] = build_exploration(raw["exploration"], fail)
    if "stop" in raw:
        sections["stop"] = build_stop(raw["stop"], fail)
    if raw.get("multiagent") is not None:
        sections["multiagent"] = build(MultiAgentConfig, raw["multiagent"], "multiagent", fail)
    if raw.get("league") is not None:
        sections["league"] = build(LeagueConfig, raw["league"], "league", fail)
    if "seed" in raw:
        seed = raw["seed"]
        if is_search_space(seed):
            raise fail(
                "seed", "search spaces are expanded by 'rlgear tune'; 'rlgear train' needs a single seed"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise fail("seed", f"expected a non-negative integer or null, got {seed!r}")
        sections["seed"] = seed
    config = RunConfig(source=source, origins=dict(origins), **sections)
    check_ranges(config, fail)
    check_league(config, fail)
    if config.multiagent is not None:
        check_multiagent_config(config, training_class, fail)
    check_env_adapter(config)
    if algorithm_class is not None:
        check_recurrent_support(config, algorithm_class)
        check_relational_support(config, algorithm_class)
        check_league_support(config, algorithm_class)
        check_exploration_support(config, algorithm_class)
        algorithm_class.check_config(config)  # what the algorithm needs of the other sections
    return config


def load(
    path: str | os.PathLike,
    overrides: Sequence[str] = (),
    training_class: type | None = None,
) -> RunConfig:
    """Read, override and validate a YAML config file."""
    return resolve(read_yaml(path), str(path), overrides, training_class)


def from_any(config: RunConfig | Mapping[str, Any] | str | os.PathLike) -> RunConfig:
    """Accept a RunConfig, a raw mapping, or a path to a YAML file (the Python API's input)."""
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, Mapping):
        return resolve(config)
    return load(config)
