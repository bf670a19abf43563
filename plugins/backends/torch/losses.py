"""Small loss helpers shared by the torch policies of several algorithms."""

from __future__ import annotations

from typing import Any

import torch


def normalize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """Mean 0, std 1 over the (mini)batch; a single row is left as it is."""
    if advantages.numel() <= 1:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def actor_critic_loss(
    dist: Any,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    value_targets: torch.Tensor,
    vf_loss_coeff: float,
    entropy_coeff: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The advantage actor-critic loss (Mnih et al. 2016, arXiv:1602.01783) and its stats (detached).

    Policy gradient on the given advantages, plus ``vf_loss_coeff`` times half
    the squared error of the value head, minus ``entropy_coeff`` times the
    entropy. A2C and A3C share it: they differ in how gradients reach the
    weights, not in the loss. The TF backend's twin computes the same terms
    in the same order.
    """
    policy_loss = -(dist.logp(actions) * advantages).mean()
    vf_loss = 0.5 * ((values - value_targets) ** 2).mean()
    entropy = dist.entropy().mean()
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    return loss, {
        "policy_loss": policy_loss.detach(),
        "vf_loss": vf_loss.detach(),
        "entropy": entropy.detach(),
    }
