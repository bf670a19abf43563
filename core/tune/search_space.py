"""Search spaces in a config, and their seeded expansion into trial configs.

Any value in a config (outside the ``tune`` section) may be a one-key mapping:

======================  ==============================================================
``{grid_search: [..]}``  every value, each in its own trial (grids multiply)
``{choice: [..]}``       one value drawn uniformly per trial
``{uniform: [lo, hi]}``  a float drawn uniformly from [lo, hi)
``{loguniform: [lo, hi]}`` a float whose log is uniform in [log lo, log hi); 0 < lo < hi
``{randint: [lo, hi]}``  an integer drawn from lo, ..., hi - 1 (upper bound excluded, as numpy and Ray)
======================  ==============================================================

Expansion follows Ray Tune: ``num_samples`` repetitions of the full grid, so a
config with grids of sizes 2 and 3 and ``num_samples: 4`` gives 24 trials;
distributions are drawn afresh for every trial from one ``numpy`` generator
seeded with ``tune.seed``, so the same config always gives the same trials.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config.schema import SEARCH_SPACE_KEYS, is_search_space
from rlgear.errors import ConfigError

Fail = Callable[[str, str], ConfigError]

#: Top-level sections that are never searched (the experiment's own settings).
NOT_SEARCHED = ("tune",)


@dataclass(frozen=True)
class Domain:
    """One search-space leaf: its kind (``grid_search``, ``choice``, ...) and arguments."""

    kind: str
    args: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        """One value drawn from this domain (``grid_search`` draws uniformly, for PBT resampling)."""
        if self.kind in ("choice", "grid_search"):
            return copy.deepcopy(self.args[int(rng.integers(len(self.args)))])
        low, high = self.args
        if self.kind == "uniform":
            return float(rng.uniform(low, high))
        if self.kind == "loguniform":
            return float(math.exp(rng.uniform(math.log(low), math.log(high))))
        if self.kind == "randint":
            return int(rng.integers(low, high))
        raise AssertionError(self.kind)  # pragma: no cover - parse() admits only the kinds above

    def clip(self, value: Any) -> Any:
        """``value`` kept inside a numeric domain's bounds (for PBT's multiplicative perturbations)."""
        if self.kind in ("uniform", "loguniform"):
            return float(min(max(value, self.args[0]), self.args[1]))
        if self.kind == "randint":
            return int(min(max(round(value), self.args[0]), self.args[1] - 1))
        return value


def parse(value: Any, path: str, fail: Fail) -> Domain:
    """Check one search-space mapping and return its :class:`Domain`."""
    (kind, args), *_ = value.items()
    if kind in ("grid_search", "choice"):
        if not isinstance(args, list | tuple) or not args:
            raise fail(f"{path}.{kind}", f"expected a non-empty list of values, got {args!r}")
        return Domain(kind, tuple(args))
    if not isinstance(args, list | tuple) or len(args) != 2:
        raise fail(f"{path}.{kind}", f"expected [low, high], got {args!r}")
    low, high = args
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    if not numbers:
        raise fail(f"{path}.{kind}", f"expected two numbers [low, high], got {args!r}")
    if not low < high:
        raise fail(f"{path}.{kind}", f"expected low < high, got [{low}, {high}]")
    if kind == "loguniform" and low <= 0:
        raise fail(f"{path}.{kind}", f"loguniform needs 0 < low, got [{low}, {high}]")
    if kind == "randint":
        if not all(isinstance(v, int) or float(v).is_integer() for v in (low, high)):
            raise fail(f"{path}.{kind}", f"randint needs integer bounds, got [{low}, {high}]")
        return Domain(kind, (int(low), int(high)))
    return Domain(kind, (float(low), float(high)))


def find(config: Mapping[str, Any], fail: Fail, prefix: str = "") -> dict[str, Domain]:
    """``{dotted path: Domain}`` for every search space in ``config`` (the ``tune`` section excluded)."""
    found: dict[str, Domain] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if not prefix and key in NOT_SEARCHED:
            continue
        if is_search_space(value):
            found[path] = parse(value, path, fail)
        elif isinstance(value, Mapping):
            bad = [k for k in value if k in SEARCH_SPACE_KEYS]
            if bad and len(value) > 1:
                raise fail(
                    path,
                    f"'{bad[0]}' must be the only key of its mapping to be a search space, "
                    f"found {sorted(map(str, value))}",
                )
            found.update(find(value, fail, path))
    return found


def set_path(config: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in a nested mapping (creating mappings on the way)."""
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def get_path(config: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """The value at a dotted path, or ``default``."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


@dataclass
class Variant:
    """One trial's config and the values its search spaces took (``{path: value}``)."""

    config: dict[str, Any]
    values: dict[str, Any]


def expand(config: Mapping[str, Any], num_samples: int, seed: int | None, fail: Fail) -> Iterator[Variant]:
    """Every trial config: ``num_samples`` x the grid, distributions drawn with a seeded generator."""
    for values in variants(find(config, fail), num_samples, seed):
        trial = copy.deepcopy(dict(config))
        for path, value in values.items():
            set_path(trial, path, value)
        yield Variant(trial, values)


def variants(spaces: Mapping[str, Domain], num_samples: int, seed: int | None) -> Iterator[dict[str, Any]]:
    """The values of every trial, ``{path: value}``: ``num_samples`` x the grid, then seeded draws.

    The order (grids varying fastest within a sample, distributions drawn in
    path order for each trial) is what :func:`expand` has always given, so a
    seed gives the same trials as before the searchers existed.
    """
    grids = {p: d for p, d in spaces.items() if d.kind == "grid_search"}
    draws = {p: d for p, d in spaces.items() if d.kind != "grid_search"}
    rng = np.random.default_rng(seed)
    for _ in range(num_samples):
        for combo in itertools.product(*(d.args for d in grids.values())):
            values: dict[str, Any] = {}
            for path, value in zip(grids, combo, strict=True):
                values[path] = copy.deepcopy(value)
            for path, domain in draws.items():
                values[path] = domain.sample(rng)
            yield values


def count(config: Mapping[str, Any], num_samples: int, fail: Fail) -> int:
    """How many trials :func:`expand` gives, without drawing anything."""
    grids = [d for d in find(config, fail).values() if d.kind == "grid_search"]
    return num_samples * math.prod(len(d.args) for d in grids)
