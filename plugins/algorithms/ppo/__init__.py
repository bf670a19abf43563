"""PPO: proximal policy optimization with a clipped surrogate (Schulman et al. 2017).

Framework-free parts live here (config, postprocessing, training step); the
loss lives in one module per backend (``torch_policy``, ``tf_policy``), imported only when a
run uses that backend.
"""

from rlgear.plugins.algorithms.ppo.config import PPOConfig
from rlgear.plugins.algorithms.ppo.ppo import PPO

__all__ = ["PPO", "PPOConfig"]
