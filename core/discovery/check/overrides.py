"""The ``check_overrides`` that would let an algorithm's short run past a ConfigError.

Why: an algorithm may refuse the short run's settings in ``check_config`` or ``setup()`` (a
cross-entropy method that scores whole episodes needs ``workers.batch_mode:
complete_episodes``, one env per worker, one step per sample). Its author fixes that with the
``Trainer.check_overrides`` class attribute, which a traceback never mentions. A ConfigError
names the key it is about (``config.fail(path, ...)`` puts the key path first), so the checker
can write the attribute out: the key path from the message, the value from the message where it
names one that the key's type accepts (a choice, true/false, a number) or else another choice of
a closed type, each guess tried by building the trainer again. The advice is a dict the trainer
accepted, or shows ``<value>`` where the author has to fill in what their algorithm needs.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

from rlgear.errors import ConfigError


class _Placeholder:
    """A value the checker could not derive, for the author to fill in."""

    def __repr__(self) -> str:
        return "<value>"


#: Stands for a value the checker could not derive; shown as ``<value>``.
PLACEHOLDER = _Placeholder()

_UNKNOWN = object()

#: Keys of one error the checker follows (a setup() that refuses them one at a time).
MAX_KEYS = 6
#: Values tried for one key (each one builds a trainer).
MAX_TRIES_PER_KEY = 4

_KEY_PATH = re.compile(r"(?<![\w./-])([a-z_]+(?:\.[A-Za-z_]\w*)+)")
_TOKEN = re.compile(r"'([^']*)'|\"([^\"]*)\"|([\w.+-]+)")


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """A config key named in an error: its dotted path, annotation, and whether its values are few."""

    path: str
    annotation: Any
    closed: bool  # bool, Literal, numbers (and unions of them): values a message can spell out


def config_sections(training_class: type) -> dict[str, type]:
    """The config sections a short run's config has, by top-level key."""
    from rlgear.config import CheckpointConfig, EnvConfig, LoggingConfig, ModelConfig, WorkersConfig

    return {
        "env": EnvConfig,
        "model": ModelConfig,
        "workers": WorkersConfig,
        "training": training_class,
        "checkpoint": CheckpointConfig,
        "logging": LoggingConfig,
    }


def config_key(path: str, sections: Mapping[str, type]) -> ConfigKey | None:
    """The key ``path`` names in ``sections`` (None when it names none); keys under a mapping
    (``env.kwargs.size``) are keys of any value."""
    head, *names = path.split(".")
    annotation: Any = sections.get(head)
    if annotation is None or not names:
        return None
    for name in names:
        if get_origin(annotation) is dict or annotation is dict:
            return ConfigKey(path, Any, closed=False)
        if not dataclasses.is_dataclass(annotation):
            return None
        if name not in {f.name for f in dataclasses.fields(annotation)}:
            return None
        annotation = get_type_hints(annotation)[name]
    return ConfigKey(path, annotation, _closed(annotation))


def _closed(annotation: Any) -> bool:
    if annotation in (bool, int, float, type(None)) or get_origin(annotation) is Literal:
        return True
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_closed(a) for a in get_args(annotation))
    return False


def current_value(raw: Mapping[str, Any], path: str, sections: Mapping[str, type]) -> Any:
    """The value ``path`` has in the raw config ``raw``, or its section's default (the short run
    keeps that value, so it is never a fix)."""
    node: Any = raw
    for name in path.split("."):
        if not (isinstance(node, Mapping) and name in node):
            return _default_value(path, sections)
        node = node[name]
    return node


def _default_value(path: str, sections: Mapping[str, type]) -> Any:
    head, *names = path.split(".")
    cls: Any = sections.get(head)
    value: Any = _UNKNOWN
    for name in names:
        field = (
            {f.name: f for f in dataclasses.fields(cls)}.get(name) if dataclasses.is_dataclass(cls) else None
        )
        if field is None:
            return _UNKNOWN
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        cls = get_type_hints(cls)[name]
    return value


def mentioned_keys(message: str, sections: Mapping[str, type]) -> list[tuple[ConfigKey, str]]:
    """The config keys ``message`` names, in order of first mention, each with the text that follows
    its mentions (up to the next key named) to read values from."""
    spans = []
    for match in _KEY_PATH.finditer(message):
        key = config_key(match.group(1).rstrip("."), sections)
        if key is not None:
            spans.append((key, match.start(), match.end()))
    texts: dict[str, str] = {}
    keys: dict[str, ConfigKey] = {}
    for i, (key, _, end) in enumerate(spans):
        stop = spans[i + 1][1] if i + 1 < len(spans) else len(message)
        keys.setdefault(key.path, key)
        texts[key.path] = texts.get(key.path, "") + " " + message[end:stop]
    return [(key, texts[path]) for path, key in keys.items()]


def candidate_values(key: ConfigKey, text: str, current: Any) -> list[Any]:
    """Values for ``key`` worth trying: those ``text`` spells out that the key takes, then the
    other choices of a bool or Literal key; never ``current``. None for an open type."""
    from rlgear.config.schema import coerce

    if not key.closed:
        return []

    def fail(path: str, message: str) -> ConfigError:
        return ConfigError(message)

    values: list[Any] = []
    spelled = [next(g for g in m.groups() if g is not None) for m in _TOKEN.finditer(text)]
    for raw in [*(_scalar(t) for t in spelled), *_choices(key.annotation)]:
        try:
            value = coerce(key.annotation, raw, key.path, fail)
        except ConfigError:
            continue
        if value != current and not any(_same(value, v) for v in values):
            values.append(value)
    return values[:MAX_TRIES_PER_KEY]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _scalar(token: str) -> Any:
    """A token of an error message as a YAML scalar would read ('1' -> 1, 'true' -> True)."""
    from rlgear.config import yaml_load

    token = token.rstrip(".,;:)")
    try:
        value = yaml_load(token)
    except Exception:
        return token
    return value if isinstance(value, bool | int | float | str) or value is None else token


def _choices(annotation: Any) -> list[Any]:
    if annotation is bool:
        return [True, False]
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return [c for a in get_args(annotation) for c in _choices(a)]
    return []


def _first_key(error: BaseException, sections: Mapping[str, type]) -> str | None:
    keys = mentioned_keys(str(error), sections)
    return keys[0][0].path if keys else None


def derive(
    error: ConfigError,
    sections: Mapping[str, type],
    current: Callable[[str], Any],
    try_build: Callable[[dict[str, Any]], BaseException | None],
) -> tuple[dict[str, Any], BaseException | None]:
    """``{key path: value}`` that gets the trainer past ``error`` (and the ones it raises next), and
    the error that remains (None: the trainer built). A value is kept when the build no longer
    refuses the same key; a key no value helps gets :data:`PLACEHOLDER`."""
    found: dict[str, Any] = {}
    remaining: BaseException | None = error
    for _ in range(MAX_KEYS):
        if not isinstance(remaining, ConfigError):
            break
        keys = mentioned_keys(str(remaining), sections)
        if not keys:
            break
        fixed = _fix_one(keys, found, sections, current, try_build)
        if fixed is None:
            found.setdefault(keys[0][0].path, PLACEHOLDER)
            break
        path, value, remaining = fixed
        found[path] = value
    return found, remaining


def _fix_one(
    keys: list[tuple[ConfigKey, str]],
    found: dict[str, Any],
    sections: Mapping[str, type],
    current: Callable[[str], Any],
    try_build: Callable[[dict[str, Any]], BaseException | None],
) -> tuple[str, Any, BaseException | None] | None:
    """The first (key, value) among ``keys`` after which the build stops refusing the key the error
    is about (the first one it names), with what the build raises then; None if none helps."""
    about = keys[0][0].path
    for key, text in keys:
        if key.path in found:
            continue
        for value in candidate_values(key, text, current(key.path)):
            outcome = try_build({**found, key.path: value})
            if not (isinstance(outcome, ConfigError) and _first_key(outcome, sections) == about):
                return key.path, value, outcome
    return None


def nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"workers.batch_mode": v}`` -> ``{"workers": {"batch_mode": v}}``."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = out
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, mapping by mapping."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def python_literal(value: Any) -> str:
    """``value`` as Python source, strings in double quotes, :data:`PLACEHOLDER` as ``<value>``."""
    if value is PLACEHOLDER:
        return "<value>"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def advice(
    error: ConfigError,
    declared: Mapping[str, Any],
    sections: Mapping[str, type],
    current: Callable[[str], Any],
    try_build: Callable[[dict[str, Any]], BaseException | None],
) -> str:
    """The fix of a short run the algorithm refused with ``error``: the ``check_overrides`` class
    attribute to declare (``declared``, what the class has now, merged with what was derived)."""
    found, remaining = derive(error, sections, current, try_build)
    if not found:
        return (
            "if the algorithm needs other settings than the short run's, declare them in its Trainer "
            "class attribute check_overrides (merged into the short run's config), e.g. "
            'check_overrides = {"workers": {"batch_mode": "complete_episodes"}}; the error names no '
            "config key, so run the same config with 'rlgear train' and --debug to see where it comes from"
        )
    attribute = "check_overrides = " + python_literal(merge(declared, nested(found)))
    blanks = [path for path, value in found.items() if value is PLACEHOLDER]
    if blanks:
        why = f"fill in <value>: what {blanks[0]} must be; the error does not say"
    elif remaining is None:
        why = "the short run's trainer builds with it"
    else:
        why = (
            f"with it the config is accepted, then the trainer raises {type(remaining).__name__}: run "
            "the same config with 'rlgear train' and --debug to see the traceback"
        )
    # on a line of its own, so that it reads (and copies) as the code it is
    return f"declare the settings the algorithm needs for the short run in its Trainer class ({why}):\n    {attribute}"
