"""IQL hyperparameters; names as CORL's and d3rlpy's IQL (defaults: the paper's locomotion settings)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.offline import OfflineTrainingConfig


@dataclass
class IQLConfig(OfflineTrainingConfig):
    """Implicit Q-learning (Kostrikov et al. 2021, "Offline Reinforcement Learning with Implicit
    Q-Learning", Algorithm 1)."""

    lr: float = doc("Learning rate (Adam) of the actor, the value function and the critics.", 3e-4)
    expectile: float = doc(
        "The expectile tau of V's regression |tau - 1(u < 0)| u^2 on u = min_k Q'_k(s, a) - V(s): "
        "0.5 is the mean (SARSA-like), towards 1 the maximum over the dataset's actions (paper: 0.7 "
        "locomotion, 0.9 antmaze).",
        0.7,
    )
    beta: float = doc(
        "Inverse temperature of the actor's advantage weights exp(beta * (min_k Q'_k(s, a) - V(s))) "
        "(paper: 3.0 locomotion, 10.0 antmaze); 0 is behaviour cloning.",
        3.0,
    )
    max_weight: float = doc("Upper clip of the advantage weights (the paper's 100).", 100.0)
    tau: float = doc(
        "Polyak averaging of the target critics after every gradient step: "
        "target <- tau * online + (1 - tau) * target.",
        0.005,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if not 0 < self.expectile < 1:
            raise fail("training.expectile", f"expected a number in (0, 1), got {self.expectile}")
        if self.beta < 0:
            raise fail("training.beta", f"expected 0 or more, got {self.beta}")
        if self.max_weight <= 0:
            raise fail("training.max_weight", f"expected a positive number, got {self.max_weight}")
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1], got {self.tau}")
