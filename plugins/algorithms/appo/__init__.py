"""APPO: asynchronous PPO, PPO's clipped surrogate on IMPALA's asynchronous V-trace learner.

Framework-free parts live here (config, the training step's target-network and KL-coefficient
updates); the loss lives in one module per backend (``torch_policy``, ``tf_policy``), imported
only when a run uses that backend. Sampling, the learner queue, sequences and V-trace are the
shared V-trace learner's (:mod:`rlgear.plugins.families.vtrace.vtrace_trainer`, the backends' ``vtrace``).
"""

from rlgear.plugins.algorithms.appo.appo import APPO
from rlgear.plugins.algorithms.appo.config import APPOConfig

__all__ = ["APPO", "APPOConfig"]
