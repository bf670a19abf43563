"""TQC hyperparameters: SAC's keys plus the quantile critics' (Kuznetsov et al. 2020).

``n_quantiles`` (25) and ``top_quantiles_to_drop_per_net`` (2) are the paper's and sb3-contrib's
defaults. ``n_critics`` defaults to the paper's 5 (Kuznetsov et al. 2020, section 5: N = 5 critics,
M = 25 atoms, d = 2 dropped per critic for most MuJoCo tasks); sb3-contrib's ``TQCPolicy`` defaults
to 2 critics, which rl-baselines3-zoo's tuned settings (and ``configs/tqc-pendulum.yaml``) use.
The rest (lr 3e-4, tau 0.005, gamma 0.99, a tuned alpha towards -|A|) is SAC's, as in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.sac.config import SACConfig


@dataclass
class TQCConfig(SACConfig):
    """Truncated quantile critics (Kuznetsov et al. 2020) on SAC's actor and temperature."""

    n_critics: int = doc(
        "Quantile critics (the paper's N; 5 as the paper, sb3-contrib's default is 2), each with its "
        "own target copy; their target atoms are pooled before the top ones are dropped.",
        5,
    )
    n_quantiles: int = doc(
        "Atoms per critic (the paper's M): critic k outputs the quantiles at (2i + 1) / (2M), i < M.", 25
    )
    top_quantiles_to_drop_per_net: int = doc(
        "Atoms dropped per critic (the paper's d): the target keeps the smallest n_critics x "
        "(n_quantiles - d) of the pooled n_critics x n_quantiles target atoms (sb3-contrib's name).",
        2,
    )

    def check(self, fail) -> None:
        super().check(fail)
        for key in ("n_critics", "n_quantiles"):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        if not 0 <= self.top_quantiles_to_drop_per_net < self.n_quantiles:
            raise fail(
                "training.top_quantiles_to_drop_per_net",
                f"expected 0 to n_quantiles - 1 ({self.n_quantiles - 1}) so that some target atoms are "
                f"kept, got {self.top_quantiles_to_drop_per_net}",
            )
        if self.use_sde:
            raise fail("training.use_sde", "expected false: tqc has no gSDE exploration (use sac for gSDE)")

    def kept_atoms(self) -> int:
        """How many of the pooled target atoms the target keeps: ``n_critics x (n_quantiles - d)``."""
        return self.n_critics * (self.n_quantiles - self.top_quantiles_to_drop_per_net)
