"""Discrete SAC on the torch backend (Christodoulou 2019, "Soft Actor-Critic for Discrete Action
Settings", arXiv:1910.07207): a categorical actor and critics that output one Q per action.

With ``pi = softmax(logits(s))`` over the ``n`` actions, every expectation over actions is the
exact sum (the paper's sec. 4), so no action is sampled in the loss::

    V(s')      = sum_a pi(a|s') [min_k Q'_k(s', a) - alpha log pi(a|s')]        (target critics)
    target     = r + discount x V(s')        (n-step rewards; discount gamma^n, 0 after a terminal)
    critics    = 0.5 sum_k mean (Q_k(s, a_taken) - target)^2
    actor      = mean sum_a pi(a|s) [alpha log pi(a|s) - min_k Q_k(s, a)]          (critics frozen)
    alpha      = mean log_alpha x (H(pi(.|s)) - target_entropy),  H = -sum_a pi log pi

The temperature's loss is in ``log alpha`` as the continuous SAC's here and Stable-Baselines3's
(the paper and CleanRL's ``sac_atari`` write it in ``alpha``; the fixed point is the same).
Weights: ``policy/...`` (the ``n`` logits), ``q/...`` (``[2, obs, ..., n]``), ``log_alpha``: the
TF policy's names and layouts. Action masks are not applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.sac.discrete import discrete_target_entropy
from rlgear.plugins.algorithms.sac.torch_policy import SACTorchPolicy
from rlgear.plugins.backends.torch.export_heads import QValueHead
from rlgear.plugins.backends.torch.offpolicy import ActorCritics, StackedMLP, actor_mlp
from rlgear.policy import categorical_sample
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class DiscreteSACTorchPolicy(SACTorchPolicy):
    """SAC for a Discrete action space (see the module docstring); built by ``SACTorchPolicy`` itself
    when the action space is Discrete, so the ``sac`` algorithm has one policy entry per backend."""

    gaussian_actor = False  # the actor's output is the n logits

    def action_count(self, action_space: Space) -> int:
        if not isinstance(action_space, Discrete):
            raise TypeError(f"{type(self).__name__} needs a Discrete action space, got {action_space!r}")
        return int(action_space.n)

    @property
    def target_entropy(self) -> float:
        return discrete_target_entropy(self.config, self.num_actions)

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim, sizes = flat_dim(self.observation_space), list(model_config.hidden_sizes)
        actor = actor_mlp(obs_dim, sizes, self.num_actions, model_config.activation)
        critic = StackedMLP(self.num_critics, obs_dim, sizes, self.num_actions, model_config.activation)
        model = ActorCritics(actor, critic, self.initial_log_alpha())
        model.log_alpha.requires_grad_(bool(self.config.training.tune_alpha))
        return model

    def action_values(self, obs: torch.Tensor, which: str = "online") -> torch.Tensor:
        """``[num_critics, B, n]``: every action's Q-value, ``online``, ``frozen`` (no gradient to the
        critics) or ``target``."""
        if which == "target":
            return self.target_model["critic"](obs)
        return self.model.critic(obs, self.frozen_critic if which == "frozen" else None)

    # --- acting -------------------------------------------------------------------------------
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """Uniform random actions before ``learning_starts`` env steps, else a draw from the categorical
        (exploring) or its most likely action (greedy), through the numpy twin of the actor."""
        twin = self.actor_twin
        if twin.version != self.weights_version:
            twin.load(self.get_weights(), self.weights_version)
        obs = self.flat_observations(timestep.observation)
        if explore and self.global_timestep < self.config.training.learning_starts:
            return self.acting_rng.integers(self.num_actions, size=obs.shape[0]), state, {}
        logits = twin.forward(obs)
        if explore:
            return categorical_sample(logits, self.acting_rng), state, {}
        return np.argmax(logits, axis=-1).astype(np.int64), state, {}

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """The most likely action, through the framework (for tests against the twin)."""
        with torch.no_grad():
            obs = self.to_device_tensor(self.preprocess(observations), pin=False)
            return self.model.actor(obs).argmax(dim=-1).cpu().numpy()

    def export_head(self, explore: bool) -> QValueHead:
        """Greedy acting: the argmax of the actor's logits (output ``q_values`` holds the logits)."""
        if explore:
            raise explore_refused(
                "discrete SAC's exported graph acts greedily (the actor's most likely action)"
            )
        return QValueHead(self.model.actor, self.num_actions)

    # --- learning -----------------------------------------------------------------------------
    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_logp = F.log_softmax(self.model.actor(next_obs), dim=-1)
            next_q = self.action_values(next_obs, "target").min(dim=0).values  # [B, n]
            next_v = (next_logp.exp() * (next_q - alpha * next_logp)).sum(dim=-1)
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_v.dtype) + batch[SB.DISCOUNTS].to(next_v.dtype) * next_v
        q_all = self.action_values(obs)  # [K, B, n]
        taken = batch[SB.ACTIONS].long().reshape(1, -1, 1).expand(q_all.shape[0], -1, 1)
        q_taken = q_all.gather(2, taken).squeeze(2)
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)

        logp = F.log_softmax(self.model.actor(obs), dim=-1)
        probs = logp.exp()
        q_policy = self.action_values(obs, "frozen").min(dim=0).values  # no gradient to the critics
        actor_loss = (probs * (alpha * logp - q_policy)).sum(dim=-1).mean()
        entropy = -(probs * logp).sum(dim=-1).detach()
        alpha_loss = (log_alpha * (entropy - self.target_entropy)).mean()
        loss = critic_loss + actor_loss + (alpha_loss if log_alpha.requires_grad else 0.0)
        stats = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha,
            "entropy": entropy.mean(),
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        return loss, stats, td_errors
