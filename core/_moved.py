"""Old import paths of modules that moved, kept working for one release after the move.

rlgear 0.1 had every module at the top of ``rlgear``; 0.2 kept the contracts there and moved the
machinery into sub-packages (``rlgear.execution``, ``rlgear.external``, ``rlgear.run``,
``rlgear.discovery``, ``rlgear.config``). 0.3 gave learning a home of its own and split
``rlgear.execution`` by concern: ``rlgear.sampling`` (rollout workers, the sampler, collectors,
filters, postprocessing, metrics), ``rlgear.distributed`` (the worker set, remote workers, async ops,
the Ray session), ``rlgear.blocks`` (framework-free building blocks: replay buffers, numpy model
twins, schedules) and the families under ``rlgear.plugins.families`` (the replay loop with Ape-X,
V-trace, evolution).

A plugin written against an older layout (``from rlgear.execution.rollout_ops import
synchronous_parallel_sample``) still imports: a finder on ``sys.meta_path`` resolves the old name
to the module at its new home (the same module object, so ``isinstance`` and monkeypatching agree)
and warns once with a :class:`DeprecationWarning` naming the new path. A module that was split in
two (``rlgear.execution.evaluator``: the rollout worker and the worker set) resolves to a
read-only facade holding the public names of both. Shim files would have done the same, at the
price of a top level (and an ``execution/`` drawer) as crowded as before.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

_0_2 = {
    "evaluator": "rlgear.sampling.rollout_worker",
    "multi_agent": "rlgear.sampling.sampler",
    "collector": "rlgear.sampling.collector",
    "observation_filter": "rlgear.sampling.observation_filter",
    "postprocessing": "rlgear.sampling.postprocessing",
    "metrics": "rlgear.sampling.metrics",
    "sequences": "rlgear.sampling.sequences",
    "rollout_ops": "rlgear.distributed.rollout_ops",
    "async_ops": "rlgear.distributed.async_ops",
    "ray_session": "rlgear.distributed.ray_session",
    "remote_worker": "rlgear.distributed.remote_worker",
    "replay_buffers": "rlgear.blocks.replay_buffers",
    "schedules": "rlgear.blocks.schedules",
    "target_network": "rlgear.blocks.target_network",
    "inference": "rlgear.blocks.inference",
    "conv_inference": "rlgear.blocks.conv_inference",
    "lstm_inference": "rlgear.blocks.lstm_inference",
    "squashed_inference": "rlgear.blocks.squashed_inference",
    "apex": "rlgear.plugins.families.replay.apex",
    "replay_shards": "rlgear.plugins.families.replay.replay_shards",
    "replay_trainer": "rlgear.plugins.families.replay.replay_trainer",
    "vtrace_trainer": "rlgear.plugins.families.vtrace.vtrace_trainer",
    "evolution": "rlgear.plugins.families.evolution.evolution",
    "population": "rlgear.plugins.families.evolution.population",
}

#: old module name -> (its new home, the release that removes the old name)
MOVED: dict[str, tuple[str, str]] = {
    # 0.1 -> 0.2 (the 0.2 homes under rlgear.execution moved again in 0.3: straight to the new one)
    **{f"rlgear.{name}": (_0_2[name], "0.3") for name in (
        "async_ops", "metrics", "postprocessing", "ray_session",
        "remote_worker", "replay_buffers", "rollout_ops", "schedules")},
    **{f"rlgear.{name}": (f"rlgear.external.{name}", "0.3") for name in ("client", "serve", "wire")},
    **{f"rlgear.{name}": (f"rlgear.run.{name}", "0.3") for name in ("agent", "checkpoint", "logger", "progress", "runner")},
    **{f"rlgear.{name}": (f"rlgear.discovery.{name}", "0.3") for name in ("hooks", "registry")},
    "rlgear.schema": ("rlgear.config.schema", "0.3"),
    # (rlgear.inference, 0.1's numpy twin, is the framework-free runtime now: it forwards the old names)
    # 0.2 -> 0.3
    **{f"rlgear.execution.{name}": (new, "0.4") for name, new in _0_2.items() if name != "evaluator"},
    "rlgear.config.replay": ("rlgear.plugins.families.replay.config", "0.4"),
    "rlgear.config.apex": ("rlgear.plugins.families.replay.apex_config", "0.4"),
    "rlgear.config.vtrace": ("rlgear.plugins.families.vtrace.config", "0.4"),
    "rlgear.config.evolution": ("rlgear.plugins.families.evolution.config", "0.4"),
}  # fmt: skip

#: old module name -> (the modules it was split into, the release that removes the old name)
SPLIT: dict[str, tuple[tuple[str, ...], str]] = {
    "rlgear.evaluator": (("rlgear.sampling.rollout_worker", "rlgear.distributed.worker_set"), "0.3"),
    "rlgear.execution.evaluator": (
        ("rlgear.sampling.rollout_worker", "rlgear.distributed.worker_set"),
        "0.4",
    ),
}

#: old packages whose modules all moved: importing them still works (and warns)
EMPTIED: dict[str, str] = {"rlgear.execution": "0.4"}

#: names a facade adds for renamed classes: old name -> (module, new name)
RENAMED = {"Evaluator": ("rlgear.sampling.rollout_worker", "RolloutWorker")}


def _warn(old: str, new: str, removed_in: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old path works until rlgear {removed_in}",
        DeprecationWarning,
        stacklevel=3,
    )


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, old: str, new: str, removed_in: str) -> None:
        self.old, self.new, self.removed_in = old, new, removed_in

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new, self.removed_in)
        module = importlib.import_module(self.new)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the real module: give it back its own.
        module.__spec__ = self._real_spec


class _FacadeLoader(importlib.abc.Loader):
    """A module that was split: a new module object holding the public names of its parts."""

    def __init__(self, old: str, parts: tuple[str, ...], removed_in: str) -> None:
        self.old, self.parts, self.removed_in = old, parts, removed_in

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        _warn(self.old, " and ".join(self.parts), self.removed_in)
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = f"Facade of the 0.2 module {self.old}: see {', '.join(self.parts)}."
        for part in self.parts:
            source = importlib.import_module(part)
            for name, value in vars(source).items():
                if not name.startswith("__"):
                    setattr(module, name, value)
        for old_name, (home, new_name) in RENAMED.items():
            if home in self.parts:
                setattr(module, old_name, getattr(importlib.import_module(home), new_name))


class _EmptiedPackageLoader(importlib.abc.Loader):
    def __init__(self, old: str, removed_in: str) -> None:
        self.old, self.removed_in = old, removed_in

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        warnings.warn(
            f"{self.old} was split into rlgear.sampling, rlgear.distributed, rlgear.blocks and "
            f"rlgear.plugins.families; the old paths work until rlgear {self.removed_in}",
            DeprecationWarning,
            stacklevel=3,
        )
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__path__ = []  # a package: its old submodules resolve through MovedModuleFinder


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Resolves the old names in :data:`MOVED`, :data:`SPLIT` and :data:`EMPTIED`."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname in MOVED:
            new, removed_in = MOVED[fullname]
            return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(fullname, new, removed_in))
        if fullname in SPLIT:
            parts, removed_in = SPLIT[fullname]
            return importlib.machinery.ModuleSpec(fullname, _FacadeLoader(fullname, parts, removed_in))
        if fullname in EMPTIED:
            spec = importlib.machinery.ModuleSpec(
                fullname, _EmptiedPackageLoader(fullname, EMPTIED[fullname]), is_package=True
            )
            return spec
        return None


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
