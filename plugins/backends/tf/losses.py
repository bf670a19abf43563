"""Small loss helpers shared by the TF policies of several algorithms."""

from __future__ import annotations

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
