"""IMPALA: the shared asynchronous V-trace learner with the plain V-trace actor-critic loss.

The training step, the postprocessing into sequences and the multi-agent padding are
:class:`rlgear.plugins.families.vtrace.vtrace_trainer.VTraceTrainer`'s (APPO shares them); IMPALA adds
only its loss, in one module per backend.
"""

from __future__ import annotations

from rlgear.plugins.algorithms.impala.config import IMPALAConfig
from rlgear.plugins.families.vtrace.vtrace_trainer import VTraceTrainer


class IMPALA(VTraceTrainer):
    name = "impala"
    description = "IMPALA: asynchronous sampling, V-trace off-policy correction"
    config_class = IMPALAConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.impala.torch_policy:IMPALATorchPolicy",
        "tf": "rlgear.plugins.algorithms.impala.tf_policy:IMPALATFPolicy",
    }
