"""es: Evolution Strategies (Salimans et al. 2017), framework-free.

The training step, noise table and worker protocol are shared with ars
(:mod:`rlgear.plugins.families.evolution.evolution`); this package holds es's config and its
update: centred-rank fitness shaping, weight decay and Adam on the flat vector.
"""

from rlgear.plugins.algorithms.es.config import ESConfig
from rlgear.plugins.algorithms.es.es import ES

__all__ = ["ES", "ESConfig"]
