"""CQL's trainer (continuous actions): SAC's update on offline minibatches of one-step transitions.

Kumar et al. 2020 ("Conservative Q-Learning for Offline Reinforcement Learning"), CQL(H) on SAC as
their appendix F and the reference implementations (RLlib's CQL, CORL's ``cql.py``) train it: the
critics' loss adds a penalty that lowers a soft maximum of Q over sampled actions and raises Q of
the dataset's actions. The loss is in ``cql_torch_policy`` / ``cql_tf_policy``, subclasses of SAC's
policies (same weights and names, so a checkpoint's weights load into ``sac``); SAC's policy moves
its target critics itself after every step.
"""

from __future__ import annotations

from rlgear.plugins.algorithms.sac.cql_config import CQLConfig
from rlgear.plugins.families.offline import OfflineTrainer
from rlgear.plugins.families.offline.batches import Batches


class CQL(OfflineTrainer):
    name = "cql"
    description = "Conservative Q-learning from a dataset (offline) on SAC; continuous (Box) actions"
    config_class = CQLConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.sac.cql_tf_policy:CQLTFPolicy",
        "torch": "rlgear.plugins.algorithms.sac.cql_torch_policy:CQLTorchPolicy",
    }
    action_spaces = frozenset({"continuous"})

    def make_batches(self) -> Batches:
        """One-step transitions with ``discounts`` (gamma, 0 after a terminal): SAC's critic target."""
        return self.transition_batches(self.config.training.gamma)
