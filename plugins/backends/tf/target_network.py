"""A whole-model target network for a TF policy: a second ``make_model()`` kept in step by assignment.

The torch backend's ``TargetModel``, method for method (see there): the same names
and layout as ``get_weights``, so a checkpoint's target network moves between backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.plugins.backends.tf.models import named_variables


class TargetModel:
    target_model: Any = None

    def make_target_model(self) -> None:
        """The target network starts as an exact copy of the online one."""
        self.target_model = self.make_model()
        self.target_variables = named_variables(self.target_model)
        self.update_target(1.0)

    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target``; ``tau=1`` copies (exactly)."""
        for (_, target), (_, online) in zip(self.target_variables, self.named_variables, strict=True):
            if tau >= 1.0:
                target.assign(online)
            else:
                target.assign(target + tau * (online - target))  # torch's lerp_

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target network's weights, named and laid out like :meth:`get_weights`."""
        return {name: var.numpy().copy() for name, var in self.target_variables}

    def check_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Raise, naming the weight, if ``weights`` do not fit the target network (changes nothing)."""
        self.check_weights(weights)

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.check_weights(weights)  # checks every weight before changing any
        self.assign_weights(self.target_variables, weights)
