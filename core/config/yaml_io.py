"""Reading and writing config YAML.

Every config file rlgear reads goes through :func:`read_yaml` (or :func:`yaml_load`):
safe loading with YAML 1.2 numbers (``lr: 3e-4`` is a float) and errors that give
file:line:column. Every config file it writes goes through :func:`dump_yaml`, which
redacts secrets (:mod:`rlgear.config.redaction`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rlgear.config.redaction import redact_secrets
from rlgear.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``3e-4`` and ``1e6`` as numbers (YAML 1.2), not strings.

    PyYAML follows YAML 1.1, where a float needs a dot (``3.0e-4``); users
    write ``lr: 3e-4`` and mean a number.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    """Parse YAML safely (no Python objects), with YAML 1.2 numbers."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a YAML config file into a mapping, with file:line:column on syntax errors."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config file: {err.strerror}") from None
    try:
        data = yaml_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: malformed YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def dump_yaml(data: Mapping[str, Any]) -> str:
    """YAML of a config, with its secrets redacted (every config file rlgear writes goes through here)."""
    return yaml.safe_dump(redact_secrets(dict(data)), sort_keys=False, default_flow_style=None)
