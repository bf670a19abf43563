"""Small loss helpers shared by the torch policies of several algorithms."""

from __future__ import annotations

from typing import Any

import torch

from rlgear.plugins.backends.torch.data_parallel import active_group, minibatch_column, minibatch_sum


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of ``x`` over the rows where ``mask`` is 1 (all rows without a mask).

    Recurrent policies learn on zero-padded sequences (``seq_mask``); padding
    must weigh nothing in a loss term or a statistic.
    """
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def minibatch_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`masked_mean` over the whole minibatch: with data-parallel learners the sums of every
    learner's shard (:func:`~.data_parallel.minibatch_sum`), so a statistic that steers the update
    (MARWIL's advantage norm) is the same number on every learner and the one a single learner
    computes; ``masked_mean(x, mask)`` itself otherwise."""
    if active_group() is None:
        return masked_mean(x, mask)
    weights = torch.ones_like(x) if mask is None else mask.to(x.dtype)
    count, total = minibatch_sum(torch.stack([weights.sum(), (x * weights).sum()]))
    return total / count.clamp(min=1.0)


def normalize_advantages(advantages: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean 0, std 1 (unbiased) over the (mini)batch's rows, or over those where ``mask`` is 1;
    a single row is left as it is. With data-parallel learners the mean and variance are the
    whole minibatch's, summed over every learner's shard (:mod:`.data_parallel`)."""
    if active_group() is not None:
        return _normalize_over_group(advantages, mask)
    return advantages_normalized_by(advantages, advantages, mask)


def advantages_normalized_by(
    advantages: torch.Tensor, advantages_ref: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """``advantages`` with the mean and (unbiased) std of ``advantages_ref`` (over the rows where
    ``mask``, the reference's mask, is 1) taken out; the reference is ``advantages`` itself except
    for a data-parallel learner, whose shard is normalized by the whole minibatch's rows."""
    if mask is None:
        if advantages_ref.numel() <= 1:
            return advantages
        return (advantages - advantages_ref.mean()) / (advantages_ref.std() + 1e-8)
    count = mask.sum()
    if count <= 1:
        return advantages
    mean = (advantages_ref * mask).sum() / count
    variance = (((advantages_ref - mean) * mask) ** 2).sum() / (count - 1)
    return (advantages - mean) / (variance.sqrt() + 1e-8)


def _normalize_over_group(advantages: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`normalize_advantages` over the whole minibatch. When ``advantages`` (and ``mask``) are
    the loss's input columns, every learner holds their whole-minibatch rows and computes the
    statistics itself, exactly as one learner does (no collective); otherwise the sums are taken
    over the group (two passes, as one learner computes them)."""
    whole = minibatch_column(advantages)
    whole_mask = minibatch_column(mask)
    if whole is not None and (mask is None or whole_mask is not None):
        return advantages_normalized_by(advantages, whole, whole_mask)
    weights = torch.ones_like(advantages) if mask is None else mask.to(advantages.dtype)
    count, total = minibatch_sum(torch.stack([weights.sum(), (advantages * weights).sum()]))
    if count <= 1:
        return advantages
    mean = total / count
    variance = minibatch_sum((((advantages - mean) * weights) ** 2).sum()) / (count - 1)
    return (advantages - mean) / (variance.sqrt() + 1e-8)


def actor_critic_loss(
    dist: Any,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    value_targets: torch.Tensor,
    vf_loss_coeff: float,
    entropy_coeff: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The advantage actor-critic loss (Mnih et al. 2016, arXiv:1602.01783) and its stats (detached).

    Policy gradient on the given advantages, plus ``vf_loss_coeff`` times half
    the squared error of the value head, minus ``entropy_coeff`` times the
    entropy. A2C and A3C share it: they differ in how gradients reach the
    weights, not in the loss. The TF backend's twin computes the same terms
    in the same order. ``mask`` (``seq_mask``) keeps padding rows out of every term.
    """
    policy_loss = -masked_mean(dist.logp(actions) * advantages, mask)
    vf_loss = 0.5 * masked_mean((values - value_targets) ** 2, mask)
    entropy = masked_mean(dist.entropy(), mask)
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    return loss, {
        "policy_loss": policy_loss.detach(),
        "vf_loss": vf_loss.detach(),
        "entropy": entropy.detach(),
    }


def clipped_surrogate(advantages: torch.Tensor, ratio: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate per row, ``min(A r, A clip(r, 1 - eps, 1 + eps))`` (Schulman et al. 2017,
    eq. 7): the objective to maximise. PPO and APPO share it (APPO on V-trace advantages)."""
    return torch.min(advantages * ratio, advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip))
