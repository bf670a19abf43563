"""PG's loss on the torch backend.

The on-policy SGD family's loop (``MinibatchSGD``) runs the config's schedule: one
gradient step on the whole batch, as REINFORCE does (the batch is
on-policy only for that one step).
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import TorchPolicy, masked_mean, normalize_advantages
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class PGTorchPolicy(MinibatchSGD, TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        # Advantages are constants (computed at sampling time), so the policy
        # term sends no gradient into the baseline.
        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        policy_loss = -masked_mean(logp * advantages, mask)
        entropy = masked_mean(dist.entropy(), mask)
        loss = policy_loss - training.entropy_coeff * entropy
        stats = {"policy_loss": policy_loss.detach(), "entropy": entropy.detach()}
        if training.use_baseline:
            vf_loss = 0.5 * masked_mean((values - batch[SB.VALUE_TARGETS]) ** 2, mask)
            loss = loss + training.vf_loss_coeff * vf_loss
            stats["vf_loss"] = vf_loss.detach()
        return loss, stats
