"""simple_pg's loss on the torch backend.

``TorchPolicy`` builds the model (``model:`` section of the config: policy and
value MLPs), acts, takes gradient steps (the optimizer, ``grad_clip``) and moves
weights and state. ``MinibatchSGD``, the on-policy SGD family's loop, makes
``learn_on_batch`` go over each batch as the config's ``sgd_schedule()`` says (here
one step on the whole batch, as REINFORCE does). This class only says which batch
columns the loss reads and what the loss is.
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import TorchPolicy
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class SimplePGTorchPolicy(MinibatchSGD, TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        dist_inputs, values = self.model(batch[SB.OBS])
        dist = self.dist_class(dist_inputs)
        logp = dist.logp(batch[SB.ACTIONS])
        # The advantages are constants (computed from vf_preds at sampling time),
        # so no gradient flows from the policy term into the baseline.
        policy_loss = -(logp * batch[SB.ADVANTAGES]).mean()
        vf_loss = 0.5 * ((values - batch[SB.VALUE_TARGETS]) ** 2).mean()
        loss = policy_loss + self.config.training.vf_loss_coeff * vf_loss
        return loss, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": dist.entropy().mean().detach(),  # reported only: watch it fall as the policy settles
        }
