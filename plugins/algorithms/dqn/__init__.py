"""DQN: deep Q-learning from replay with a target network (Mnih et al. 2015).

Double Q (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step
returns, prioritized replay (Schaul et al. 2016), distributional C51 (Bellemare
et al. 2017) and noisy nets (Fortunato et al. 2018) are config switches, so
Rainbow-style combinations (Hessel et al. 2018) are configs, not classes.
Framework-free parts live here (config, postprocessing, training step); the
network and loss live in one module per backend (``torch_policy``, ``tf_policy``), imported
only when a run uses that backend.
"""

from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.plugins.algorithms.dqn.dqn import DQN

__all__ = ["DQN", "DQNConfig"]
