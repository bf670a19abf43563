"""rlgear: a plugin-based reinforcement-learning framework.

``import rlgear`` is cheap: it imports no plugin, no torch, tensorflow or ray.
The public names below are resolved lazily on first use.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from rlgear import _moved

_moved.install()

__version__ = "0.1.0"

# public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "StepType": "rlgear.timestep",
    "TimeStep": "rlgear.timestep",
    "SampleBatch": "rlgear.sample_batch",
    "Box": "rlgear.spaces",
    "Discrete": "rlgear.spaces",
    "Policy": "rlgear.policy",
    "Learner": "rlgear.learner",
    "RolloutWorker": "rlgear.sampling.rollout_worker",
    "WorkerSet": "rlgear.distributed.worker_set",
    "Trainer": "rlgear.trainer",
    "TrialScheduler": "rlgear.scheduler",
    "Trial": "rlgear.scheduler",
    "Searcher": "rlgear.searcher",
    "EnvAdapter": "rlgear.env",
    "VectorEnv": "rlgear.env",
    "MultiAgentVectorEnv": "rlgear.env",
    "MultiAgentTimeStep": "rlgear.env",
    "Backend": "rlgear.backend",
    "hookimpl": "rlgear.hookspecs",
    "train": "rlgear.api",
    "load": "rlgear.api",
    "RLGearError": "rlgear.errors",
    "ConfigError": "rlgear.errors",
    "PluginError": "rlgear.errors",
    "get_trainable": "rlgear.tune.trainable",
}
_SUBMODULES = {
    "value_ops", "config", "errors", "spaces", "testing", "tune",
    "sampling", "distributed", "blocks", "external", "run", "discovery", "inference",
    "execution",  # 0.2 path (rlgear._moved)
    "registry", "hooks", "checkpoint",  # 0.1 paths (rlgear._moved)
}  # fmt: skip

__all__ = [
    "Backend",
    "Box",
    "ConfigError",
    "Discrete",
    "EnvAdapter",
    "Learner",
    "MultiAgentTimeStep",
    "MultiAgentVectorEnv",
    "PluginError",
    "Policy",
    "RLGearError",
    "RolloutWorker",
    "SampleBatch",
    "Searcher",
    "StepType",
    "TimeStep",
    "Trainer",
    "Trial",
    "TrialScheduler",
    "VectorEnv",
    "WorkerSet",
    "__version__",
    "get_trainable",
    "hookimpl",
    "load",
    "train",
]  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover - static names for type checkers and IDEs
    from rlgear.api import load, train
    from rlgear.backend import Backend
    from rlgear.distributed.worker_set import WorkerSet
    from rlgear.env import EnvAdapter, MultiAgentTimeStep, MultiAgentVectorEnv, VectorEnv
    from rlgear.errors import ConfigError, PluginError, RLGearError
    from rlgear.hookspecs import hookimpl
    from rlgear.learner import Learner
    from rlgear.policy import Policy
    from rlgear.sample_batch import SampleBatch
    from rlgear.sampling.rollout_worker import RolloutWorker
    from rlgear.scheduler import Trial, TrialScheduler
    from rlgear.searcher import Searcher
    from rlgear.spaces import Box, Discrete
    from rlgear.timestep import StepType, TimeStep
    from rlgear.trainer import Trainer
    from rlgear.tune.trainable import get_trainable


#: Public names renamed in 0.3: old name -> (new name, removed in).
_RENAMED = {"Evaluator": ("RolloutWorker", "0.4")}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new, removed_in = _RENAMED[name]
        warnings.warn(
            f"rlgear.{name} is now rlgear.{new}; the old name works until rlgear {removed_in}",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(new)
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"rlgear.{name}")
    raise AttributeError(f"module 'rlgear' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})
