"""SAC on the torch backend: the squashed Gaussian actor's sampling and the three losses."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.squashed_inference import LOG_STD_MAX, LOG_STD_MIN
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.backends.torch import OffPolicyTorchPolicy
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class SACTorchPolicy(TargetNetworkState, OffPolicyTorchPolicy):
    """Twin critics with target copies, a tanh-squashed Gaussian actor and the log temperature ``log_alpha``.

    Weights: ``policy/hidden_<i>/...``, ``policy/output/...`` (means then log stds of the
    pre-tanh Gaussian), ``q/hidden_<i>/...`` and ``q/output/...`` (two critics stacked,
    ``[2, in, out]``), ``log_alpha`` (shape ``[1]``).
    """

    num_critics = 2
    target_parts = ("critic",)
    gaussian_actor = True
    #: whether the class acts and learns with gSDE's noise (``training.use_sde``)
    builds_sde = False

    def __new__(cls, *args: Any, **kwargs: Any) -> SACTorchPolicy:
        """A Discrete action space builds discrete SAC's policy (``discrete_torch_policy``), and
        ``training.use_sde`` the gSDE one (``sde_torch_policy``), so that the ``sac`` algorithm keeps
        one policy entry per backend (subclasses are built as they are)."""
        action_space = args[1] if len(args) > 1 else kwargs.get("action_space")
        config = args[2] if len(args) > 2 else kwargs.get("config")
        use_sde = bool(getattr(getattr(config, "training", None), "use_sde", False))
        if cls is SACTorchPolicy and isinstance(action_space, Discrete):
            if use_sde:
                raise TypeError("training.use_sde: gSDE needs Box actions, got a Discrete action space")
            from rlgear.plugins.algorithms.sac.discrete_torch_policy import DiscreteSACTorchPolicy

            cls = DiscreteSACTorchPolicy
        elif use_sde and cls is SACTorchPolicy:
            from rlgear.plugins.algorithms.sac.sde_torch_policy import SDESACTorchPolicy

            cls = SDESACTorchPolicy
        elif use_sde and not cls.builds_sde:
            raise TypeError(f"training.use_sde: gSDE is built for sac's own policy, not {cls.__name__}")
        return super().__new__(cls)

    def initial_log_alpha(self) -> float:
        return math.log(self.config.training.initial_alpha)

    def make_model(self) -> nn.Module:
        model = super().make_model()
        model.log_alpha.requires_grad_(bool(self.config.training.tune_alpha))  # before the optimizer exists
        return model

    @property
    def target_entropy(self) -> float:
        target = self.config.training.target_entropy
        return -float(self.num_actions) if target is None else float(target)

    def squashed_sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, log pi(a|s))`` with ``a = tanh(mean + std * noise)`` in ``[-1, 1]``.

        The log-probability of the squashed action is the Gaussian's minus
        ``sum log(1 - tanh(u)^2)`` (Haarnoja et al. 2018, appendix C), written as
        ``2 (log 2 - u - softplus(-2u))`` so that it stays finite where tanh saturates.
        """
        out = self.model.actor(obs)
        mean, log_std = out[:, : self.num_actions], out[:, self.num_actions :]
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        pre_tanh = mean + log_std.exp() * noise
        gaussian_logp = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(dim=-1)
        log_det = (2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(dim=-1)
        return torch.tanh(pre_tanh), gaussian_logp - log_det

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        obs = batch[SB.OBS]
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        noise = self.sample_noise((obs.shape[0], self.num_actions))
        next_noise = self.sample_noise((obs.shape[0], self.num_actions))
        self.last_noise = (noise, next_noise)  # the draws this step used (the loss tests read them)
        critic_loss, td_errors, q_taken, targets = self.critic_terms(batch, alpha, next_noise)

        actions, logp = self.squashed_sample(obs, noise)
        actor_loss = (alpha * logp - self.policy_q(obs, actions)).mean()
        alpha_loss = -(log_alpha * (logp.detach() + self.target_entropy)).mean()
        loss = critic_loss + actor_loss + (alpha_loss if log_alpha.requires_grad else 0.0)
        stats = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.detach().mean(),
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        return loss, stats, td_errors

    def critic_terms(
        self, batch: dict[str, torch.Tensor], alpha: torch.Tensor, next_noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(critic loss, |TD error| per row, the critics' values at the taken actions, the targets)``:
        the part of the loss a critic variant (TQC's quantile critics) replaces."""
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        with torch.no_grad():
            next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
            next_q = self.q_values(next_obs, next_actions, "target").min(dim=0).values
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_q.dtype) + batch[SB.DISCOUNTS].to(next_q.dtype) * (
                next_q - alpha * next_logp
            )
        q_taken = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)
        return critic_loss, td_errors, q_taken, targets

    def policy_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The value the actor maximizes at its own actions, with no gradient to the critics:
        the smaller of the twin critics (TQC: the mean of all atoms)."""
        return self.q_values(obs, actions, "frozen").min(dim=0).values
