"""The ``training`` keys of every offline algorithm: how many updates an iteration takes, on what."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc


@dataclass
class OfflineTrainingConfig(TrainingConfig):
    """An offline algorithm's loop: ``num_gradient_steps_per_iteration`` learner updates per
    iteration, each on ``train_batch_size`` dataset rows. No env steps are sampled, so
    ``min_env_steps_per_iteration`` has no effect."""

    requires_env: ClassVar[bool] = False

    train_batch_size: int = doc("Dataset rows per gradient step (the minibatch).", 256)
    num_gradient_steps_per_iteration: int = doc(
        "Learner updates (gradient steps) per training iteration; results count them in "
        "learner/num_gradient_steps, which stop may name.",
        100,
    )
    evaluation_interval: int = doc(
        "Every N iterations, run greedy evaluation episodes in env (when the config has one) and "
        "report evaluation/episode_return_mean etc. (0: never).",
        1,
    )

    def check(self, fail) -> None:
        for key in ("train_batch_size", "num_gradient_steps_per_iteration"):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
