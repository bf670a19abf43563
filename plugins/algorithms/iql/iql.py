"""IQL's trainer: the offline loop on one-step transitions with their discounts.

Nothing per episode is needed: each row's targets come from the networks (``V(s')``), not from
returns, so IQL reads the dataset's own transition minibatches. The policy Polyak-averages its
target critics after every step (``training.tau``).
"""

from __future__ import annotations

from rlgear.plugins.algorithms.iql.config import IQLConfig
from rlgear.plugins.families.offline import OfflineTrainer
from rlgear.plugins.families.offline.batches import Batches


class IQL(OfflineTrainer):
    name = "iql"
    description = (
        "Implicit Q-learning from a dataset (offline): expectile V, AWR actor; discrete and continuous"
    )
    config_class = IQLConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.iql.tf_policy:IQLTFPolicy",
        "torch": "rlgear.plugins.algorithms.iql.torch_policy:IQLTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous"})

    def make_batches(self) -> Batches:
        """One-step transitions with ``discounts`` (gamma, 0 after a terminal): Q's TD target."""
        return self.transition_batches(self.config.training.gamma)
