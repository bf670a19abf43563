"""PG hyperparameters, with defaults that work for small control tasks."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc
from rlgear.plugins.families.onpolicy import SGDSchedule


@dataclass
class PGConfig(TrainingConfig):
    lr: float = doc("Learning rate of the policy and the value baseline.", 1e-3)
    train_batch_size: int = doc(
        "Env steps per training step (all envs together); one gradient step is taken on them.", 2000
    )
    use_baseline: bool = doc(
        "Subtract a learned value baseline V(s_t) from the return (REINFORCE with baseline, "
        "Sutton & Barto 2018, section 13.4). Off: plain REINFORCE, which needs "
        "workers.batch_mode: complete_episodes (there is no value to bootstrap a cut episode from).",
        True,
    )
    vf_loss_coeff: float = doc(
        "Weight of the value loss 0.5 * (V(s_t) - G_t)^2 (unused without a baseline).", 0.5
    )
    entropy_coeff: float = doc("Weight of the entropy bonus.", 0.0)
    normalize_advantages: bool = doc(
        "Normalize the advantages over each train batch (mean 0, std 1): a variance reduction "
        "that matters most without a baseline.",
        True,
    )

    def sgd_schedule(self) -> SGDSchedule:
        """One gradient step on the whole batch, as REINFORCE takes (the batch is on-policy for one step)."""
        return SGDSchedule()

    def check(self, fail) -> None:
        for key in ("vf_loss_coeff", "entropy_coeff"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
