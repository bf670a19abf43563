"""DDPG and TD3 on the TensorFlow backend: the same network, weight names and losses as ``torch_policy``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.algorithms.ddpg.exploration import DeterministicActorRules
from rlgear.plugins.backends.tf import OffPolicyTFPolicy, tf
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class DDPGTFPolicy(DeterministicActorRules, TargetNetworkState, OffPolicyTFPolicy):
    """A deterministic tanh actor and one critic (two with ``twin_q``), each with a target copy.

    Weights as ``DDPGTorchPolicy``'s: ``policy/...`` (the pre-tanh action), ``q/...`` (critics stacked
    ``[K, in, out]``, K = 1 or 2). ``last_noise``: the step's target smoothing draws (None without).
    """

    target_parts = ("actor", "critic")
    gaussian_actor = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_critics = 2 if config.training.twin_q else 1  # read by make_model()
        super().__init__(observation_space, action_space, config)
        self.ou_state = np.zeros((0, self.num_actions), dtype=np.float32)

    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        return [(batch_size, self.num_actions)] if self.config.training.target_noise > 0 else []

    def keep_noise(self, noise: list[tf.Tensor]) -> tf.Tensor | None:
        return noise[0] if noise else None

    def target_actions(self, next_obs: tf.Tensor, noise: list[tf.Tensor]) -> tf.Tensor:
        """``tanh(mu'(s'))``, smoothed with clipped Gaussian noise when ``target_noise`` > 0 (TD3)."""
        training = self.config.training
        actions = tf.tanh(self.target_model.actor(next_obs))
        if noise:
            clip = training.target_noise_clip
            smoothing = tf.clip_by_value(training.target_noise * noise[0], -clip, clip)
            actions = tf.clip_by_value(actions + smoothing, -1.0, 1.0)
        return actions

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        next_q = tf.reduce_min(
            self.q_values(next_obs, self.target_actions(next_obs, noise), "target"), axis=0
        )
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32) + tf.cast(batch[SB.DISCOUNTS], tf.float32) * next_q
        )
        q_taken = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        stats = {
            "critic_loss": loss,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        if update_actor:  # Lillicrap et al. 2016: climb the first critic's value of the actor's action
            actions = tf.tanh(self.model.actor(obs))
            actor_loss = -tf.reduce_mean(self.q_values(obs, actions, "frozen")[0])
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss
        return loss, stats, td_errors
