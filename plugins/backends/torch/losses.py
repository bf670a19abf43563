"""Small loss helpers shared by the torch policies of several algorithms."""

from __future__ import annotations

import torch


def normalize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """Mean 0, std 1 over the (mini)batch; a single row is left as it is."""
    if advantages.numel() <= 1:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
