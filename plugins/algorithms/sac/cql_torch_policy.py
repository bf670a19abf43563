"""CQL (continuous) on the torch backend: SAC's three losses plus the conservative penalty.

Per critic ``k``, with ``n = num_sampled_actions`` actions of each kind per row, all evaluated at
``s`` (Kumar et al. 2020, appendix F; as RLlib's and CORL's CQL)::

    a_unif ~ U[-1, 1]^|A|                (density 0.5^|A|)
    a_s  ~ pi(.|s),  a_s' ~ pi(.|s')     (sampled without gradient to the actor)
    x    = [Q_k(s, a_unif) - log 0.5^|A|,  Q_k(s, a_s') - log pi(a_s'|s'),  Q_k(s, a_s) - log pi(a_s|s)]
    penalty_k = mean_rows( T * logsumexp_i(x_i / T) - Q_k(s, a_data) )        (T: temperature)

    loss = SAC's loss + min_q_weight * sum_k penalty_k

The uniform actions are ``erf(z / sqrt 2)`` of standard-normal draws ``z`` (exactly uniform on
``(-1, 1)``), so both backends take all their draws as standard normals from one generator.
"""

from __future__ import annotations

import math

import torch

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.sac.torch_policy import SACTorchPolicy
from rlgear.sample_batch import SampleBatch as SB


class CQLTorchPolicy(SACTorchPolicy):
    """SAC's actor, twin critics, targets and temperature; the critics' loss adds :meth:`conservative_penalty`."""

    def conservative_penalty(
        self, batch: dict[str, torch.Tensor], noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum_k penalty_k, mean soft maximum)`` from ``noise`` ``[B, 3n, |A|]`` (uniform, at s, at s')."""
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        rows, n, dims = obs.shape[0], training.num_sampled_actions, self.num_actions
        uniform, at_obs, at_next = (part.reshape(rows * n, dims) for part in noise.split(n, dim=1))
        obs_rep, next_rep = obs.repeat_interleave(n, dim=0), next_obs.repeat_interleave(n, dim=0)
        with torch.no_grad():
            actions_s, logp_s = self.squashed_sample(obs_rep, at_obs)
            actions_next, logp_next = self.squashed_sample(next_rep, at_next)
        random_actions = torch.erf(uniform / math.sqrt(2.0))
        members = (
            self.q_values(obs_rep, random_actions) - dims * math.log(0.5),
            self.q_values(obs_rep, actions_next) - logp_next,
            self.q_values(obs_rep, actions_s) - logp_s,
        )  # each [K, B * n]
        x = torch.cat([m.reshape(-1, rows, n) for m in members], dim=2)  # [K, B, 3n]
        soft_max = training.temperature * torch.logsumexp(x / training.temperature, dim=2)  # [K, B]
        q_data = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))  # [K, B]
        return (soft_max - q_data).mean(dim=1).sum(), soft_max.detach().mean()

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        sac_loss, stats, td_errors = super().loss(batch, update_actor)
        n = self.config.training.num_sampled_actions
        noise = self.sample_noise((batch[SB.OBS].shape[0], 3 * n, self.num_actions))
        self.last_noise = (*self.last_noise, noise)
        penalty, soft_max = self.conservative_penalty(batch, noise)
        loss = sac_loss + self.config.training.min_q_weight * penalty
        return loss, {**stats, "cql_penalty": penalty.detach(), "cql_logsumexp_q": soft_max}, td_errors
