"""ars: Augmented Random Search (Mania et al. 2018), V1 and V2 with top-b directions, framework-free.

The training step, noise table and worker protocol are shared with es
(:mod:`rlgear.plugins.families.evolution.evolution`); this package holds ars's config and its update.
"""

from rlgear.plugins.algorithms.ars.ars import ARS
from rlgear.plugins.algorithms.ars.config import ARSConfig

__all__ = ["ARS", "ARSConfig"]
