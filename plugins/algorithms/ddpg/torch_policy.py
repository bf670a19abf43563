"""DDPG and TD3 on the torch backend: the deterministic actor, its exploration noise and the losses."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.algorithms.ddpg.exploration import DeterministicActorRules
from rlgear.plugins.backends.torch import OffPolicyTorchPolicy
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class DDPGTorchPolicy(DeterministicActorRules, TargetNetworkState, OffPolicyTorchPolicy):
    """A deterministic tanh actor and one critic (two with ``twin_q``), each with a target copy.

    Weights: ``policy/hidden_<i>/...``, ``policy/output/...`` (the pre-tanh action),
    ``q/hidden_<i>/...``, ``q/output/...`` (critics stacked ``[K, in, out]``, K = 1 or 2).
    """

    target_parts = ("actor", "critic")
    gaussian_actor = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_critics = 2 if config.training.twin_q else 1  # read by make_model()
        super().__init__(observation_space, action_space, config)
        self.ou_state = np.zeros((0, self.num_actions), dtype=np.float32)

    # --- learning -----------------------------------------------------------------------------
    def target_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``tanh(mu'(s'))``, smoothed with clipped Gaussian noise when ``target_noise`` > 0 (TD3)."""
        training = self.config.training
        actions = torch.tanh(self.target_model["actor"](next_obs))
        self.last_noise = None
        if training.target_noise > 0:
            noise = self.sample_noise(tuple(actions.shape))
            self.last_noise = noise  # the draws this step used (the loss tests read them)
            smoothing = (training.target_noise * noise).clamp(
                -training.target_noise_clip, training.target_noise_clip
            )
            actions = (actions + smoothing).clamp(-1.0, 1.0)
        return actions

    def loss(
        self, batch: dict[str, torch.Tensor], update_actor: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        with torch.no_grad():
            next_q = self.q_values(next_obs, self.target_actions(next_obs), "target").min(dim=0).values
            # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
            targets = batch[SB.REWARDS].to(next_q.dtype) + batch[SB.DISCOUNTS].to(next_q.dtype) * next_q
        q_taken = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        stats = {
            "critic_loss": loss.detach(),
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.mean(),
        }
        if update_actor:  # Lillicrap et al. 2016: climb the first critic's value of the actor's action
            actions = torch.tanh(self.model.actor(obs))
            actor_loss = -self.q_values(obs, actions, "frozen")[0].mean()
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss.detach()
        return loss, stats, td_errors
