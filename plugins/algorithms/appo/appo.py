"""APPO's training step: the shared asynchronous V-trace learner plus the target network.

Per training step, what :class:`rlgear.plugins.families.vtrace.vtrace_trainer.VTraceTrainer` does (take the
finished sample requests, learn on every ``train_batch_size`` env steps queued, send weights
back), and after each learner update: once ``target_network_update_freq`` env steps were learned
on since the last target update, every trained policy moves its target network towards its
weights (``tau``) and adapts its KL coefficient (``kl_target``), as RLlib's APPO does.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.appo.config import APPOConfig
from rlgear.plugins.families.vtrace.vtrace_trainer import VTraceTrainer


class APPO(VTraceTrainer):
    name = "appo"
    description = "APPO: PPO's clipped surrogate on V-trace advantages, asynchronous sampling, target network"
    config_class = APPOConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.appo.torch_policy:APPOTorchPolicy",
        "tf": "rlgear.plugins.algorithms.appo.tf_policy:APPOTFPolicy",
    }

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.num_target_updates = 0
        self._env_steps_since_target_update = 0

    def after_learner_update(self, env_steps: int) -> dict[str, float]:
        training = self.config.training
        self._env_steps_since_target_update += env_steps
        if self._env_steps_since_target_update >= training.target_network_update_freq:
            for pid in self.policies_to_train:
                policy = self.policy_map[pid]
                policy.update_target(training.tau)
                policy.adapt_kl_coeff()
            self.num_target_updates += 1
            self._env_steps_since_target_update = 0
        return {"num_target_updates": float(self.num_target_updates)}

    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            **super().get_algorithm_state(),
            "num_target_updates": self.num_target_updates,
            "env_steps_since_target_update": self._env_steps_since_target_update,
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        super().set_algorithm_state(state)
        self.num_target_updates = int(state.get("num_target_updates", 0))
        self._env_steps_since_target_update = int(state.get("env_steps_since_target_update", 0))
