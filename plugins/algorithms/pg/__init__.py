"""PG: REINFORCE (Williams 1992), optionally with a learned value baseline.

Framework-free parts live here (config, postprocessing, training step); the
loss lives in one module per backend (``torch_policy``, ``tf_policy``), imported only when a
run uses that backend.
"""

from rlgear.plugins.algorithms.pg.config import PGConfig
from rlgear.plugins.algorithms.pg.pg import PG

__all__ = ["PG", "PGConfig"]
