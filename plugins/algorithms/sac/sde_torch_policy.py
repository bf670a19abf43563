"""SAC with gSDE exploration on the torch backend (Raffin et al. 2021; Stable-Baselines3's SAC with
``use_sde``): see :mod:`rlgear.plugins.families.gsde`.

The actor outputs the means only (``policy/output``, ``|A|`` wide); its standard deviation is
state-dependent, ``std_k(s) = sqrt(sum_j z_j(s)^2 sigma_jk^2 + 1e-6)``, with ``z(s)`` the actor's
last hidden features (detached) and ``sigma = exp(policy/sde_log_std)`` ``[F, |A|]`` (``[F, 1]``
without ``full_std``; expln with ``use_expln``). A sample is ``u = mean(s) + z(s)^T theta``,
``a = tanh(u)``, ``theta = sigma * eps`` (reparameterised, so ``sigma`` learns through it and
through ``log pi``); ``log pi(a|s)`` is the Gaussian ``N(mean(s), std(s))``'s minus the tanh
correction, as SAC's. Each gradient step draws one ``eps`` ``[F, |A|]`` for every row, at ``s`` and
at ``s'`` (SB3 resets the actor's noise once per gradient step), kept in :attr:`sde_eps`.

Acting: before ``learning_starts`` uniform actions unless ``use_sde_at_warmup``; then
``tanh(mean + theta_env^T z)`` with per-env matrices redrawn every ``sde_sample_freq`` steps of the
env (``-1``: when the weights change, once per training step); greedy ``tanh(mean)``. Unlike SB3,
the mean is not clipped to [-2, 2] by a hardtanh.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlgear.plugins.algorithms.sac.sde import SDETwinActing
from rlgear.plugins.algorithms.sac.torch_policy import _HALF_LOG_2PI, _LOG_2, SACTorchPolicy
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, StackedMLP, actor_mlp
from rlgear.plugins.families.gsde import SDE_EPSILON
from rlgear.spaces import Space, flat_dim


class SDEActorCritics(ActorCritics):
    """SAC's actor (means only), critics and ``log_alpha``, plus gSDE's ``policy/sde_log_std``."""

    def __init__(self, actor: nn.Sequential, critic: StackedMLP, log_alpha: float, sde_log_std: torch.Tensor):
        super().__init__(actor, critic, log_alpha)
        self.sde_log_std = nn.Parameter(sde_log_std)

    def weight_names(self) -> dict[str, str]:
        return {**super().weight_names(), "sde_log_std": "policy/sde_log_std"}


class SDESACTorchPolicy(SDETwinActing, SACTorchPolicy):
    """SAC with ``training.use_sde`` (module docstring); built by ``SACTorchPolicy`` itself."""

    gaussian_actor = False  # the actor's output is the means; the std is gSDE's
    builds_sde = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.sde_init(config)
        self.sde_eps: torch.Tensor | None = None

    def acting_observations(self, observations: Any) -> np.ndarray:
        return self.flat_observations(observations)

    def make_model(self) -> nn.Module:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim, sizes = flat_dim(self.observation_space), list(model_config.hidden_sizes)
        actor = actor_mlp(obs_dim, sizes, self.num_actions, model_config.activation)
        critic = StackedMLP(self.num_critics, obs_dim + self.num_actions, sizes, 1, model_config.activation)
        width = self.num_actions if training.full_std else 1
        log_std = torch.full((sizes[-1], width), float(training.log_std_init))
        model = SDEActorCritics(actor, critic, self.initial_log_alpha(), log_std)
        model.log_alpha.requires_grad_(bool(training.tune_alpha))
        return model

    def sde_sigma(self) -> torch.Tensor:
        """``[F, |A|]``: exp(log_std), or expln (exp below 0, log1p(x) + 1 above), over the actions."""
        log_std = self.model.sde_log_std
        if self.config.training.use_expln:
            below = torch.exp(torch.clamp(log_std, max=0.0))
            sigma = torch.where(log_std <= 0, below, torch.log1p(torch.clamp(log_std, min=0.0)) + 1.0)
        else:
            sigma = log_std.exp()
        return sigma.expand(sigma.shape[0], self.num_actions)

    def squashed_sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, log pi(a|s))`` with ``a = tanh(mean + z^T (sigma * eps))``, ``eps`` the step's
        :attr:`sde_eps` (``noise``, SAC's per-row draws, is not used: gSDE's noise is the matrix)."""
        hidden = self.model.actor[:-1](obs)
        mean = self.model.actor[-1](hidden)
        features, sigma = hidden.detach(), self.sde_sigma()
        std = torch.sqrt(features.square() @ sigma.square() + SDE_EPSILON)
        pre_tanh = mean + features @ (sigma * self.sde_eps)
        gaussian_logp = (-0.5 * ((pre_tanh - mean) / std).square() - std.log() - _HALF_LOG_2PI).sum(dim=-1)
        log_det = (2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(dim=-1)
        return torch.tanh(pre_tanh), gaussian_logp - log_det

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        # One exploration matrix per gradient step, shared by all rows at s and s' (SB3's reset_noise).
        features = self.model.sde_log_std.shape[0]
        eps = torch.randn((features, self.num_actions), generator=self.noise_generator)
        self.sde_eps = self.to_device_tensor(eps, pin=False)
        loss, stats, td_errors = super().loss(batch, update_actor)
        return loss, {**stats, "sde_std": self.sde_sigma().detach().mean()}, td_errors
