"""A3C: asynchronous advantage actor-critic (Mnih et al. 2016, arXiv:1602.01783).

Framework-free parts live here (config, postprocessing, the asynchronous
training step); the loss lives in one module per backend (``torch_policy``, ``tf_policy``),
imported only when a run uses that backend.
"""

from rlgear.plugins.algorithms.a3c.a3c import A3C
from rlgear.plugins.algorithms.a3c.config import A3CConfig

__all__ = ["A3C", "A3CConfig"]
