"""A2C hyperparameters; the defaults are Stable-Baselines3's (and OpenAI baselines')."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc
from rlgear.plugins.families.onpolicy import SGDSchedule


@dataclass
class A2CConfig(TrainingConfig):
    lr: float = doc("Learning rate.", 7e-4)
    optimizer: str = doc(
        "Optimizer; RMSprop as in the paper and in SB3 (alpha 0.99). Any value of the common "
        "training.optimizer works (a built-in or a dotted path).",
        "rmsprop",
    )
    train_batch_size: int = doc(
        "Env steps per training step (all envs together), one gradient step on them: "
        "n_steps x envs, e.g. 5 x 8 = 40 as SB3's n_steps=5 with 8 envs.",
        40,
    )
    gae_lambda: float = doc("GAE lambda: 1 is the paper's n-step return, 0 one-step TD.", 1.0)
    vf_loss_coeff: float = doc(
        "Weight of the value loss 0.5 * (V(s_t) - target)^2 (rlgear's value loss has the 0.5; "
        "SB3's vf_coef multiplies the plain mean squared error).",
        0.5,
    )
    entropy_coeff: float = doc("Weight of the entropy bonus.", 0.0)
    normalize_advantages: bool = doc(
        "Normalize the advantages over each train batch (mean 0, std 1); off in SB3's A2C.", False
    )
    grad_clip: float | None = doc("Clip the global gradient norm to this value.", 0.5)

    def sgd_schedule(self) -> SGDSchedule:
        """One gradient step on the whole batch (A2C: one synchronous update per batch)."""
        return SGDSchedule()

    def check(self, fail) -> None:
        if not 0 <= self.gae_lambda <= 1:
            raise fail("training.gae_lambda", f"expected a number in [0, 1], got {self.gae_lambda}")
        for key in ("vf_loss_coeff", "entropy_coeff"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
