"""``logging.logger_options``: each logger's options, checked against its constructor.

Here, beside the config, so that checking a config never imports the run machinery
(:mod:`rlgear.run.logger` drives the loggers and uses this check too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_options(logger_class: type, options: Mapping[str, Any], name: str, fail: Any) -> dict[str, Any]:
    """``logging.logger_options.<name>``, checked: each key must be a parameter of the logger's ``__init__``."""
    import inspect

    from rlgear.errors import did_you_mean

    if not isinstance(options, Mapping):
        raise fail(
            f"logging.logger_options.{name}", f"expected a mapping of keyword arguments, got {options!r}"
        )
    params = [
        p
        for p, spec in inspect.signature(logger_class.__init__).parameters.items()
        if p != "self" and spec.kind not in (spec.VAR_KEYWORD, spec.VAR_POSITIONAL)
    ]
    for option in options:
        if option not in params:
            raise fail(
                f"logging.logger_options.{name}.{option}",
                f"unknown option of logger '{name}'{did_you_mean(str(option), params)} "
                f"(options: {', '.join(params) or 'none'})",
            )
    return dict(options)
