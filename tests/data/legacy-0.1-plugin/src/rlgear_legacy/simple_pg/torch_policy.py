"""simple_pg's loss on the torch backend.

``TorchPolicy`` builds the model (``model:`` section of the config: policy and
value MLPs), acts, runs the optimizer and moves weights and state; this class
only says which batch columns the loss reads and what the loss is. With no
``num_sgd_iter`` or ``sgd_minibatch_size`` in the config, the base class takes
one gradient step on the whole batch, as REINFORCE does.
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import TorchPolicy
from rlgear.sample_batch import SampleBatch as SB


class SimplePGTorchPolicy(TorchPolicy):
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
