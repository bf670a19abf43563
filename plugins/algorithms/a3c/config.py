"""A3C hyperparameters; defaults after the paper and Stable-Baselines3's A2C (its synchronous twin)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc


@dataclass
class A3CConfig(TrainingConfig):
    lr: float = doc("Learning rate of the learner's (the global network's) optimizer.", 7e-4)
    optimizer: str = doc(
        "Optimizer; RMSprop as in the paper (shared statistics: the learner holds them). Any value of the "
        "common training.optimizer works (a built-in or a dotted path).",
        "rmsprop",
    )
    train_batch_size: int = doc(
        "Env steps behind one gradient: each worker samples this many (fragment length x its envs), "
        "computes the gradient on them and sends it to the learner.",
        40,
    )
    gae_lambda: float = doc("GAE lambda: 1 is the paper's n-step return, 0 one-step TD.", 1.0)
    vf_loss_coeff: float = doc("Weight of the value loss 0.5 * (V(s_t) - target)^2.", 0.5)
    entropy_coeff: float = doc("Weight of the entropy bonus (the paper uses 0.01).", 0.0)
    grad_clip: float | None = doc(
        "Clip the global norm of each arriving gradient to this value (applied by the learner).", 0.5
    )

    def check(self, fail) -> None:
        if not 0 <= self.gae_lambda <= 1:
            raise fail("training.gae_lambda", f"expected a number in [0, 1], got {self.gae_lambda}")
        for key in ("vf_loss_coeff", "entropy_coeff"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
