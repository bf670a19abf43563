"""ars hyperparameters (Mania et al. 2018's notation: alpha = stepsize, nu = noise_stdev,
N = num_perturbations, b = num_top_directions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config.schema import doc
from rlgear.plugins.families.evolution.config import EvolutionConfig


@dataclass
class ARSConfig(EvolutionConfig):
    num_perturbations: int = doc("Directions N per training step (each an antithetic pair of episodes).", 16)
    noise_stdev: float = doc("Exploration noise nu: the directions are theta +- nu * delta.", 0.03)
    policy_model: Literal["linear", "mlp"] = doc(
        "The numpy policy: linear (the paper's, obs @ kernel + bias, starting at 0) or the catalog MLP "
        "(model.hidden_sizes, model.activation).",
        "linear",
    )
    stepsize: float = doc("Step size alpha.", 0.02)
    num_top_directions: int | None = doc(
        "b: only the b directions with the best max(r+, r-) make the step (ARS V1-t / V2-t); "
        "null: all N (V1 / V2).",
        None,
    )
    version: Literal["v1", "v2"] = doc(
        "v1: raw observations; v2: observations normalised by their running mean and std (turns "
        "model.observation_filter to mean_std).",
        "v2",
    )

    def check(self, fail) -> None:
        super().check(fail)
        if self.stepsize <= 0:
            raise fail("training.stepsize", f"expected a positive number, got {self.stepsize}")
        b = self.num_top_directions
        if b is not None and not 1 <= b <= self.num_perturbations:
            raise fail(
                "training.num_top_directions",
                f"expected 1 to num_perturbations ({self.num_perturbations}) or null, got {b}",
            )
