"""Ape-X DQN (Horgan et al. 2018): DQN's policies, loss and target updates on distributed prioritized replay.

The training step is :class:`rlgear.plugins.families.replay.apex.ApexTrainer`; this module only names the
combination, its defaults and how a worker's Ape-X epsilon reaches DQN's exploration.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.plugins.algorithms.dqn.dqn import DQN
from rlgear.plugins.families.replay.apex import ApexTrainer
from rlgear.plugins.families.replay.apex_config import ApexConfig


@dataclass
class ApexDQNConfig(ApexConfig, DQNConfig):
    """DQN's keys plus Ape-X's; n-step 3 as in Horgan et al. 2018. Each worker's epsilon is fixed
    (Ape-X's schedule over workers), so ``epsilon_*`` apply only to the driver's own policy."""

    n_step: int = doc(
        "Bootstrap after n rewards (Horgan et al. 2018 use 3). Windows are cut at the end of a sampled "
        "fragment and at episode ends.",
        3,
    )


class ApexDQN(ApexTrainer, DQN):
    name = "apex"
    description = (
        "Ape-X DQN: Ray rollout workers with per-worker epsilons feed sharded prioritized replay "
        "actors; discrete actions"
    )
    config_class = ApexDQNConfig
    multi_agent = False

    def worker_exploration(self, epsilon: float) -> dict[str, float]:
        return {"epsilon_initial": epsilon, "epsilon_final": epsilon}

    def training_step(self) -> dict[str, float]:
        stats = super().training_step()
        stats["num_target_updates"] = float(self.num_target_updates)
        return stats
