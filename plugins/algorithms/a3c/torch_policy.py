"""A3C's loss on the torch backend: policy gradient with advantages, value loss, entropy bonus.

Workers call ``compute_gradients`` (the base class) on their own batch; the
learner calls ``apply_gradients``. ``learn_on_batch`` (one step on the whole
batch) is what the learner would do with the same batch itself.
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import TorchPolicy
from rlgear.sample_batch import SampleBatch as SB


class A3CTorchPolicy(TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        dist_inputs, values = self.model(batch[SB.OBS])
        dist = self.dist_class(dist_inputs)
        logp = dist.logp(batch[SB.ACTIONS])
        policy_loss = -(logp * batch[SB.ADVANTAGES]).mean()
        vf_loss = 0.5 * ((values - batch[SB.VALUE_TARGETS]) ** 2).mean()
        entropy = dist.entropy().mean()
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy
        return loss, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
        }
