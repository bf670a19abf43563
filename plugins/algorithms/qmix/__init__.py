"""QMIX (Rashid et al. 2018) and VDN (Sunehag et al. 2018): value decomposition for cooperative teams.

Per-agent recurrent Q-networks (one GRU network shared by every agent, PyMARL's RNNAgent) whose
chosen Q-values are mixed into one team value: summed (VDN) or by a monotonic mixing network whose
weights hypernetworks make from the global state (QMIX). Learned from whole team episodes replayed
uniformly, with double-Q targets from target networks. The env's agents are grouped into one team
agent by the rollout worker (:mod:`rlgear.sampling.agent_groups`), so a row is a whole env step.
Framework-free parts live here (config, episodes, acting, training step); the networks and the
loss live in one module per backend.
"""

from rlgear.plugins.algorithms.qmix.config import QMixConfig, VDNConfig
from rlgear.plugins.algorithms.qmix.qmix import QMIX, VDN

__all__ = ["QMIX", "VDN", "QMixConfig", "VDNConfig"]
