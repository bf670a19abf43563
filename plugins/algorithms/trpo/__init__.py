"""TRPO: trust region policy optimization by natural gradient (Schulman et al. 2015).

Framework-free parts live here (config, postprocessing, the conjugate gradient and the line
search, the learning loop); the Fisher-vector product and the value loss live in one module per
backend (``torch_policy``, ``tf_policy``), imported only when a run uses that backend.
"""

from rlgear.plugins.algorithms.trpo.config import TRPOConfig
from rlgear.plugins.algorithms.trpo.trpo import TRPO

__all__ = ["TRPO", "TRPOConfig"]
