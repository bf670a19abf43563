"""The Python API: ``rlgear.train(config)`` and ``rlgear.load(checkpoint)``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.run.agent import LoadedPolicy
from rlgear.run.agent import load as _load


def train(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike,
    *,
    overrides: Sequence[str] = (),
    hooks: Iterable[Any] = (),
    resume: str | os.PathLike | None = None,
    progress: str | None = "none",
) -> dict[str, Any]:
    """Run training as ``rlgear train`` does and return the last result.

    Args:
        config: a YAML path, a mapping with the same keys, or a RunConfig.
        overrides: ``["training.lr=0.001", ...]`` as with ``--set``.
        hooks: objects with ``@rlgear.hookimpl`` methods (see ``rlgear.hookspecs``).
        resume: a run folder to continue from its newest checkpoint.
        progress: "none" (default in code), "plain", "rich" or "auto".
    """
    from rlgear.run.runner import run

    if isinstance(config, RunConfig):
        if overrides:
            config = config_mod.resolve(config.to_dict(), config.source, overrides)
    elif isinstance(config, Mapping):
        config = config_mod.resolve(config, overrides=overrides)
    else:
        config = config_mod.load(config, overrides)
    return run(config, resume=resume, hooks=hooks, progress=progress)


def load(
    checkpoint: str | os.PathLike, overrides: Sequence[str] = (), policy_id: str | None = None
) -> LoadedPolicy:
    """A trained policy from a checkpoint folder (or a run folder's newest checkpoint).

    ``policy_id`` picks one policy of a multi-agent run with several (``multiagent.policies``).
    """
    return _load(checkpoint, overrides, policy_id=policy_id)
