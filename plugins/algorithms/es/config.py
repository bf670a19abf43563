"""es hyperparameters (defaults after Salimans et al. 2017 and RLlib's ES, scaled to one machine)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.evolution.config import EvolutionConfig


@dataclass
class ESConfig(EvolutionConfig):
    stepsize: float = doc("Adam's step size on the flat parameter vector.", 0.01)
    l2_coeff: float = doc("Weight decay: l2_coeff * theta is added to the (negated) search gradient.", 0.005)
    adam_beta1: float = doc("Adam's first-moment decay.", 0.9)
    adam_beta2: float = doc("Adam's second-moment decay.", 0.999)
    adam_epsilon: float = doc("Adam's epsilon.", 1e-8)

    def check(self, fail) -> None:
        super().check(fail)
        if self.stepsize <= 0:
            raise fail("training.stepsize", f"expected a positive number, got {self.stepsize}")
        if self.l2_coeff < 0:
            raise fail("training.l2_coeff", f"expected 0 or more, got {self.l2_coeff}")
        for key in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a number in [0, 1), got {getattr(self, key)}")
        if self.adam_epsilon <= 0:
            raise fail("training.adam_epsilon", f"expected a positive number, got {self.adam_epsilon}")
