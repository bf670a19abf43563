"""Old import paths of modules that moved into sub-packages in 0.2, kept working for one release.

rlgear 0.1 had every module at the top of ``rlgear``; 0.2 keeps the contracts there
and moved the machinery into ``rlgear.execution``, ``rlgear.external``,
``rlgear.run``, ``rlgear.discovery`` and ``rlgear.config``. A plugin written
against 0.1 (``from rlgear.rollout_ops import synchronous_parallel_sample``) still
imports: a finder on ``sys.meta_path`` resolves the old name to the module at its
new home (the same module object, so ``isinstance`` and monkeypatching agree) and
warns once with a :class:`DeprecationWarning` naming the new path. Shim files would
have done the same, at the price of a top level as crowded as before.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.3"

#: old module name -> its home since 0.2
MOVED: dict[str, str] = {
    **{f"rlgear.{name}": f"rlgear.execution.{name}" for name in (
        "async_ops", "evaluator", "inference", "metrics", "postprocessing", "ray_session",
        "remote_worker", "replay_buffers", "rollout_ops", "schedules")},
    **{f"rlgear.{name}": f"rlgear.external.{name}" for name in ("client", "serve", "wire")},
    **{f"rlgear.{name}": f"rlgear.run.{name}" for name in ("agent", "checkpoint", "logger", "progress", "runner")},
    **{f"rlgear.{name}": f"rlgear.discovery.{name}" for name in ("hooks", "registry")},
    "rlgear.schema": "rlgear.config.schema",
}  # fmt: skip


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} moved to {self.new}; the old path works until rlgear {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the real module: give it back its own.
        module.__spec__ = self._real_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Resolves the 0.1 names in :data:`MOVED` to their new modules."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(fullname, new))


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
