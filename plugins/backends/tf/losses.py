"""Small loss helpers shared by the TF policies of several algorithms."""

from __future__ import annotations

from typing import Any

from rlgear.plugins.backends.tf.runtime import tf


def masked_mean(x: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
    """The mean of ``x`` over the rows where ``mask`` is 1 (all rows without a mask); as the torch
    backend's: padding of recurrent sequences (``seq_mask``) weighs nothing."""
    if mask is None:
        return tf.reduce_mean(x)
    return tf.reduce_sum(x * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def normalize_advantages(advantages: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
    """Mean 0, std 1 over the (mini)batch, or over the rows where ``mask`` is 1; a single row is left
    as it is.

    The std is the unbiased one (``n - 1``), as ``torch.Tensor.std`` computes it,
    so both backends give the same loss. Works with a dynamic batch size.
    """
    if mask is None:
        mask = tf.ones_like(advantages)
    count = tf.reduce_sum(mask)
    mean = tf.reduce_sum(advantages * mask) / tf.maximum(count, 1.0)
    variance = tf.reduce_sum(tf.square((advantages - mean) * mask)) / tf.maximum(count - 1.0, 1.0)
    normalized = (advantages - mean) / (tf.sqrt(variance) + 1e-8)
    return tf.where(count > 1.0, normalized, advantages)


def actor_critic_loss(
    dist: Any,
    actions: tf.Tensor,
    advantages: tf.Tensor,
    values: tf.Tensor,
    value_targets: tf.Tensor,
    vf_loss_coeff: float,
    entropy_coeff: float,
    mask: tf.Tensor | None = None,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """The advantage actor-critic loss (Mnih et al. 2016, arXiv:1602.01783) and its stats.

    The torch backend's ``actor_critic_loss``, term for term and in the same
    order (A2C and A3C share it; see there).
    """
    policy_loss = -masked_mean(dist.logp(actions) * advantages, mask)
    vf_loss = 0.5 * masked_mean((values - value_targets) ** 2, mask)
    entropy = masked_mean(dist.entropy(), mask)
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    return loss, {"policy_loss": policy_loss, "vf_loss": vf_loss, "entropy": entropy}


def clipped_surrogate(advantages: tf.Tensor, ratio: tf.Tensor, clip: Any) -> tf.Tensor:
    """The torch backend's ``clipped_surrogate``: ``min(A r, A clip(r, 1 - eps, 1 + eps))`` per row."""
    return tf.minimum(advantages * ratio, advantages * tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip))
