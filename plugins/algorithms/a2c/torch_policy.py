"""A2C's loss on the torch backend.

The on-policy SGD family's loop (``MinibatchSGD``) runs the config's schedule: one
gradient step on the whole batch (with ``grad_clip``).
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import TorchPolicy, actor_critic_loss, normalize_advantages
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class A2CTorchPolicy(MinibatchSGD, TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        return actor_critic_loss(
            self.action_distribution(dist_inputs, batch),
            batch[SB.ACTIONS],
            advantages,
            values,
            batch[SB.VALUE_TARGETS],
            training.vf_loss_coeff,
            training.entropy_coeff,
            mask,
        )
