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


def quantile_huber_loss(quantiles: tf.Tensor, targets: tf.Tensor, taus: tf.Tensor, kappa: float) -> tf.Tensor:
    """``[B]``: ``sum_i mean_j |tau_i - 1{u_ij < 0}| L_kappa(u_ij) / kappa`` with ``u_ij = targets_j -
    quantiles_i`` (Dabney et al. 2018, eq. 10); ``quantiles`` ``[B, N]``, ``targets`` ``[B, N']``,
    ``taus`` ``[N]`` (QR-DQN's midpoints, shared by the rows) or ``[B, N]`` (IQN's per-row samples).

    The torch backend's ``quantile_huber_loss``, computed the same way and for the same reason: each
    row's targets sorted once and summed cumulatively, the four ranges of ``u`` found by binary
    search, the loss and its gradient closed forms of those sums (see torch's ``_QuantileHuber``).
    Written pairwise, QR-DQN's LunarLander settings (128 rows, 170 x 170 pairs) took 75 ms forward and
    backward in a ``tf.function`` on one core, against 8 ms this way (30 Nov 2026). The gradient
    flows to ``quantiles`` only.
    """
    targets, taus, kappa = tf.stop_gradient(targets), tf.stop_gradient(taus), float(kappa)

    @tf.custom_gradient
    def rows_loss_of(quantiles: tf.Tensor) -> tuple[tf.Tensor, Any]:
        rows, n, pairs = tf.shape(quantiles)[0], tf.shape(quantiles)[1], tf.shape(targets)[1]
        tau = tf.broadcast_to(tf.reshape(taus, [-1, n]), [rows, n])
        shift = tf.reduce_mean(targets, axis=1, keepdims=True)  # keeps the sums of squares precise
        sorted_targets = tf.sort(targets - shift, axis=1)
        q = quantiles - shift
        zero = tf.zeros([rows, 1], q.dtype)
        sums = tf.concat([zero, tf.cumsum(sorted_targets, axis=1)], axis=1)  # sums[:, k]: the k smallest

        def below(values: tf.Tensor, right: bool = False) -> tf.Tensor:
            """How many targets are < values (right: <=)."""
            return tf.searchsorted(sorted_targets, values, side="right" if right else "left")

        def between(cumulative: tf.Tensor, lo: tf.Tensor, hi: tf.Tensor) -> tf.Tensor:
            return tf.gather(cumulative, hi, batch_dims=1) - tf.gather(cumulative, lo, batch_dims=1)

        zero_u = below(q)  # targets with u < 0 end here
        start = tf.zeros_like(zero_u)
        end = tf.fill(tf.shape(zero_u), pairs)
        if kappa > 0:
            squares = tf.concat([zero, tf.cumsum(tf.square(sorted_targets), axis=1)], axis=1)
            low, high = below(q - kappa), below(q + kappa, right=True)
            ranges = ((start, low), (low, zero_u), (zero_u, high), (high, end))  # u < -k, < 0, <= k, > k
            count = [tf.cast(b - a, q.dtype) for a, b in ranges]
            total = [between(sums, a, b) for a, b in ranges]
            near_below = between(squares, low, zero_u) - 2 * q * total[1] + count[1] * q * q
            near_above = between(squares, zero_u, high) - 2 * q * total[2] + count[2] * q * q
            loss_below = kappa * (count[0] * (q - kappa / 2) - total[0]) + 0.5 * near_below
            loss_above = 0.5 * near_above + kappa * (total[3] - count[3] * (q + kappa / 2))
            slope_below = -kappa * count[0] + total[1] - count[1] * q  # sum of clamp(u) where u < 0
            slope_above = total[2] - count[2] * q + kappa * count[3]
            scale = 1.0 / (tf.cast(pairs, q.dtype) * kappa)
        else:
            above = below(q, right=True)  # targets with u <= 0 end here
            count_below, count_above = tf.cast(zero_u, q.dtype), tf.cast(end - above, q.dtype)
            loss_below = count_below * q - between(sums, start, zero_u)
            loss_above = between(sums, above, end) - count_above * q
            slope_below, slope_above = -count_below, count_above  # sign(u); u == 0 adds nothing
            scale = 1.0 / tf.cast(pairs, q.dtype)
        rows_loss = tf.reduce_sum((1.0 - tau) * loss_below + tau * loss_above, axis=1) * scale
        d_quantiles = ((1.0 - tau) * slope_below + tau * slope_above) * -scale  # d row / d q

        def gradient(grad_rows: tf.Tensor) -> tf.Tensor:
            return grad_rows[:, None] * d_quantiles

        return rows_loss, gradient

    return rows_loss_of(quantiles)
