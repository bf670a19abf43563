"""IMPALA hyperparameters: exactly the shared V-trace learner's (:mod:`rlgear.plugins.families.vtrace.config`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.plugins.families.vtrace.config import VTraceConfig


@dataclass
class IMPALAConfig(VTraceConfig):
    """Defaults after the paper and RLlib's IMPALA; every key is documented in :class:`VTraceConfig`."""
