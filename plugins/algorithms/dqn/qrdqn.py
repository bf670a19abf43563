"""QR-DQN: DQN learning quantiles of the return distribution (Dabney et al. 2018).

"Distributional Reinforcement Learning with Quantile Regression" (AAAI 2018): the Q-network
outputs ``N`` quantile estimates ``theta_i(s, a)`` per action at the fixed fractions
``tau_i = (2i + 1) / (2N)``; acting is greedy on their mean ``Q(s, a) = mean_i theta_i(s, a)``;
the loss is the quantile Huber loss (eq. 10) of the current quantiles against the target samples
``r + gamma^n theta_j(s', a*)`` of the target network. Everything else is DQN's: the training step
(:class:`~rlgear.plugins.algorithms.dqn.dqn.DQN`), replay, n-step rows, prioritized replay,
epsilon schedule, target network and the switches double Q, dueling and noisy nets, on the same
Q-network with ``N`` outputs per action (``q/...`` weight names, the same on both backends).
The loss is in ``qrdqn_torch_policy`` / ``qrdqn_tf_policy``, subclasses of DQN's policies.
"""

from __future__ import annotations

from rlgear.plugins.algorithms.dqn.dqn import DQN
from rlgear.plugins.algorithms.dqn.qrdqn_config import QRDQNConfig


class QRDQN(DQN):
    name = "qrdqn"
    description = (
        "Quantile-regression DQN (distributional, N quantiles per action) with DQN's switches for "
        "double Q, dueling heads, n-step returns, prioritized replay and noisy nets; discrete actions"
    )
    config_class = QRDQNConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.dqn.qrdqn_tf_policy:QRDQNTFPolicy",
        "torch": "rlgear.plugins.algorithms.dqn.qrdqn_torch_policy:QRDQNTorchPolicy",
    }
    network_keys = ("dueling", "num_quantiles", "noisy")
