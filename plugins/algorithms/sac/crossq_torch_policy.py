"""CrossQ on the torch backend: SAC's actor and temperature, batch-normalized critics, no targets.

Bhatt et al. 2024 (section 3 and their algorithm 1; sb3-contrib's and sbx's ``CrossQ.train``), per
gradient step, with ``a'`` sampled from the actor at ``s'`` (no gradient)::

    (Q_k(s, a), Q_k(s', a')) = critic_k([(s, a); (s', a')])     ONE pass over the 2B rows in training
                                                                 mode: every batch-norm layer normalizes
                                                                 with the statistics of all 2B rows
    y = r + discount (min_k Q_k(s', a') - alpha log pi(a'|s'))  (no gradient through y)
    critic loss = 0.5 sum_k mean((Q_k(s, a) - y)^2)              (SAC's)
    running stats <- running + momentum (batch stats - running)  (per layer, per critic)
    every policy_delay-th step:
        actor loss = mean(alpha log pi(a|s) - min_k Q_k(s, a)),  the critics in evaluation mode
                     (running statistics, as just updated) and held fixed
        alpha loss = SAC's

The critics are :class:`BatchNormCritics`: each layer is ``batch norm -> dense`` with the
activation between (batch norm on the input too, and none on the output), as sb3-contrib's
critic; the batch statistics use the unbiased variance for both the normalization and the
running average, as its ``BatchRenorm`` does during its warm-up. Plain batch normalization is
what is built: it is exactly sb3-contrib's BatchRenorm for its first ``renorm_warmup_steps``
(100k) gradient steps, longer than every run this project tests; the renormalization that
follows (r, d clipped to 3 and 5) is not built.

Acting never reads the critics: the actor (SAC's, no batch norm) acts through the numpy twin,
so the critics' modes matter only in the loss. The running statistics are weights that the
optimizer does not move (``requires_grad`` off): they travel with ``get_weights`` (checkpoints,
syncing) under ``q/bn_<i>/running_mean`` and ``q/bn_<i>/running_var``; the learned affine
parameters are ``q/bn_<i>/scale`` and ``q/bn_<i>/offset``; all ``[K, width]``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import nn

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.sac.crossq_config import refuse_data_parallel
from rlgear.plugins.algorithms.sac.torch_policy import SACTorchPolicy
from rlgear.plugins.backends.torch.models import ACTIVATIONS
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, actor_mlp
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim


class BatchNormCritics(nn.Module):
    """``members`` critics of one shape as one module: ``batch norm -> dense`` per layer, batched.

    Dense kernels ``[K, in, out]`` (``nn.Linear``'s init, member by member) as ``StackedMLP``;
    per batch-norm layer ``scale`` (ones), ``offset`` (zeros), ``running_mean`` (zeros) and
    ``running_var`` (ones), each ``[K, width]``.
    """

    def __init__(
        self, members: int, in_dim: int, hidden_sizes: list[int], activation: str, momentum: float, eps: float
    ):
        super().__init__()
        self.members, self.momentum, self.eps = members, momentum, eps
        self.activation = ACTIVATIONS[activation]()
        sizes = [in_dim, *hidden_sizes, 1]
        self.kernels, self.biases = nn.ParameterList(), nn.ParameterList()
        self.scales, self.offsets = nn.ParameterList(), nn.ParameterList()
        self.running_means, self.running_vars = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            self.kernels.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, fan_out).uniform_(-bound, bound)))
            self.scales.append(nn.Parameter(torch.ones(members, fan_in)))
            self.offsets.append(nn.Parameter(torch.zeros(members, fan_in)))
            self.running_means.append(nn.Parameter(torch.zeros(members, fan_in), requires_grad=False))
            self.running_vars.append(nn.Parameter(torch.ones(members, fan_in), requires_grad=False))

    def parameter_list(self) -> list[torch.Tensor]:
        """The learned ones: kernels, biases, scales, offsets (four groups of one per layer)."""
        return [*self.kernels, *self.biases, *self.scales, *self.offsets]

    def forward(
        self, x: torch.Tensor, params: list[torch.Tensor] | None = None, training: bool = False
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """``([K, rows, 1], batch statistics)`` from inputs ``[rows, in]``.

        ``training``: every batch norm uses the rows' mean and unbiased variance (returned per
        layer, ``[K, width]`` each, for :meth:`update_running_stats`); else the running ones.
        ``params`` (as :meth:`parameter_list`) stand in for the learned weights.
        """
        layers = len(self.kernels)
        params = self.parameter_list() if params is None else params
        kernels, biases = params[:layers], params[layers : 2 * layers]
        scales, offsets = params[2 * layers : 3 * layers], params[3 * layers :]
        x = x.expand(self.members, *x.shape)
        stats = []
        for i in range(layers):
            if training:
                # two passes (mean, then the squared deviations) rather than Tensor.var: torch's CPU
                # var over the middle dimension of [K, rows, width] is about 2.5x slower forward and
                # backward, and was 18% of a CrossQ learning step on Pendulum
                mean = x.mean(dim=1, keepdim=True)
                centred = x - mean
                var = (centred * centred).sum(dim=1, keepdim=True) / (x.shape[1] - 1)
                stats.append((mean.squeeze(1).detach(), var.squeeze(1).detach()))
            else:
                mean, var = self.running_means[i][:, None], self.running_vars[i][:, None]
                centred = x - mean
            # offset + centred * (scale / sqrt(var + eps)): one pass over [K, rows, width]
            x = torch.addcmul(offsets[i][:, None], centred, torch.rsqrt(var + self.eps) * scales[i][:, None])
            x = torch.baddbmm(biases[i].unsqueeze(1), x, kernels[i])
            if i < layers - 1:
                x = self.activation(x)
        return x, stats

    @torch.no_grad()
    def update_running_stats(self, stats: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """``running <- running + momentum (batch - running)``; a layer whose batch statistics are not
        finite keeps its running ones (the step is skipped then too)."""
        for (mean, var), running_mean, running_var in zip(
            stats, self.running_means, self.running_vars, strict=True
        ):
            for batch, running in ((mean, running_mean), (var, running_var)):
                moved = running + self.momentum * (batch - running)
                running.copy_(torch.where(torch.isfinite(moved), moved, running))

    def weight_names(self, scope: str) -> dict[str, str]:
        names = {}
        last = len(self.kernels) - 1
        for i in range(len(self.kernels)):
            layer = "output" if i == last else f"hidden_{i}"
            names[f"kernels.{i}"] = f"{scope}/{layer}/kernel"
            names[f"biases.{i}"] = f"{scope}/{layer}/bias"
            for attr, key in (
                ("scales", "scale"),
                ("offsets", "offset"),
                ("running_means", "running_mean"),
                ("running_vars", "running_var"),
            ):
                names[f"{attr}.{i}"] = f"{scope}/bn_{i}/{key}"
        return names


class CrossQTorchPolicy(SACTorchPolicy):
    """SAC's actor and temperature; twin batch-normalized critics without target copies."""

    target_parts = ()

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        refuse_data_parallel(config)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> nn.Module:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim = flat_dim(self.observation_space)
        actor = actor_mlp(
            obs_dim, list(model_config.hidden_sizes), self.actor_outputs(), model_config.activation
        )
        critic = BatchNormCritics(
            self.num_critics, obs_dim + self.num_actions, list(training.critic_hidden_sizes),
            model_config.activation, training.batch_norm_momentum, training.batch_norm_eps,
        )  # fmt: skip
        model = ActorCritics(actor, critic, self.initial_log_alpha())
        model.log_alpha.requires_grad_(bool(training.tune_alpha))  # before the optimizer exists
        return model

    def update_actor_now(self) -> bool:
        """The actor and alpha learn every ``policy_delay``-th gradient step (the critics every step)."""
        return (self.num_grad_updates + 1) % self.config.training.policy_delay == 0

    def learn_on_batch(self, batch: Any) -> dict[str, float]:
        """The base class's step; only here does the joint pass move the running statistics (not in
        :meth:`compute_td_errors`, which runs the same loss without learning)."""
        self._moves_running_stats = True
        try:
            return super().learn_on_batch(batch)
        finally:
            self._moves_running_stats = False

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        rows = obs.shape[0]
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        noise = self.sample_noise((rows, self.num_actions))
        next_noise = self.sample_noise((rows, self.num_actions))
        self.last_noise = (noise, next_noise)  # the draws this step used (the loss tests read them)
        with torch.no_grad():
            next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
        joint = torch.cat(
            [
                torch.cat([obs, self.scaled_actions(batch[SB.ACTIONS])], dim=-1),
                torch.cat([next_obs, next_actions], dim=-1),
            ]
        )
        values, batch_stats = self.model.critic(joint, training=True)
        q_taken, next_q = values[..., 0].split(rows, dim=1)  # [K, B] each
        with torch.no_grad():
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_q.dtype) + batch[SB.DISCOUNTS].to(next_q.dtype) * (
                next_q.min(dim=0).values - alpha * next_logp
            )
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        if getattr(self, "_moves_running_stats", False):
            self.model.critic.update_running_stats(batch_stats)
        stats = {
            "critic_loss": loss.detach(),
            "alpha": alpha,
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        if update_actor:
            actions, logp = self.squashed_sample(obs, noise)
            frozen, _ = self.model.critic(torch.cat([obs, actions], dim=-1), self.frozen_critic)
            actor_loss = (alpha * logp - frozen[..., 0].min(dim=0).values).mean()
            alpha_loss = -(log_alpha * (logp.detach() + self.target_entropy)).mean()
            loss = loss + actor_loss + (alpha_loss if log_alpha.requires_grad else 0.0)
            stats.update(
                actor_loss=actor_loss.detach(), alpha_loss=alpha_loss.detach(), entropy=-logp.detach().mean()
            )
        return loss, stats, td_errors
