"""MAPPO: PPO with a centralised critic and value normalization (Yu et al. 2022).

Framework-free parts live here (config, critic input, value statistics, postprocessing); the
policies live in one module per backend (``torch_policy``, ``tf_policy``), imported only when a run
uses that backend.
"""

from rlgear.plugins.algorithms.ppo.mappo.config import MAPPOConfig
from rlgear.plugins.algorithms.ppo.mappo.mappo import MAPPO

__all__ = ["MAPPO", "MAPPOConfig"]
