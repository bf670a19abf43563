"""What every epsilon-greedy Q-learner of the replay family adds to the replay loop: periodic target
updates (counted in env steps, checkpointed), epsilon in the results, and a ``reset_config`` that
refuses keys the networks were built with.

Why a family class: dqn (and its qrdqn/iqn/rainbow subclasses) and qmix/vdn share this bookkeeping
exactly; only what "update the targets" means differs (:meth:`QLearningTrainer.update_targets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer


class QLearningTrainer(ReplayTrainer):
    """The replay loop plus target-network updates every ``target_network_update_freq`` env steps."""

    #: The training keys that shape the networks: reset_config() refuses to change them.
    network_keys: tuple[str, ...] = ()

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.last_target_update = 0  # timesteps_total when the targets were last updated
        self.num_target_updates = 0

    def training_step(self) -> dict[str, float]:
        stats = super().training_step()
        stats.update(
            self.learner_stats({f"{pid}/epsilon": p.epsilon() for pid, p in self.policy_map.items()})
        )
        stats["num_target_updates"] = float(self.num_target_updates)
        return stats

    def update_targets(self) -> None:
        """Move each trained policy's target network towards its online one, with its own ``tau``
        (multiagent overrides); a copy when ``tau`` is 1."""
        for pid in self.policies_to_train:
            policy = self.policy_map[pid]
            policy.update_target(policy.config.training.tau)

    def after_learning(self, timesteps: int) -> dict[str, float]:
        """Every ``target_network_update_freq`` env steps, :meth:`update_targets`."""
        if timesteps - self.last_target_update >= self.config.training.target_network_update_freq:
            self.update_targets()
            self.last_target_update = timesteps
            self.num_target_updates += 1
        return {}

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`ReplayTrainer.reset_config`; False also when a network would have to change
        (:attr:`network_keys`)."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in self.network_keys):
            return False
        return super().reset_config(new_config)

    # --- checkpoints -----------------------------------------------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            "last_target_update": self.last_target_update,
            "num_target_updates": self.num_target_updates,
            **super().get_algorithm_state(),
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
        self.num_target_updates = int(state.get("num_target_updates", 0))
        super().set_algorithm_state(state)
