"""Discrete SAC's framework-free pieces, shared by its torch and TF policies: the default target
entropy (Christodoulou 2019, arXiv:1910.07207); acting from the logits is
:func:`rlgear.policy.categorical_sample`."""

from __future__ import annotations

import math
from typing import Any


def discrete_target_entropy(config: Any, num_actions: int) -> float:
    """``training.target_entropy``, or ``target_entropy_scale x log(n)`` when it is null."""
    training = config.training
    if training.target_entropy is not None:
        return float(training.target_entropy)
    return float(training.target_entropy_scale) * math.log(num_actions)
