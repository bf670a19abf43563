"""Discrete CQL on the TensorFlow backend: ``cql_torch_policy``'s loss, term for term (see there)."""

from __future__ import annotations

import numpy as np

from rlgear.plugins.algorithms.dqn.tf_policy import DQNTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.sample_batch import SampleBatch as SB


class DiscreteCQLTFPolicy(DQNTFPolicy):
    """DQN's Q-network, target network and weight names; the loss adds :meth:`conservative_penalty`."""

    loss_columns = (*DQNTFPolicy.loss_columns, SB.ACTION_MASK)

    def conservative_penalty(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """``mean(logsumexp_a Q(s, a) - Q(s, a_data))`` over the rows, masked actions left out."""
        q_values, _ = self.model(batch[SB.OBS])
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        q_taken = tf.gather(q_values, actions, axis=1, batch_dims=1)[:, 0]
        mask = batch.get(SB.ACTION_MASK)
        if mask is not None:
            q_values = tf.where(tf.cast(mask, tf.bool), q_values, tf.constant(-np.inf, q_values.dtype))
        return tf.reduce_mean(tf.reduce_logsumexp(q_values, axis=1) - q_taken)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        td_loss, stats = super().loss(batch)
        penalty = self.conservative_penalty(batch)
        loss = td_loss + self.config.training.min_q_weight * penalty
        return loss, {**stats, "td_loss": tf.stop_gradient(td_loss), "cql_penalty": tf.stop_gradient(penalty)}
