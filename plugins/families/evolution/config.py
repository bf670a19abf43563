"""The hyperparameters es and ars share: the noise table, the perturbations, the policy, the reporting.

Both derive from :class:`~rlgear.config.BaseTrainingConfig` (no learning rate,
optimizer or discount: they take no gradient step) through
:class:`EvolutionConfig`, and are trained by
:class:`rlgear.plugins.families.evolution.evolution.EvolutionTrainer`, which reads exactly these keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config import BaseTrainingConfig
from rlgear.config.schema import doc


@dataclass
class EvolutionConfig(BaseTrainingConfig):
    num_perturbations: int = doc(
        "Antithetic pairs (theta + noise_stdev * eps, theta - noise_stdev * eps) scored per training step, "
        "one whole episode each.",
        32,
    )
    perturbations_per_task: int = doc(
        "Pairs one worker request scores (its env slots play them side by side). Smaller spreads the "
        "work more evenly over workers; larger sends fewer requests.",
        8,
    )
    noise_stdev: float = doc("Standard deviation of the parameter perturbations (sigma, nu in ARS).", 0.02)
    noise_table_size: int = doc(
        "float32 Gaussian numbers in the shared noise table (each worker builds it once from "
        "noise_table_seed; a perturbation is a slice of it, sent as its start index).",
        10_000_000,
    )
    noise_table_seed: int = doc("Seed of the shared noise table (the same in every worker).", 123)
    policy_model: Literal["linear", "mlp"] = doc(
        "The numpy policy: linear (obs @ kernel + bias) or the catalog MLP (model.hidden_sizes, "
        "model.activation).",
        "mlp",
    )
    report_episodes: int = doc(
        "Episodes of the unperturbed policy per training step, for reporting: episode_return_mean and the "
        "stop condition read these (with metrics_window). Their env steps count in timesteps_total.",
        4,
    )

    def check(self, fail) -> None:
        for key in ("num_perturbations", "perturbations_per_task", "noise_table_size"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        if self.noise_stdev <= 0:
            raise fail("training.noise_stdev", f"expected a positive number, got {self.noise_stdev}")
        if self.report_episodes < 0:
            raise fail("training.report_episodes", f"expected 0 or more, got {self.report_episodes}")
