"""Errors a user can meet.

Every error that a user can cause by what they wrote (a config, a plugin name,
a checkpoint path) is an :class:`RLGearError`. The CLI prints these as one line
and exits with status 2, without a traceback: the message itself must say what
went wrong, where, and what to do. Anything else escaping the CLI is a bug in
rlgear or a plugin and keeps its traceback.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class RLGearError(Exception):
    """Base class of the errors that are the user's to fix."""


class ConfigError(RLGearError):
    """A config file or override is malformed, has an unknown key or a wrong type."""


class DeviceError(ConfigError):
    """``learners.device`` names a device this machine does not have (``cuda`` without a GPU).

    A :class:`ConfigError`: the fix is in the config (or the machine), so the CLI prints the one
    line and exits 2, before any env, worker or policy is built. ``detail`` is the message
    without its ``learners.device:`` prefix, for re-raising it prefixed with the config's file or
    ``--set`` (``RunConfig.fail``).
    """

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


class PluginError(RLGearError):
    """A plugin is unknown, failed to import, or is missing a dependency."""


class UnsupportedError(RLGearError):
    """An algorithm was paired with an env or backend it does not support."""


class CheckpointError(RLGearError):
    """A checkpoint or run folder is missing, incomplete or from another run."""


class RunError(RLGearError):
    """The run started but cannot go on (workers lost for good, training diverged).

    The CLI exits with status 1 for these (2 is for what the user wrote), after
    the runner wrote a checkpoint of the last good state and ``stopped.json``.
    """


class NonFiniteError(RunError):
    """Learning produced NaN or infinity (in a loss, a gradient or the weights) and cannot go on."""


class DatasetError(RLGearError):
    """A dataset file (``offline.input``) cannot be read: corrupt, truncated, or not Minari's format.

    Missing datasets, spaces that differ and an ``offline.output`` that exists are
    :class:`ConfigError`: their fix is in the config.
    """


class EnvDataError(RunError):
    """An env emitted data that breaks its own declared spaces (e.g. an action mask allowing nothing)."""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (for 'did you mean' hints), or None."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A '; did you mean X?' suffix, or an empty string when nothing is close."""
    match = closest(name, candidates)
    return f"; did you mean '{match}'?" if match else ""


def unaccepted_keyword(
    function: Callable[..., Any], kwargs: Mapping[str, Any], skip: Iterable[str] = ()
) -> tuple[str, list[str]] | None:
    """The first key of ``kwargs`` that ``function`` takes no parameter for, with the names it does take
    (less ``skip``: those the caller passes itself); None when it takes them all or takes ``**kwargs``.

    Why: config keys that end up as constructor keywords (optimizers, wrappers) are checked when the
    config is read, so a typo is one error naming the key rather than a TypeError mid-run.
    """
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    skipped = {"self", *skip}
    accepted = [
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skipped
    ]
    unknown = next((key for key in kwargs if key not in accepted), None)
    return None if unknown is None else (unknown, accepted)
