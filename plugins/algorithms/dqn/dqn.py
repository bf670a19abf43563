"""DQN's training step, written once for every backend.

Per training step (Mnih et al. 2015, Algorithm 1, with the Rainbow switches of
Hessel et al. 2018 as config options):
  1. act epsilon-greedily (with ``noisy``: greedily on freshly noised weights) in the envs for ``env_steps_per_training_step`` env
     steps and store the (n-step) transitions in the replay buffer;
  2. once ``learning_starts`` env steps were sampled, take
     ``round(sampled steps x training_intensity / train_batch_size)`` gradient
     steps, each on a minibatch replayed uniformly or by priority (with
     importance weights, beta annealed), then set the sampled rows' priorities
     to their new |TD errors|;
  3. every ``target_network_update_freq`` env steps, move the target network
     towards the online one (a copy when ``tau`` is 1);
  4. send the new weights to the rollout workers.

Steps 1, 2 and 4, the replay buffer and its checkpointing are the shared
:class:`rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`; DQN adds epsilon and the
periodic target update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer

# The Q-network's shape and the C51 support are fixed when a policy is built: reset_config() refuses them.
NETWORK_KEYS = ("dueling", "num_atoms", "v_min", "v_max", "noisy")


class DQN(ReplayTrainer):
    name = "dqn"
    description = (
        "Deep Q-Network with switches for double Q, dueling heads, n-step returns, "
        "prioritized replay, distributional C51 and noisy nets (Rainbow); discrete actions"
    )
    config_class = DQNConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.dqn.tf_policy:DQNTFPolicy",
        "torch": "rlgear.plugins.algorithms.dqn.torch_policy:DQNTorchPolicy",
    }
    action_spaces = frozenset({"discrete"})
    multi_agent = True  # a replay buffer per policy (ReplayTrainer)
    #: The training keys that shape the Q-network: reset_config() refuses to change them.
    network_keys: tuple[str, ...] = NETWORK_KEYS

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Noisy nets replace the catalog Q-network's dense layers: a ``model.custom`` network has none."""
        super().check_config(config)
        if config.training.noisy and config.model.custom:
            raise config.fail(
                "training.noisy",
                f"noisy layers replace the dense layers of dqn's own Q-network; the custom model "
                f"{config.model.custom} has to add its own (set training.noisy: false)",
            )

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.last_target_update = 0  # timesteps_total when the target network was last updated
        self.num_target_updates = 0

    def training_step(self) -> dict[str, float]:
        stats = super().training_step()
        stats.update(
            self.learner_stats({f"{pid}/epsilon": p.epsilon() for pid, p in self.policy_map.items()})
        )
        stats["num_target_updates"] = float(self.num_target_updates)
        return stats

    def after_learning(self, timesteps: int) -> dict[str, float]:
        """Every ``target_network_update_freq`` env steps, move each trained policy's target network towards its online one."""
        training = self.config.training
        if timesteps - self.last_target_update >= training.target_network_update_freq:
            for pid in self.policies_to_train:  # each with its own tau (multiagent overrides)
                policy = self.policy_map[pid]
                policy.update_target(policy.config.training.tau)
            self.last_target_update = timesteps
            self.num_target_updates += 1
        return {}

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`ReplayTrainer.reset_config`; False also when the Q-network would have to change."""
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
