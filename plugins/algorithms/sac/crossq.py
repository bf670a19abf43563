"""CrossQ's trainer: SAC's (the shared replay loop); the policy has no target networks to move.

Bhatt et al. 2024 ("CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample
Efficiency and Simplicity"): SAC without target critics, whose (wider) critics normalize their
layers with batch statistics taken over the current and the next state-action pairs together, in
one forward pass; the actor and alpha learn every ``policy_delay``-th step. The loss and the
batch-normalized critics are in ``crossq_torch_policy`` / ``crossq_tf_policy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.plugins.algorithms.sac.crossq_config import CrossQConfig
from rlgear.plugins.algorithms.sac.sac import SAC

# Read once, when the policy builds its critics.
_BUILT_ONCE = ("critic_hidden_sizes", "batch_norm_momentum", "batch_norm_eps")


class CrossQ(SAC):
    name = "crossq"
    description = (
        "CrossQ: SAC's actor and temperature, batch-normalized critics without target networks "
        "(one joint pass over current and next state-actions); continuous (Box) actions"
    )
    config_class = CrossQConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.sac.crossq_torch_policy:CrossQTorchPolicy",
        "tf": "rlgear.plugins.algorithms.sac.crossq_tf_policy:CrossQTFPolicy",
    }
    action_spaces = frozenset({"continuous"})

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As SAC's; False also when the critics' widths or batch-norm settings change."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in _BUILT_ONCE):
            return False
        return super().reset_config(new_config)
