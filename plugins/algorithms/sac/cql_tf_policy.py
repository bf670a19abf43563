"""CQL (continuous) on the TensorFlow backend: ``cql_torch_policy``'s loss, term for term (see there)."""

from __future__ import annotations

import math

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.plugins.algorithms.sac.tf_policy import SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.sample_batch import SampleBatch as SB


class CQLTFPolicy(SACTFPolicy):
    """SAC's actor, twin critics, targets and temperature; the critics' loss adds :meth:`conservative_penalty`."""

    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        """SAC's two draws, then ``[B, 3n, |A|]`` for the penalty (uniform, at s, at s')."""
        n = self.config.training.num_sampled_actions
        return [*super().noise_shapes(batch_size), (batch_size, 3 * n, self.num_actions)]

    def conservative_penalty(
        self, batch: dict[str, tf.Tensor], noise: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        rows, n, dims = tf.shape(obs)[0], training.num_sampled_actions, self.num_actions
        uniform, at_obs, at_next = (tf.reshape(part, (-1, dims)) for part in tf.split(noise, 3, axis=1))
        obs_rep, next_rep = tf.repeat(obs, n, axis=0), tf.repeat(next_obs, n, axis=0)
        actions_s, logp_s = self.squashed_sample(obs_rep, at_obs)
        actions_next, logp_next = self.squashed_sample(next_rep, at_next)
        actions_s, logp_s = tf.stop_gradient(actions_s), tf.stop_gradient(logp_s)
        actions_next, logp_next = tf.stop_gradient(actions_next), tf.stop_gradient(logp_next)
        random_actions = tf.math.erf(uniform / math.sqrt(2.0))
        members = (
            self.q_values(obs_rep, random_actions) - dims * math.log(0.5),
            self.q_values(obs_rep, actions_next) - logp_next,
            self.q_values(obs_rep, actions_s) - logp_s,
        )  # each [K, B * n]
        x = tf.concat([tf.reshape(m, (self.num_critics, rows, n)) for m in members], axis=2)
        soft_max = training.temperature * tf.reduce_logsumexp(x / training.temperature, axis=2)
        q_data = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))
        penalty = tf.reduce_sum(tf.reduce_mean(soft_max - q_data, axis=1))
        return penalty, tf.reduce_mean(tf.stop_gradient(soft_max))

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        sac_loss, stats, td_errors = super().loss(batch, noise[:2], update_actor)
        penalty, soft_max = self.conservative_penalty(batch, noise[2])
        loss = sac_loss + self.config.training.min_q_weight * penalty
        return (
            loss,
            {**stats, "cql_penalty": tf.stop_gradient(penalty), "cql_logsumexp_q": soft_max},
            td_errors,
        )
