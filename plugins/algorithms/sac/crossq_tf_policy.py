"""CrossQ on the TensorFlow backend: ``crossq_torch_policy``'s critics and losses, term for term.

The same weights under the same names and layouts (``q/bn_<i>/{scale,offset,running_mean,
running_var}`` ``[K, width]`` beside SAC's), the running statistics being variables the optimizer
does not move (``trainable=False``), assigned inside the compiled step.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.sac.crossq_config import refuse_data_parallel
from rlgear.plugins.algorithms.sac.tf_policy import SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.models import ACTIVATIONS
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim


class BatchNormCritics(tf.Module):
    """The torch ``BatchNormCritics``: ``batch norm -> dense`` per layer, K critics batched."""

    def __init__(
        self,
        members: int,
        in_dim: int,
        hidden_sizes: list[int],
        activation: str,
        momentum: float,
        eps: float,
        rng: np.random.Generator,
    ):
        super().__init__()
        self.members, self.momentum, self.eps = members, momentum, eps
        self.activation = ACTIVATIONS[activation]
        self.kernels, self.biases, self.scales, self.offsets = [], [], [], []
        self.running_means, self.running_vars = [], []
        for fan_in, fan_out in itertools.pairwise([in_dim, *hidden_sizes, 1]):
            bound = 1.0 / math.sqrt(fan_in)
            kernel = rng.uniform(-bound, bound, (members, fan_in, fan_out)).astype(np.float32)
            bias = rng.uniform(-bound, bound, (members, fan_out)).astype(np.float32)
            self.kernels.append(tf.Variable(kernel, name="kernel"))
            self.biases.append(tf.Variable(bias, name="bias"))
            self.scales.append(tf.Variable(np.ones((members, fan_in), np.float32), name="scale"))
            self.offsets.append(tf.Variable(np.zeros((members, fan_in), np.float32), name="offset"))
            self.running_means.append(
                tf.Variable(np.zeros((members, fan_in), np.float32), name="running_mean", trainable=False)
            )
            self.running_vars.append(
                tf.Variable(np.ones((members, fan_in), np.float32), name="running_var", trainable=False)
            )

    def parameter_list(self) -> list[tf.Variable]:
        return [*self.kernels, *self.biases, *self.scales, *self.offsets]

    def __call__(
        self, x: tf.Tensor, params: list[tf.Tensor] | None = None, training: bool = False
    ) -> tuple[tf.Tensor, list[tuple[tf.Tensor, tf.Tensor]]]:
        layers = len(self.kernels)
        params = self.parameter_list() if params is None else params
        kernels, biases = params[:layers], params[layers : 2 * layers]
        scales, offsets = params[2 * layers : 3 * layers], params[3 * layers :]
        x = tf.broadcast_to(x[None], [self.members, tf.shape(x)[0], x.shape[-1]])
        rows = tf.cast(tf.shape(x)[1], tf.float32)
        stats = []
        for i in range(layers):
            if training:  # the rows' mean and unbiased variance, as torch's x.var(unbiased=True)
                mean = tf.reduce_mean(x, axis=1)
                var = tf.reduce_sum(tf.square(x - mean[:, None]), axis=1) / (rows - 1.0)
                stats.append((tf.stop_gradient(mean), tf.stop_gradient(var)))
            else:
                mean, var = self.running_means[i], self.running_vars[i]
            x = (x - mean[:, None]) / tf.sqrt(var[:, None] + self.eps) * scales[i][:, None] + offsets[i][
                :, None
            ]
            x = tf.matmul(x, kernels[i]) + biases[i][:, None, :]
            if i < layers - 1:
                x = self.activation(x)
        return x, stats

    def update_running_stats(self, stats: list[tuple[tf.Tensor, tf.Tensor]]) -> None:
        for (mean, var), running_mean, running_var in zip(
            stats, self.running_means, self.running_vars, strict=True
        ):
            for batch, running in ((mean, running_mean), (var, running_var)):
                moved = running + self.momentum * (batch - running)
                running.assign(tf.where(tf.math.is_finite(moved), moved, running))

    def named(self, scope: str) -> list[tuple[str, tf.Variable]]:
        last = len(self.kernels) - 1
        out = []
        for i in range(len(self.kernels)):
            layer = "output" if i == last else f"hidden_{i}"
            out += [(f"{scope}/{layer}/kernel", self.kernels[i]), (f"{scope}/{layer}/bias", self.biases[i])]
            out += [
                (f"{scope}/bn_{i}/scale", self.scales[i]),
                (f"{scope}/bn_{i}/offset", self.offsets[i]),
                (f"{scope}/bn_{i}/running_mean", self.running_means[i]),
                (f"{scope}/bn_{i}/running_var", self.running_vars[i]),
            ]
        return out


class CrossQTFPolicy(SACTFPolicy):
    """SAC's actor and temperature; twin batch-normalized critics without target copies."""

    target_parts = ()

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        refuse_data_parallel(config)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> ActorCritics:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim = flat_dim(self.observation_space)
        rng, activation = self.init_rng, model_config.activation
        actor = ActorMLP(obs_dim, list(model_config.hidden_sizes), self.actor_outputs(), activation, rng)
        critic = BatchNormCritics(
            self.num_critics, obs_dim + self.num_actions, list(training.critic_hidden_sizes), activation,
            training.batch_norm_momentum, training.batch_norm_eps, rng,
        )  # fmt: skip
        return ActorCritics(actor, critic, self.initial_log_alpha(), self.learns_alpha())

    def update_actor_now(self) -> bool:
        """The actor and alpha learn every ``policy_delay``-th gradient step (the critics every step)."""
        return (self.num_grad_updates + 1) % self.config.training.policy_delay == 0

    def learn_on_batch(self, batch: Any) -> dict[str, float]:
        """The base class's step; only here does the joint pass move the running statistics."""
        self._moves_running_stats = True
        try:
            return super().learn_on_batch(batch)
        finally:
            self._moves_running_stats = False

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        actor_noise, next_noise = noise
        rows = tf.shape(obs)[0]
        log_alpha = self.model.log_alpha
        alpha = tf.stop_gradient(tf.exp(log_alpha))[0]
        next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
        next_actions, next_logp = tf.stop_gradient(next_actions), tf.stop_gradient(next_logp)
        joint = tf.concat(
            [
                tf.concat([obs, self.scaled_actions(batch[SB.ACTIONS])], axis=-1),
                tf.concat([next_obs, next_actions], axis=-1),
            ],
            axis=0,
        )
        values, batch_stats = self.model.critic(joint, training=True)
        q_taken, next_q = values[:, :rows, 0], tf.stop_gradient(values[:, rows:, 0])
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32)
            + tf.cast(batch[SB.DISCOUNTS], tf.float32) * (tf.reduce_min(next_q, axis=0) - alpha * next_logp)
        )
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        if getattr(self, "_moves_running_stats", False):
            self.model.critic.update_running_stats(batch_stats)
        stats = {
            "critic_loss": loss,
            "alpha": alpha,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        if update_actor:
            actions, logp = self.squashed_sample(obs, actor_noise)
            frozen = [tf.stop_gradient(v) for v in self.model.critic.parameter_list()]
            q_policy, _ = self.model.critic(tf.concat([obs, actions], axis=-1), frozen)
            actor_loss = tf.reduce_mean(alpha * logp - tf.reduce_min(q_policy[..., 0], axis=0))
            alpha_loss = -tf.reduce_mean(log_alpha * (tf.stop_gradient(logp) + self.target_entropy))
            loss = loss + actor_loss
            if self.learns_alpha():
                loss = loss + alpha_loss
            stats.update(actor_loss=actor_loss, alpha_loss=alpha_loss, entropy=-tf.reduce_mean(logp))
        return loss, stats, td_errors
