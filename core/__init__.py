"""rlgear: a plugin-based reinforcement-learning framework.

``import rlgear`` is cheap: it imports no plugin, no torch, tensorflow or ray.
The public names below are resolved lazily on first use.
"""

from __future__ import annotations

import importlib
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
    "Evaluator": "rlgear.execution.evaluator",
    "WorkerSet": "rlgear.execution.evaluator",
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
    "execution", "external", "run", "discovery",
    "registry", "hooks", "checkpoint",  # 0.1 paths (rlgear._moved)
}  # fmt: skip

__all__ = [
    "Backend", "Box", "ConfigError", "Discrete", "EnvAdapter", "Evaluator", "MultiAgentTimeStep",
    "MultiAgentVectorEnv", "PluginError",
    "Policy", "RLGearError", "SampleBatch", "Searcher", "StepType", "TimeStep", "Trainer", "Trial",
    "TrialScheduler", "VectorEnv", "WorkerSet", "__version__", "get_trainable", "hookimpl", "load", "train",
]  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover - static names for type checkers and IDEs
    from rlgear.api import load, train
    from rlgear.backend import Backend
    from rlgear.env import EnvAdapter, MultiAgentTimeStep, MultiAgentVectorEnv, VectorEnv
    from rlgear.errors import ConfigError, PluginError, RLGearError
    from rlgear.execution.evaluator import Evaluator, WorkerSet
    from rlgear.hookspecs import hookimpl
    from rlgear.policy import Policy
    from rlgear.sample_batch import SampleBatch
    from rlgear.scheduler import Trial, TrialScheduler
    from rlgear.searcher import Searcher
    from rlgear.spaces import Box, Discrete
    from rlgear.timestep import StepType, TimeStep
    from rlgear.trainer import Trainer
    from rlgear.tune.trainable import get_trainable


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"rlgear.{name}")
    raise AttributeError(f"module 'rlgear' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})
