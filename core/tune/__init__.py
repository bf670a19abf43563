"""Experiments: search spaces, the trial runner, executors, experiment state, results.

``rlgear tune CONFIG`` (and :func:`run`) turns the config's search spaces into
trials with a searcher plugin (``random``, ``grid``, ``optuna``) and drives them
with a scheduler plugin (``fifo``, ``asha``, ``pbt``) through an executor (local
by default, or Ray). See docs/tune.md.
Nothing heavy is imported here: ``import rlgear.tune`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rlgear.tune.experiment import TuneResult, run

__all__ = ["TuneResult", "run"]


def __getattr__(name: str) -> Any:
    if name in ("run", "TuneResult"):
        from rlgear.tune import experiment

        return getattr(experiment, name)
    raise AttributeError(f"module 'rlgear.tune' has no attribute {name!r}")
