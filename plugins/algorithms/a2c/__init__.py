"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, synchronous variant).

Framework-free parts live here (config, postprocessing, training step); the
loss lives in one module per backend (``torch_policy``, ``tf_policy``), imported only when a
run uses that backend.
"""

from rlgear.plugins.algorithms.a2c.a2c import A2C
from rlgear.plugins.algorithms.a2c.config import A2CConfig

__all__ = ["A2C", "A2CConfig"]
