"""IMPALA hyperparameters: exactly the shared V-trace learner's (:mod:`rlgear.plugins.families.vtrace.config`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.plugins.families.onpolicy import SGDSchedule
from rlgear.plugins.families.vtrace.config import VTraceConfig


@dataclass
class IMPALAConfig(VTraceConfig):
    """Defaults after the paper and RLlib's IMPALA; every key is documented in :class:`VTraceConfig`."""

    def sgd_schedule(self) -> SGDSchedule:
        """``num_sgd_iter`` passes over each learner batch, one gradient step on the whole batch each."""
        return SGDSchedule(num_epochs=self.num_sgd_iter)
