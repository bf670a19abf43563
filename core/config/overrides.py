"""Command-line overrides (``--set training.lr=0.001``) and the errors that blame them.

Overrides are applied to the raw mapping before validation, their values parsed as
YAML; :func:`apply_overrides` also returns which ``--set`` set each key, so that a
config error about that key names the ``--set`` instead of the file (:func:`_failer`,
behind :meth:`rlgear.config.RunConfig.fail`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from rlgear.config.yaml_io import yaml_load
from rlgear.errors import ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    """``'training.lr=0.001'`` -> ``('training.lr', 0.001)``; the value is parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text}: expected KEY.PATH=VALUE, e.g. --set training.lr=0.001")
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw  # not YAML: take the text as a string
    return key, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Apply ``--set`` overrides to a raw config mapping.

    Returns the new mapping and ``{dotted path: original --set text}`` so that
    validation errors can blame the override instead of the file.
    """
    data = copy.deepcopy(data)
    origins: dict[str, str] = {}
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"--set {text}: '{where}' is not a mapping, cannot set '{key}'")
            node = child
        node[parts[-1]] = value
        origins[key] = text
    return data, origins


def _failer(source: str, origins: Mapping[str, str]):
    def fail(path: str, message: str) -> ConfigError:
        for key, text in origins.items():
            inside = path.startswith((key + ".", key + "["))
            if path == key or inside or key.startswith(path + "."):
                return ConfigError(f"--set {text}: {path}: {message}")
        return ConfigError(f"{source}: {path}: {message}")

    return fail
