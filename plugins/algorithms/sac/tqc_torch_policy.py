"""TQC on the torch backend: SAC's actor and temperature, quantile critics and the truncated target.

With ``K = n_critics`` critics of ``N = n_quantiles`` atoms, ``d = top_quantiles_to_drop_per_net``
and ``M = K (N - d)`` kept atoms (Kuznetsov et al. 2020, eqs. 10-13; sb3-contrib's ``TQC.train``)::

    a' = tanh(mean(s') + std(s') noise'),   Z'_k = target critic k's N atoms at (s', a')
    y  = sort(Z'_1 ... Z'_K)[:M]                        (the M smallest of the K N pooled atoms)
    y  = r + discount (y - alpha log pi(a'|s'))          [B, M], no gradient
    delta_kij = y_j - Z_k(s, a)_i,    tau_i = (2i + 1) / (2N)
    critic loss = mean over b, k, i, j of |tau_i - 1[delta < 0]| huber_1(delta)
    actor loss  = mean(alpha log pi(a|s) - mean over k, i of Z_k(s, a)_i)   (critics held fixed)
    alpha loss  = SAC's

The critic loss is a mean over critics, atoms and target atoms (sb3-contrib's
``quantile_huber_loss(..., sum_over_quantiles=False)``), so its scale does not grow with K, N or
M. Rows are weighted by prioritized replay's importance weights, and a row's ``|TD error|`` (its
priority) is ``|mean_i Z_k(s, a)_i - mean_j y_j|`` averaged over the critics.

Weights: SAC's, with ``q/output/kernel`` ``[K, hidden, N]`` and ``q/output/bias`` ``[K, N]``.
"""

from __future__ import annotations

from typing import Any

import torch

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.sac.torch_policy import SACTorchPolicy
from rlgear.plugins.backends.torch.losses import quantile_huber_loss
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class TQCTorchPolicy(SACTorchPolicy):
    """SAC's actor, temperature and target copies; ``n_critics`` critics of ``n_quantiles`` atoms."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_critics = int(config.training.n_critics)  # read by make_model()
        super().__init__(observation_space, action_space, config)

    def critic_outputs(self) -> int:
        return int(self.config.training.n_quantiles)

    def quantiles(self, obs: torch.Tensor, actions: torch.Tensor, which: str = "online") -> torch.Tensor:
        """``[K, B, N]`` atoms at ``(obs, actions)`` (actions in ``[-1, 1]``): ``online``, ``frozen``
        (no gradient to the critics) or ``target``."""
        inputs = torch.cat([obs, actions], dim=-1)
        if which == "target":
            return self.target_model["critic"](inputs)
        return self.model.critic(inputs, self.frozen_critic if which == "frozen" else None)

    def quantile_huber_loss(
        self, atoms: torch.Tensor, targets: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critic loss of ``atoms`` ``[K, B, N]`` against ``targets`` ``[B, M]``, and ``|TD error|``
        per row (see the module docstring)."""
        critics, rows, n = atoms.shape
        tau = (torch.arange(n, device=atoms.device, dtype=atoms.dtype) + 0.5) / n
        # every critic's atoms pooled per row: sum over k, i of mean_j, then the mean over k and i
        pooled = atoms.permute(1, 0, 2).reshape(rows, critics * n)
        per_row = quantile_huber_loss(pooled, targets, tau.repeat(critics), 1.0) / (critics * n)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * batch[WEIGHTS].to(per_row.dtype)
        td = (atoms.detach().mean(dim=2) - targets.mean(dim=1)).abs().mean(dim=0)
        return per_row.mean(), td

    def critic_terms(
        self, batch: dict[str, torch.Tensor], alpha: torch.Tensor, next_noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The quantile critics' loss against the truncated target (the module docstring)."""
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        rows = obs.shape[0]
        with torch.no_grad():
            next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
            pooled = self.quantiles(next_obs, next_actions, "target").permute(1, 0, 2).reshape(rows, -1)
            kept = pooled.sort(dim=1).values[:, : self.config.training.kept_atoms()]
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(kept.dtype)[:, None] + batch[SB.DISCOUNTS].to(kept.dtype)[
                :, None
            ] * (kept - alpha * next_logp[:, None])
        atoms = self.quantiles(obs, self.scaled_actions(batch[SB.ACTIONS]))
        critic_loss, td_errors = self.quantile_huber_loss(atoms, targets, batch)
        return critic_loss, td_errors, atoms, targets

    def policy_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.quantiles(obs, actions, "frozen").mean(dim=(0, 2))  # no gradient to the critics
