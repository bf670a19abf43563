"""A framework-free runtime: act with a checkpoint using numpy and safetensors only.

Why: a deployment may not be able to carry torch or TensorFlow (an embedded box, a
small container, a serverless function). Every backend saves the same
framework-neutral weights, and the catalog networks have numpy twins
(:mod:`rlgear.blocks`), so a checkpoint can act without its framework::

    import rlgear.inference
    policy = rlgear.inference.load("runs/ppo_cartpole/checkpoint_000010")
    action = policy.compute_single_action(observation)

:func:`load` returns the same :class:`~rlgear.run.agent.LoadedPolicy` as :func:`rlgear.load`
(observation preprocessing, the frozen observation filter, action masks, recurrent state,
structured actions), with a numpy policy inside (:mod:`rlgear.inference.build` says which).
Nothing imported here imports torch or tensorflow. See docs/inference.md for what is supported.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from rlgear.run.agent import LoadedPolicy, loaded_policy, read_policy

__all__ = ["LoadedPolicy", "load"]


def load(path: str | os.PathLike, policy_id: str | None = None) -> LoadedPolicy:
    """The policy of a checkpoint (or of a run folder's newest checkpoint), acting in numpy.

    ``policy_id`` picks one policy of a checkpoint holding several (``multiagent``). Acting is
    ``compute_actions`` / ``compute_single_action``, greedy unless ``explore=True``.
    """
    from rlgear.inference.build import build_policy

    read = read_policy(path, (), policy_id)
    return loaded_policy(build_policy(read), read)


def __getattr__(name: str) -> Any:
    """rlgear 0.1's ``rlgear.inference`` was the numpy twin, now :mod:`rlgear.blocks.inference`: its
    names still resolve here, with a warning, until rlgear 0.3 (this package took the name over)."""
    import rlgear.blocks.inference as twin

    if name.startswith("__") or not hasattr(twin, name):
        raise AttributeError(f"module 'rlgear.inference' has no attribute '{name}'")
    warnings.warn(
        f"rlgear.inference.{name} moved to rlgear.blocks.inference.{name}; the old path works until "
        "rlgear 0.3 (rlgear.inference is now the framework-free runtime)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(twin, name)
