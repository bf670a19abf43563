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
:class:`rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`; epsilon in the results and the
periodic target update are the family's
:class:`~rlgear.plugins.families.replay.q_learning.QLearningTrainer`.
"""

from __future__ import annotations

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.plugins.families.replay.q_learning import QLearningTrainer

# The Q-network's shape and the C51 support are fixed when a policy is built: reset_config() refuses them.
NETWORK_KEYS = ("dueling", "num_atoms", "v_min", "v_max", "noisy")


class DQN(QLearningTrainer):
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
