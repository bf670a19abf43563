"""Discrete CQL's trainer: offline minibatches of one-step transitions, a periodic target update.

Kumar et al. 2020 ("Conservative Q-Learning for Offline Reinforcement Learning", sec. 3.2 and
appendix F for discrete actions): DQN learns from the dataset's transitions with a penalty that
pushes down the soft maximum of Q over all actions and up the Q of the action the data took, so
actions the data never took are not over-valued. The loss is in ``cql_torch_policy`` /
``cql_tf_policy``, subclasses of DQN's policies (same network, same weight names: a checkpoint's
weights load into ``dqn`` to continue online).
"""

from __future__ import annotations

from typing import Any

from rlgear.plugins.algorithms.dqn.cql_config import DiscreteCQLConfig
from rlgear.plugins.families.offline import OfflineTrainer
from rlgear.plugins.families.offline.batches import Batches


class DiscreteCQL(OfflineTrainer):
    name = "discrete_cql"
    description = "Conservative Q-learning from a dataset (offline) on DQN's Q-network; discrete actions"
    config_class = DiscreteCQLConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.dqn.cql_tf_policy:DiscreteCQLTFPolicy",
        "torch": "rlgear.plugins.algorithms.dqn.cql_torch_policy:DiscreteCQLTorchPolicy",
    }
    action_spaces = frozenset({"discrete"})

    def setup(self, config: Any) -> None:
        #: Target-network updates so far (``learner/num_target_updates``).
        self.num_target_updates = 0
        super().setup(config)

    def make_batches(self) -> Batches:
        """One-step transitions with ``discounts`` (gamma, 0 after a terminal): DQN's TD target."""
        return self.transition_batches(self.config.training.gamma)

    def after_gradient_step(self) -> None:
        """Every ``target_network_update_freq`` gradient steps, move the target network (Mnih et al. 2015)."""
        training = self.config.training
        if self.num_gradient_steps % training.target_network_update_freq == 0:
            self.learner.policy.update_target(training.tau)
            self.num_target_updates += 1

    def training_step(self) -> dict[str, float]:
        return {**super().training_step(), "num_target_updates": float(self.num_target_updates)}

    def get_algorithm_state(self) -> dict[str, Any]:
        return {**super().get_algorithm_state(), "num_target_updates": self.num_target_updates}

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.num_target_updates = int(state.get("num_target_updates", 0))
        super().set_algorithm_state(state)
