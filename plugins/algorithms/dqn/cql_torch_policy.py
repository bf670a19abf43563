"""Discrete CQL on the torch backend: DQN's TD loss plus the conservative penalty.

Kumar et al. 2020, eq. 4 with the CQL(H) regulariser (the soft maximum over actions), as d3rlpy's
DiscreteCQL and CORL write it for discrete actions::

    penalty = mean_rows( logsumexp_a Q(s, a) - Q(s, a_data) )     (a over the allowed actions)
    loss    = DQN's TD loss + min_q_weight * penalty
"""

from __future__ import annotations

import torch

from rlgear.plugins.algorithms.dqn.torch_policy import DQNTorchPolicy
from rlgear.sample_batch import SampleBatch as SB


class DiscreteCQLTorchPolicy(DQNTorchPolicy):
    """DQN's Q-network, target network and weight names; the loss adds :meth:`conservative_penalty`."""

    loss_columns = (*DQNTorchPolicy.loss_columns, SB.ACTION_MASK)

    def conservative_penalty(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``mean(logsumexp_a Q(s, a) - Q(s, a_data))`` over the rows, masked actions left out."""
        q_values, _ = self.model(batch[SB.OBS])
        q_taken = q_values.gather(1, batch[SB.ACTIONS].long().unsqueeze(1)).squeeze(1)
        mask = batch.get(SB.ACTION_MASK)
        if mask is not None:
            q_values = q_values.masked_fill(~mask.bool(), float("-inf"))
        return (torch.logsumexp(q_values, dim=1) - q_taken).mean()

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        td_loss, stats = super().loss(batch)
        penalty = self.conservative_penalty(batch)
        loss = td_loss + self.config.training.min_q_weight * penalty
        return loss, {**stats, "td_loss": td_loss.detach(), "cql_penalty": penalty.detach()}
