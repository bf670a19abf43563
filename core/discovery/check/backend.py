"""The checks of a backend plugin (``rlgear plugins --check``)."""

from __future__ import annotations

import importlib

import numpy as np

from rlgear.discovery import registry
from rlgear.discovery.check._base import (
    _Checks,
    _load,
    _short_repr,
)


def _check_backend(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    abstract = sorted(getattr(cls, "__abstractmethods__", ()))
    checks.add(
        "abstract methods",
        not abstract,
        "implements setup, get_rng_state, set_rng_state"
        if not abstract
        else f"not implemented: {', '.join(abstract)}",
        "implement every abstract method of rlgear.backend.Backend",
    )
    if abstract:
        return
    with checks.step("instantiate", "a Backend is built with no arguments: give __init__ none"):
        backend = cls()
    checks.add("instantiate", True, f"{cls.__qualname__}()")
    with checks.step("setup", "setup(num_threads, seed) sets the framework's threads and seeds its RNG"):
        backend.setup(1, 0)
    checks.add("setup", True, "setup(1, 0)")
    rng_fix = (
        "get_rng_state() returns {name: numpy array} and set_rng_state(that) puts the framework's RNG "
        "back exactly (checkpoints rely on it)"
    )
    with checks.step("rng state round trip", rng_fix):
        state = backend.get_rng_state()
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()
        ):
            raise TypeError(f"get_rng_state() returned {type(state).__name__} {_short_repr(state)}")
        saved = {k: v.copy() for k, v in state.items()}
        backend.reseed(12345)  # move the RNG on, then put it back
        backend.set_rng_state(saved)
        again = backend.get_rng_state()
        backend.setup(1, 0)
    same = set(again) == set(saved) and all(np.array_equal(again[k], saved[k]) for k in saved)
    checks.add(
        "rng state round trip",
        same,
        f"{', '.join(saved) or 'no RNG state'}: set_rng_state(get_rng_state()) restores it"
        if same
        else "after reseed() and set_rng_state(saved), get_rng_state() differs from saved",
        rng_fix,
    )
    with checks.step("version", "version() returns the framework's version as a string ('' if unknown)"):
        version = backend.version()
    checks.add(
        "version",
        isinstance(version, str),
        f"version() = {version!r}",
        "version() returns the framework's version as a string ('' if unknown)",
    )
    _check_policy_base(checks, info, cls)


def _check_policy_base(checks: _Checks, info: registry.PluginInfo, cls: type) -> None:
    """The base class algorithms' policies subclass, when the backend's module exports one."""
    from rlgear.policy import Policy

    module = importlib.import_module(info.target.partition(":")[0])
    bases = sorted(
        f"{module.__name__}.{attr}"
        for attr, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, Policy) and obj is not Policy
    )
    if bases:
        checks.add("base policy class", True, f"{module.__name__} exports {', '.join(bases)}")
    else:
        checks.add(
            "base policy class",
            True,
            f"{module.__name__} exports no rlgear.policy.Policy subclass (the Backend contract does not "
            "require one; algorithms' policies then subclass rlgear.policy.Policy directly)",
        )
