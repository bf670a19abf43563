"""IQL on the torch backend: the actor and ``V`` of the catalog model, twin critics, three losses.

Per minibatch (Kostrikov et al. 2021, eqs. 5-7 and Algorithm 1, as CORL's ``iql.py``)::

    q' = min_k Q'_k(s, a)                          (target critics, no gradient)
    u  = q' - V(s)
    value_loss  = mean(|expectile - 1(u < 0)| * u^2)
    y  = r + discount * V(s')                      (discount: gamma, 0 after a terminal; no gradient)
    critic_loss = 0.5 * sum_k mean((Q_k(s, a) - y)^2)
    w  = min(exp(beta * u), max_weight)            (no gradient)
    actor_loss  = -mean(w * log pi(a|s))
    loss = value_loss + critic_loss + actor_loss

Each loss reaches only its own parameters (V's, the critics', the actor's), so one Adam step on
the sum is the three separate steps. Discrete actions: each critic outputs ``Q(s, .)`` and the
dataset action's entry is taken; continuous: the critics read ``[s, a]`` (env actions as
recorded). The actor is a categorical or a diagonal Gaussian (state-independent log std), greedy
at evaluation. Weights: ``policy/...``, ``value/...`` (the catalog model's names), ``q/...``
(critics stacked ``[2, in, out]``); the target critics are the target copy of the model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.backends.torch import StackedMLP, TargetModel, TorchPolicy
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete, Space, flat_dim

NUM_CRITICS = 2


class IQLModel(nn.Module):
    """The catalog actor-value model (acting reads it alone) beside the stacked critics."""

    def __init__(self, actor_value: nn.Module, critic: StackedMLP):
        super().__init__()
        self.actor_value = actor_value
        self.critic = critic

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor_value(obs)

    def weight_names(self) -> dict[str, str]:
        names = {f"actor_value.{k}": v for k, v in self.actor_value.weight_names().items()}
        names.update({f"critic.{k}": v for k, v in self.critic.weight_names("q").items()})
        return names


class IQLTorchPolicy(TargetNetworkState, TargetModel, TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.NEXT_OBS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete | Box):
            raise TypeError(f"IQL needs Discrete or Box actions, got {action_space!r}")
        super().__init__(observation_space, action_space, config)
        self.make_target_model()

    def make_model(self) -> nn.Module:
        if self.config.model.custom:
            raise TypeError(
                "IQLTorchPolicy builds its own critics beside the catalog model; model.custom is not used"
            )
        actor_value = super().make_model()
        sizes = list(self.config.model.hidden_sizes)
        obs_dim = flat_dim(self.observation_space)
        if isinstance(self.action_space, Discrete):
            critic = StackedMLP(
                NUM_CRITICS, obs_dim, sizes, self.action_space.n, self.config.model.activation
            )
        else:
            in_dim = obs_dim + self.action_space.size
            critic = StackedMLP(NUM_CRITICS, in_dim, sizes, 1, self.config.model.activation)
        return IQLModel(actor_value, critic)

    def host_tensors(self, batch: SB, columns) -> dict[str, torch.Tensor]:
        tensors = super().host_tensors(batch, [c for c in columns if c != SB.NEXT_OBS])
        if SB.NEXT_OBS in batch:  # flattened (one-hot) like obs
            tensors[SB.NEXT_OBS] = self.preprocess(batch[SB.NEXT_OBS])
        return tensors

    def critic_values(self, critic: StackedMLP, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``[2, B]``: each critic's ``Q(s, a)`` of the dataset's actions."""
        if isinstance(self.action_space, Discrete):
            q_all = critic(obs)  # [2, B, n]
            index = actions.long().view(1, -1, 1).expand(q_all.shape[0], -1, 1)
            return q_all.gather(2, index).squeeze(2)
        flat_actions = actions.to(obs.dtype).reshape(obs.shape[0], -1)
        return critic(torch.cat([obs, flat_actions], dim=-1)).squeeze(-1)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        obs, actions = batch[SB.OBS], batch[SB.ACTIONS]
        dist_inputs, values = self.model(obs)
        with torch.no_grad():
            target_q = self.critic_values(self.target_model.critic, obs, actions).min(dim=0).values
            _, next_values = self.model(batch[SB.NEXT_OBS])
            targets = batch[SB.REWARDS].to(values.dtype) + batch[SB.DISCOUNTS].to(values.dtype) * next_values
        u = target_q - values
        expectile_weight = torch.abs(training.expectile - (u < 0).to(u.dtype))
        value_loss = (expectile_weight * u.square()).mean()
        q = self.critic_values(self.model.critic, obs, actions)
        critic_loss = 0.5 * (q - targets).square().mean(dim=1).sum()
        weights = torch.exp(training.beta * u.detach()).clamp(max=training.max_weight)
        logp = self.action_distribution(dist_inputs, batch).logp(actions)
        actor_loss = -(weights * logp).mean()
        loss = value_loss + critic_loss + actor_loss
        return loss, {
            "value_loss": value_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "mean_q": q.detach().mean(),
            "mean_v": values.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_advantage_weight": weights.mean(),
        }

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step, then the Polyak update of the target critics (``training.tau``)."""
        stats = super().learn_on_batch(batch)
        self.update_target(self.config.training.tau)
        return stats
