"""IMPALA hyperparameters: exactly the shared V-trace learner's (:mod:`rlgear.config.vtrace`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.vtrace import VTraceConfig


@dataclass
class IMPALAConfig(VTraceConfig):
    """Defaults after the paper and RLlib's IMPALA; every key is documented in :class:`VTraceConfig`."""
