"""The checks of a searcher plugin (``rlgear plugins --check NAME --kind searcher``).

The searcher is built as ``rlgear tune`` builds it (default options) on a small
synthetic space, in a temporary experiment folder; it must suggest values inside
the space, take completions, and its ``get_state()`` must be JSON that a fresh
instance accepts and goes on from (no trial suggested twice, none lost).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from rlgear.discovery import registry
from rlgear.discovery.check._base import _Broke, _Checks, _load

_METRIC = "episode_return_mean"
_SAMPLES = 6


def _spaces() -> list[tuple[dict[str, Any], int]]:
    """The spaces tried, in order, with their ``num_samples``: distributions, else (a grid searcher) a grid."""
    from rlgear.tune.search_space import Domain

    distributions = {
        "training.lr": Domain("loguniform", (1e-5, 1e-2)),
        "training.gamma": Domain("uniform", (0.9, 0.999)),
        "training.num_sgd_iter": Domain("randint", (1, 8)),
    }
    grid = {"training.num_sgd_iter": Domain("grid_search", (1, 2, 4))}
    return [(distributions, _SAMPLES), (grid, _SAMPLES // 3)]


def _fail(path: str, message: str) -> Exception:
    return ValueError(f"{path}: {message}")


def _pick_space(cls: type) -> tuple[dict[str, Any], int]:
    """The first synthetic space the searcher accepts (``check_space``); the last one's refusal raises."""
    *first, last = _spaces()
    for space, samples in first:
        try:
            cls.check_space(space, _fail)
        except ValueError:
            continue
        return space, samples
    cls.check_space(last[0], _fail)
    return last


def _make(cls: type, space: dict[str, Any], samples: int, folder: Path) -> Any:
    from rlgear.tune.config import plugin_options

    options = plugin_options(cls, {}, "tune.searcher_options", f"searcher {cls.__qualname__}", _fail)
    searcher = cls(space, metric=_METRIC, mode="max", num_samples=samples, seed=0, **options)
    searcher.attach(folder)
    return searcher


def _objective(values: dict[str, Any]) -> float:
    return -sum((math.log10(v) + 1.5) ** 2 for v in values.values())


def _inside(value: Any, domain: Any) -> bool:
    if domain.kind in ("grid_search", "choice"):
        return value in domain.args
    low, high = domain.args
    return isinstance(value, int | float) and low <= value <= high


def _drive(searcher: Any, space: dict[str, Any], ids: list[str], limit: int) -> None:
    """Ask and complete trials one at a time, as the runner does with one slot, up to ``limit`` suggestions."""
    while len(ids) < limit:
        trial_id = f"check_{len(ids):03d}"
        values = searcher.suggest(trial_id)
        if values == searcher.FINISHED:
            return
        if values is None:
            raise _Broke("suggest", "returned None (wait) although no trial of it was running")
        if not isinstance(values, dict) or set(values) != set(space):
            raise _Broke("suggest", f"returned {values!r}; expected a value for each of {sorted(space)}")
        for path, value in values.items():
            if not _inside(value, space[path]):
                raise _Broke(
                    "suggest", f"{path}={value!r} is outside its {space[path].kind} {space[path].args}"
                )
        ids.append(trial_id)
        searcher.on_trial_complete(trial_id, {_METRIC: _objective(values), "training_iteration": 1})


def _check_searcher(checks: _Checks, info: registry.PluginInfo, load_name: str) -> None:
    cls = _load(checks, info, load_name)
    build_fix = (
        "rlgear tune builds the searcher as cls(space, metric=..., mode=..., num_samples=..., seed=..., "
        "**searcher_options) and then calls attach(experiment_dir): give every option a default"
    )
    with tempfile.TemporaryDirectory(prefix="rlgear-check-searcher-") as tmp:
        with checks.step("construct", build_fix):
            space, samples = _pick_space(cls)
            searcher = _make(cls, space, samples, Path(tmp))
        kinds = ", ".join(sorted({d.kind for d in space.values()}))
        checks.add(
            "construct", True, f"{cls.__qualname__} with default options on {kinds}, num_samples={samples}"
        )
        suggest_fix = (
            "suggest(trial_id) returns {dotted path: value} inside each domain, None to wait while "
            "trials run, or self.FINISHED when the search is over"
        )
        ids: list[str] = []
        total = searcher.total_trials() or samples  # grids multiply num_samples
        with checks.step("suggest", suggest_fix):
            _drive(searcher, space, ids, total // 2)
        checks.add("suggest", True, f"{len(ids)} suggestions inside the space, each completed")
        state_fix = (
            "get_state() must return JSON-able data that set_state() of a fresh instance (after attach) "
            "continues from: no trial suggested again, tune.num_samples trials in all"
        )
        with checks.step("state is JSON", state_fix):
            saved = json.dumps(searcher.get_state())
        checks.add("state is JSON", True, f"get_state() is {len(saved)} bytes of JSON")
        with checks.step("state round trip", state_fix):
            restored = _make(cls, space, samples, Path(tmp))
            restored.set_state(json.loads(saved))
            _drive(restored, space, ids, total * 3)
        checks.add(
            "state round trip",
            len(ids) == total,
            f"a fresh instance given set_state(get_state()) suggested {len(ids) - total // 2} more "
            f"trials, {len(ids)} in all (expected {total})",
            state_fix,
        )
