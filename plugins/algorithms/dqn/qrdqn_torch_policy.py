"""QR-DQN on the torch backend: DQN's Q-network with N outputs per action and the quantile Huber loss.

Dabney et al. 2018, eq. 10, per replayed (n-step) row, with ``theta_i`` the taken action's quantile
estimates at ``tau_i = (2i + 1) / (2N)`` and the target samples
``T theta_j = r + discount * theta'_j(s', a*)`` (``discount`` is ``gamma**k``, 0 after a terminal;
``theta'`` the target network; ``a*`` the greedy action by the mean of the quantiles, of the online
network with ``double_q``, else of the target network)::

    u_ij     = T theta_j - theta_i
    rho(u)   = |tau_i - 1{u < 0}| * L_kappa(u) / kappa      (kappa 0: |tau_i - 1{u < 0}| * |u|)
    row loss = sum_i mean_j rho(u_ij)
    loss     = mean over rows of (importance weight x row loss)

``L_kappa`` is the Huber loss with threshold ``kappa``. The per-row loss (before the importance
weight) is also each row's prioritized-replay priority: it measures how far the row's quantiles are
from its target distribution, as the |TD error| does for DQN and the cross-entropy for C51 in
Rainbow (sb3-contrib's QR-DQN has no prioritized replay to compare with).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.dqn.qrdqn_config import quantile_midpoints
from rlgear.plugins.algorithms.dqn.rainbow import zero_noise
from rlgear.plugins.algorithms.dqn.torch_policy import _ROW, DQNTorchPolicy, QNetwork
from rlgear.plugins.backends.torch import build_model, conv_encoder
from rlgear.plugins.backends.torch.export_heads import QValueHead
from rlgear.plugins.backends.torch.losses import quantile_huber_loss
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim


class _QuantileMeans(nn.Module):
    """The flat input -> ``[B, actions]`` Q-values, each the mean of its quantiles, for export."""

    def __init__(self, model: nn.Module, num_quantiles: int):
        super().__init__()
        self.model, self.num_quantiles = model, num_quantiles

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        outputs = self.model(flat)[0]
        return outputs.reshape(outputs.shape[0], -1, self.num_quantiles).mean(dim=-1)


class QRDQNTorchPolicy(DQNTorchPolicy):
    """DQN's policy (acting, target network, noise, checkpoints) with quantile outputs and loss.

    The network is DQN's ``QNetwork`` with ``num_quantiles`` outputs per action (action-major,
    ``[B, actions * N]``); dueling combines the streams per quantile, ``V_i + A_ai - mean_a A_ai``.
    """

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_quantiles = int(config.training.num_quantiles)
        #: The quantile fractions tau_i = (2i + 1) / (2N).
        self.taus = torch.from_numpy(quantile_midpoints(self.num_quantiles))
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> nn.Module:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:  # its dist_inputs are read as the quantiles, [B, actions * N]
            outputs = self.num_outputs * training.num_quantiles
            return build_model(self.observation_space, self.action_space, outputs, model_config)
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            training.dueling,
            conv_encoder(self.observation_space, model_config),
            num_atoms=training.num_quantiles,
            noisy=training.noisy,
            sigma0=training.sigma0,
        )

    def on_device(self, device: torch.device) -> None:
        super().on_device(device)
        self.taus = self.taus.to(device)

    def quantiles(self, outputs: torch.Tensor) -> torch.Tensor:
        """The model's flat outputs as quantile estimates ``[B, actions, N]``."""
        return outputs.reshape(outputs.shape[0], -1, self.num_quantiles)

    def q_values(self, outputs: torch.Tensor) -> torch.Tensor:
        """``[B, actions]``: the mean of each action's quantiles (what acting is greedy on)."""
        return self.quantiles(outputs).mean(dim=-1)

    def export_head(self, explore: bool) -> QValueHead:
        """Greedy on the quantiles' means, noisy layers at their mean weights (on a copy)."""
        if explore:
            raise explore_refused(
                "qrdqn explores epsilon-greedily on a schedule of env steps (or with the noise of its "
                "noisy layers), which an exported graph does not carry"
            )
        model = copy.deepcopy(self.model)
        if self.config.training.noisy:
            zero_noise(model.noisy_layers())
        return QValueHead(_QuantileMeans(model, self.num_quantiles), self.action_space.n)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        if training.double_q:  # one online pass over obs and next_obs: it also picks the next action
            both, _ = self.model(torch.cat([obs, next_obs]))
            outputs, next_online = both[: len(obs)], both[len(obs) :].detach()
        else:
            outputs, _ = self.model(obs)
        rows = torch.arange(len(obs), device=obs.device)
        taken = self.quantiles(outputs)[rows, batch[SB.ACTIONS].long()]  # [B, N]
        with torch.no_grad():
            next_quantiles = self.quantiles(self.target_model(next_obs)[0])  # [B, actions, N]
            # Double Q: the online network's mean picks the next action; else the target's.
            chooser = self.q_values(next_online) if training.double_q else next_quantiles.mean(dim=-1)
            next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs
            if next_mask is not None:
                chooser = chooser.masked_fill(~next_mask, float("-inf"))
            next_actions = chooser.argmax(dim=1)
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            rewards = batch[SB.REWARDS].to(taken.dtype)[:, None]
            discounts = batch[SB.DISCOUNTS].to(taken.dtype)[:, None]
            targets = rewards + discounts * next_quantiles[rows, next_actions]  # [B, N]
        return self.weighted_quantile_loss(taken, targets, self.taus, batch)

    def weighted_quantile_loss(
        self, taken: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The quantile Huber loss of each row, weighted by prioritized replay's importance weights and
        averaged; the unweighted row loss is the row's new priority (iqn shares this with qrdqn)."""
        row_loss = quantile_huber_loss(taken, targets, taus, float(self.config.training.kappa))
        per_row = row_loss
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * batch[WEIGHTS].to(per_row.dtype)
        loss = per_row.mean()
        row_loss = row_loss.detach()
        self.td_errors[batch[_ROW].cpu().numpy()] = row_loss.cpu().numpy()  # the priority
        return loss, {
            "mean_q": taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_quantile_loss": row_loss.mean(),
        }
