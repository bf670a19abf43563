"""The ``training`` keys of every offline algorithm: how many updates an iteration takes, on what."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc

#: The off-policy estimators an offline run can report (``offline/ope/<method>``).
OPE_METHODS = ("is", "wis", "pdis", "pdwis", "dr", "fqe")


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

    ope_interval: int = doc(
        "Every N iterations, report off-policy estimates of the current policy's expected discounted "
        "return (gamma) from the dataset as offline/ope/<method> (0: never); docs/offline-algorithms.md.",
        10,
    )
    ope_methods: list[str] = doc(
        "Off-policy estimators to report: is, wis (trajectory-wise importance sampling, plain and "
        "weighted), pdis, pdwis (per-decision), dr (doubly robust), fqe (fitted Q evaluation). All but "
        "fqe need the behaviour policy's action_logp in the dataset; dr and fqe need Discrete actions.",
        factory=lambda: list(OPE_METHODS),
    )
    ope_episodes: int = doc(
        "Dataset episodes the off-policy estimates use (the first N, the same ones every time).", 100
    )
    fqe_iterations: int = doc(
        "Fitted Q evaluation's regressions (each on targets from the previous one); the values hold "
        "at most this many steps of reward, so it should reach about 1 / (1 - gamma).",
        150,
    )
    fqe_hidden_sizes: list[int] = doc(
        "Fitted Q evaluation's model: a numpy ReLU MLP with these hidden layers, or [] for a linear "
        "model solved exactly by least squares (exact for one-hot observations).",
        factory=lambda: [64],
    )

    def check(self, fail) -> None:
        for key in ("train_batch_size", "num_gradient_steps_per_iteration"):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        for key in ("ope_interval", "ope_episodes", "fqe_iterations"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or a positive integer, got {getattr(self, key)}")
        unknown = [m for m in self.ope_methods if m not in OPE_METHODS]
        if unknown:
            raise fail(
                "training.ope_methods", f"unknown method(s) {unknown}: expected some of {list(OPE_METHODS)}"
            )
        if any(int(h) < 1 for h in self.fqe_hidden_sizes):
            raise fail(
                "training.fqe_hidden_sizes", f"expected positive layer sizes, got {self.fqe_hidden_sizes}"
            )
