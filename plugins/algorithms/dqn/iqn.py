"""IQN: implicit quantile networks (Dabney et al. 2018b) in the DQN family.

"Implicit Quantile Networks for Distributional Reinforcement Learning" (ICML 2018): instead of
QR-DQN's ``N`` fixed quantile fractions, the network takes a fraction ``tau`` as an input (a cosine
embedding multiplied into the state features) and outputs the ``tau``-quantile of each action's
return; the loss is QR-DQN's quantile Huber loss on ``N`` sampled online taus against ``N'`` sampled
target taus, and acting is greedy on the mean of ``K`` sampled quantile values. Everything else is
QR-DQN's and so DQN's: replay, n-step rows, prioritized replay (priority: the row's loss), the
epsilon schedule, the target network, double Q and dueling heads (per tau). The network and loss are
in ``iqn_torch_policy`` / ``iqn_tf_policy``.
"""

from __future__ import annotations

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.dqn.iqn_config import IQNConfig
from rlgear.plugins.algorithms.dqn.qrdqn import QRDQN


class IQN(QRDQN):
    name = "iqn"
    description = (
        "Implicit quantile networks (distributional, sampled quantile fractions embedded by cosines) "
        "with DQN's switches for double Q, dueling heads, n-step returns and prioritized replay; "
        "discrete actions"
    )
    config_class = IQNConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.dqn.iqn_tf_policy:IQNTFPolicy",
        "torch": "rlgear.plugins.algorithms.dqn.iqn_torch_policy:IQNTorchPolicy",
    }
    network_keys = ("dueling", "num_cosines", "num_quantile_samples")

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """The tau input and the Hadamard product are IQN's own network: a ``model.custom`` one has
        neither; the head's hidden layer is ``model.hidden_sizes[-1]``, so one size at least."""
        super().check_config(config)
        if config.model.custom:
            raise config.fail(
                "model.custom",
                f"iqn's network takes sampled quantile fractions (taus) as a second input; a custom model "
                f"({config.model.custom}) cannot: expected no custom model",
            )
        if not config.model.hidden_sizes:
            raise config.fail(
                "model.hidden_sizes",
                "iqn's head after the tau product is a hidden layer of hidden_sizes[-1] units: expected "
                "one size at least (e.g. [128, 128]), got []",
            )
