"""Small loss helpers shared by the TF policies of several algorithms."""

from __future__ import annotations

from typing import Any

from rlgear.plugins.backends.tf.runtime import tf


def normalize_advantages(advantages: tf.Tensor) -> tf.Tensor:
    """Mean 0, std 1 over the (mini)batch; a single row is left as it is.

    The std is the unbiased one (``n - 1``), as ``torch.Tensor.std`` computes it,
    so both backends give the same loss. Works with a dynamic batch size.
    """
    n = tf.shape(advantages)[0]
    count = tf.cast(n, advantages.dtype)
    mean = tf.reduce_mean(advantages)
    variance = tf.reduce_sum(tf.square(advantages - mean)) / tf.maximum(count - 1.0, 1.0)
    normalized = (advantages - mean) / (tf.sqrt(variance) + 1e-8)
    return tf.where(n > 1, normalized, advantages)


def actor_critic_loss(
    dist: Any,
    actions: tf.Tensor,
    advantages: tf.Tensor,
    values: tf.Tensor,
    value_targets: tf.Tensor,
    vf_loss_coeff: float,
    entropy_coeff: float,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """The advantage actor-critic loss (Mnih et al. 2016, arXiv:1602.01783) and its stats.

    The torch backend's ``actor_critic_loss``, term for term and in the same
    order (A2C and A3C share it; see there).
    """
    policy_loss = -tf.reduce_mean(dist.logp(actions) * advantages)
    vf_loss = 0.5 * tf.reduce_mean((values - value_targets) ** 2)
    entropy = tf.reduce_mean(dist.entropy())
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    return loss, {"policy_loss": policy_loss, "vf_loss": vf_loss, "entropy": entropy}
