"""PQN: parallelised Q-learning with layer normalisation and Q(lambda) targets (Gallici et al. 2024).

"Simplifying Deep Temporal Difference Learning" (arXiv:2407.04811): vectorised envs, an
epsilon-greedy online Q-network with LayerNorm after every hidden layer, Q(lambda) returns
computed on each rollout, then a few epochs of minibatch SGD on them; no replay buffer and no
target network. Framework-free parts live here (config, postprocessing, training step); the
network and loss live in one module per backend (``torch_policy``, ``tf_policy``), imported only
when a run uses that backend.
"""

from rlgear.plugins.algorithms.pqn.config import PQNConfig
from rlgear.plugins.algorithms.pqn.pqn import PQN

__all__ = ["PQN", "PQNConfig"]
