"""gSDE for PPO on the torch backend (Raffin et al. 2021; see :mod:`rlgear.plugins.families.gsde`): the
catalog actor-critic with a state-dependent standard deviation, and acting with per-env noise.

:class:`SDEActorCriticMLP` replaces the catalog MLP's state-independent ``policy/log_std`` ``[A]``
by ``policy/sde_log_std`` ``[F, A]`` (``[F, 1]`` without ``full_std``) and outputs, as every
Gaussian model here, the means then the log standard deviations, now per state::

    std_k(s) = sqrt(sum_j z_j(s)^2 sigma_jk^2 + 1e-6),   z(s) = the policy's last hidden features (detached)

so the backend's ``DiagGaussian`` gives the log-probability and entropy the losses use unchanged
(Stable-Baselines3's ``StateDependentNoiseDistribution`` with ``learn_features=False``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.blocks.inference import POLICY_HEAD
from rlgear.plugins.backends.torch.distributions import DiagGaussian
from rlgear.plugins.backends.torch.models import ActorCriticMLP
from rlgear.plugins.families.gsde import SDE_EPSILON, SDENoise
from rlgear.policy import PolicyState, flatten_observations, recurrent_model
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Space, flat_dim
from rlgear.timestep import TimeStep


class SDEActorCriticMLP(ActorCriticMLP):
    """The catalog actor-critic MLP (no conv trunk) with gSDE's state-dependent std (module docstring)."""

    def __init__(self, obs_dim: int, num_actions: int, model_config: Any, training: Any):
        super().__init__(obs_dim, 2 * num_actions, True, model_config)
        del self.log_std
        features = list(model_config.hidden_sizes)[-1]
        self.use_expln = bool(training.use_expln)
        width = num_actions if training.full_std else 1
        self.sde_log_std = nn.Parameter(torch.full((features, width), float(training.log_std_init)))
        self.num_actions = num_actions

    def sigma(self) -> torch.Tensor:
        """``[F, A]``: exp(log_std), or expln (exp below 0, log1p(x) + 1 above), broadcast over actions."""
        log_std = self.sde_log_std
        if self.use_expln:
            below = torch.exp(torch.clamp(log_std, max=0.0))
            above = torch.log1p(torch.clamp(log_std, min=0.0)) + 1.0
            sigma = torch.where(log_std <= 0, below, above)
        else:
            sigma = log_std.exp()
        return sigma.expand(sigma.shape[0], self.num_actions)

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(means [B, A], features z [B, F] (detached), values [B])``."""
        if self.shared:
            hidden = self.shared_body(obs)
            policy_hidden = value_hidden = hidden
        else:
            policy_hidden, value_hidden = self.policy_body(obs), self.value_body(obs)
        return (
            self.policy_output(policy_hidden),
            policy_hidden.detach(),
            self.value_output(value_hidden).squeeze(-1),
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, features, values = self.heads(obs)
        variance = features.square() @ self.sigma().square()
        log_std = 0.5 * torch.log(variance + SDE_EPSILON)
        return torch.cat([mean, log_std], dim=-1), values

    def weight_names(self) -> dict[str, str]:
        names = super().weight_names()
        names.pop("log_std", None)
        names["sde_log_std"] = "policy/sde_log_std"
        return names


class SDEActing:
    """``compute_actions`` with gSDE's per-env noise, mixed in before ``TorchPolicy`` (PPO with
    ``use_sde``): exploring actions are ``mean(s) + theta_env^T z(s)``, their log-probability under
    the per-state Gaussian; greedy actions the mean. The noise matrices are the acting state
    (:class:`SDENoise`), saved with the policy state."""

    def sde_setup(self, observation_space: Space, action_space: Space, config: Any) -> None:
        training = config.training
        if not isinstance(action_space, Box):
            raise TypeError(f"training.use_sde: gSDE needs Box actions, got {action_space!r}")
        if (
            config.model.custom
            or recurrent_model(config.model)
            or config.model.conv_filters
            or config.model.relational
        ):
            raise TypeError(
                "training.use_sde: gSDE is built for the catalog MLP (no model.custom, lstm, attention, "
                "relational or conv)"
            )
        self.sde_noise = SDENoise(
            int(training.sde_sample_freq), None if config.seed is None else config.seed + 5
        )

    def make_model(self) -> nn.Module:
        if not self.config.training.use_sde:
            return super().make_model()
        return SDEActorCriticMLP(
            flat_dim(self.observation_space), self.action_space.size, self.config.model, self.config.training
        )

    def _make_fast_actor(self) -> Any:
        return None if self.config.training.use_sde else super()._make_fast_actor()

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if not self.config.training.use_sde:
            return super().compute_actions(timestep, state, explore)
        obs = torch.from_numpy(flatten_observations(self.observation_space, timestep.observation))
        with torch.inference_mode():
            obs = obs.to(self.device)
            mean, features, values = self.model.heads(obs)
            dist_inputs, _ = self.model(obs)
            actions = mean
            if explore:
                sigma = self.model.sigma().cpu().numpy()
                noise = self.sde_noise.noise(
                    features.cpu().numpy(), timestep.env_id, sigma, self.weights_version
                )
                actions = mean + torch.from_numpy(noise).to(mean.device)
            logp = DiagGaussian(dist_inputs).logp(actions)
        shape = (len(actions), *self.action_space.shape)
        extras = {SampleBatch.ACTION_LOGP: logp.cpu().numpy(), SampleBatch.VF_PREDS: values.cpu().numpy()}
        return actions.cpu().numpy().reshape(shape).astype(np.float32), state, extras

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        if POLICY_HEAD not in columns:  # acting here fills the log-probabilities itself
            return
        super().finish_fragment(columns)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        if self.config.training.use_sde:
            state.arrays.update(self.sde_noise.get_state(self.weights_version))
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if self.config.training.use_sde:
            self.sde_noise.set_state(state.arrays, self.weights_version)
