"""IMPALA: importance-weighted actor-learner architecture (Espeholt et al. 2018, arXiv:1802.01561).

Framework-free parts live here (config, postprocessing, the asynchronous
training step); the V-trace loss lives in one module per backend
(``torch_policy``, ``tf_policy``), imported only when a run uses that backend.
"""

from rlgear.plugins.algorithms.impala.config import IMPALAConfig
from rlgear.plugins.algorithms.impala.impala import IMPALA

__all__ = ["IMPALA", "IMPALAConfig"]
