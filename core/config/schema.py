"""Typed config sections built from plain dicts, with errors written for users.

Config sections are dataclasses whose fields carry a ``help`` text
(``field(default=..., metadata={"help": "..."})``). :func:`build` turns a
mapping into such a dataclass, checking every key and type, and raises a
:class:`~rlgear.errors.ConfigError` that names the source (a file or a
``--set`` override), the dotted key path, what was expected and what was
given, and for an unknown key the closest valid one.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from rlgear.errors import ConfigError, did_you_mean

T = TypeVar("T")

SEARCH_SPACE_KEYS = ("grid_search", "choice", "uniform", "loguniform", "randint")


def doc(text: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a help text (shown in errors and in the config reference)."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"help": text})
    return dataclasses.field(default=default, metadata={"help": text})


def is_search_space(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in SEARCH_SPACE_KEYS


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def type_name(tp: Any) -> str:
    """A user-facing name for a type annotation ('a number', 'one of sync, async' ...)."""
    origin = get_origin(tp)
    if tp is Any:
        return "any value"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return f"a list of {_plural(type_name(item))}"
    if origin is dict or tp is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _plural(name: str) -> str:
    """'an integer' -> 'integers', 'a list of numbers' -> 'lists of numbers'."""
    name = name.removeprefix("a ").removeprefix("an ")
    head, sep, tail = name.partition(" of ")
    return f"{head}s{sep}{tail}" if sep else f"{name}s"


class _Mismatch(Exception):
    """The value does not fit the annotation (caught by Union handling, then reported)."""


def coerce(tp: Any, value: Any, path: str, fail: Callable[[str, str], ConfigError]) -> Any:
    """Check ``value`` against annotation ``tp`` and return it in canonical form."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if is_search_space(value) and not (origin is dict or tp is dict):
        raise fail(
            path,
            f"'{next(iter(value))}' is a search space; search spaces are expanded by "
            "'rlgear tune', and 'rlgear train' needs a single value",
        )
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(option, value, path, _raise_mismatch)
            except _Mismatch:
                continue
            except ConfigError:
                raise
        raise fail(path, f"expected {type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        if value in get_args(tp):
            return value
        choices = [str(a) for a in get_args(tp)]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        raise fail(path, f"expected {type_name(tp)}, got {_describe(value)}{hint}")
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # 1e6 in YAML is a float; accept it where an int is wanted
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is list:
        if isinstance(value, list | tuple):
            (item,) = get_args(tp) or (Any,)
            return [coerce(item, v, f"{path}[{i}]", fail) for i, v in enumerate(value)]
    elif origin is dict or tp is dict:
        if isinstance(value, Mapping):
            args = get_args(tp)
            item = args[1] if len(args) == 2 else Any
            return {str(k): coerce(item, v, f"{path}.{k}", fail) for k, v in value.items()}
    elif dataclasses.is_dataclass(tp):
        return build(tp, value, path, fail)
    else:  # pragma: no cover - schema authoring error
        raise TypeError(f"unsupported annotation {tp!r} at {path}")
    raise fail(path, f"expected {type_name(tp)}, got {_describe(value)}")


def _raise_mismatch(path: str, message: str) -> ConfigError:
    raise _Mismatch(message)


def build(cls: type[T], data: Any, path: str, fail: Callable[[str, str], ConfigError]) -> T:
    """Build dataclass ``cls`` from mapping ``data``; every key is checked."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise fail(path, f"expected a mapping, got {_describe(data)}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            raise fail(where, f"unknown key{did_you_mean(str(key), fields)}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = coerce(hints[name], data[name], where, fail)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            help_text = f.metadata.get("help", "")
            raise fail(where, f"missing required key ({help_text})" if help_text else "missing")
    return cls(**kwargs)


def field_help(cls: type) -> dict[str, tuple[str, Any, str]]:
    """``{name: (type name, default, help)}`` for a config dataclass (for docs and CLI)."""
    hints = get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        out[f.name] = (type_name(hints[f.name]), default, f.metadata.get("help", ""))
    return out
