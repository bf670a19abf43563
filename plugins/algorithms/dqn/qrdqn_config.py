"""QR-DQN hyperparameters: DQN's keys with C51's support and the scalar TD loss replaced by quantiles.

Dabney et al. 2018 ("Distributional Reinforcement Learning with Quantile Regression", QR-DQN)
keep DQN's network, replay and target network and change what the network outputs (``N``
quantile estimates per action at the fixed fractions ``tau_i = (2i + 1) / (2N)``) and the loss
(the quantile Huber loss, eq. 10). So every DQN switch keeps its name and meaning here (double
Q, dueling, n-step, prioritized replay, noisy nets, the epsilon schedule), and the keys that
have no meaning for quantiles are fixed rather than offered: C51's support (``v_min``, ``v_max``)
and the scalar TD loss (``td_error_loss_fn``, ``huber_delta``: ``kappa`` is the quantile loss's
threshold). ``num_atoms`` stays a key only to be refused with a message saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.dqn.config import DQNConfig


def quantile_midpoints(num_quantiles: int) -> np.ndarray:
    """``tau_i = (2i + 1) / (2N)``, i = 0..N-1, float32: the quantile fractions whose estimates minimise
    the 1-Wasserstein distance to the target distribution (Dabney et al. 2018, Lemma 2)."""
    return ((2 * np.arange(num_quantiles, dtype=np.float64) + 1) / (2 * num_quantiles)).astype(np.float32)


@dataclass
class QRDQNConfig(DQNConfig):
    """DQN's keys (see :class:`~rlgear.plugins.algorithms.dqn.config.DQNConfig`) plus the number of
    quantiles and the quantile Huber loss's ``kappa``."""

    # Fixed: C51's support and the scalar TD loss have no meaning for quantiles (module docstring).
    v_min: ClassVar[float] = -10.0
    v_max: ClassVar[float] = 10.0
    td_error_loss_fn: ClassVar[str] = "huber"
    huber_delta: ClassVar[float] = 1.0

    num_quantiles: int = doc(
        "Quantile estimates per action, at the fractions tau_i = (2i + 1) / (2N) (Dabney et al. 2018; "
        "their Atari runs and sb3-contrib's QR-DQN default use 200; rl-zoo tunes CartPole with 10).",
        200,
    )
    kappa: float = doc(
        "Threshold of the quantile Huber loss |tau - 1{u < 0}| L_kappa(u) / kappa (Dabney et al. 2018, "
        "eq. 10; QR-DQN-1 is kappa 1). 0 is the plain quantile loss |tau - 1{u < 0}| |u| (QR-DQN-0).",
        1.0,
    )
    num_atoms: int = doc(
        "C51's atom count: refused by qrdqn, whose return distribution is num_quantiles quantiles "
        "(leave it at 1; C51 is dqn with num_atoms > 1).",
        1,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if self.num_atoms != 1:
            raise fail(
                "training.num_atoms",
                f"qrdqn learns num_quantiles quantiles, not C51's atoms: expected 1 (unset), got "
                f"{self.num_atoms}; set training.num_quantiles, or use algorithm dqn for C51",
            )
        if self.num_quantiles < 1:
            raise fail(
                "training.num_quantiles",
                f"expected a positive integer (Dabney et al. 2018 use 200), got {self.num_quantiles}",
            )
        if self.kappa < 0:
            raise fail(
                "training.kappa",
                f"expected 0 (the plain quantile loss) or a positive number (1 is QR-DQN-1), got {self.kappa}",
            )
