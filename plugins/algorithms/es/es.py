"""es: the update of Salimans et al. 2017 (Algorithm 2 with antithetic pairs, and their code's tricks).

Per training step, with pairs ``theta +- sigma * eps_i`` scored by whole episodes
(:class:`rlgear.plugins.families.evolution.evolution.EvolutionTrainer`):

1. fitness shaping: every return is replaced by its centred rank in ``[-0.5, 0.5]``
   over all ``2n`` returns (robust to the returns' scale and outliers);
2. search gradient ``g = sum_i (F(+)_i - F(-)_i) eps_i / (2n)``;
3. weight decay: ``-g + l2_coeff * theta`` is the step Adam minimises.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rlgear.plugins.algorithms.es.config import ESConfig
from rlgear.plugins.families.evolution.evolution import EvolutionTrainer


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Each value's rank over all of ``x`` (any shape; 0 = smallest), mapped linearly onto
    ``[-0.5, 0.5]`` (Salimans et al.'s ``compute_centered_ranks``; ties by position)."""
    flat = np.asarray(x).ravel()
    ranks = np.empty(flat.size, np.float64)
    ranks[flat.argsort(kind="stable")] = np.arange(flat.size)
    if flat.size > 1:
        ranks = ranks / (flat.size - 1) - 0.5
    else:
        ranks[:] = 0.0
    return ranks.reshape(np.shape(x))


class Adam:
    """Adam (Kingma & Ba 2014) on a flat float64 vector: ``step(grad)`` is what to add to theta."""

    def __init__(self, size: int, beta1: float, beta2: float, epsilon: float):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.m = np.zeros(size, np.float64)
        self.v = np.zeros(size, np.float64)
        self.t = 0

    def step(self, grad: np.ndarray, stepsize: float) -> np.ndarray:
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        a = stepsize * np.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        return -a * self.m / (np.sqrt(self.v) + self.epsilon)


class ES(EvolutionTrainer):
    name = "es"
    description = "evolution strategies (Salimans et al. 2017): numpy policy, no backend"
    config_class: ClassVar[type] = ESConfig

    def setup(self, config: Any) -> None:
        super().setup(config)
        t = config.training
        self.adam = Adam(self.layout.size, t.adam_beta1, t.adam_beta2, t.adam_epsilon)

    def update(
        self, theta: np.ndarray, noise: np.ndarray, returns: np.ndarray
    ) -> tuple[np.ndarray, dict[str, float]]:
        t = self.config.training
        shaped = centered_ranks(returns)
        g = (shaped[:, 0] - shaped[:, 1]) @ noise.astype(np.float64) / returns.size
        grad = -g + t.l2_coeff * theta
        return theta + self.adam.step(grad, t.stepsize), {"grad_norm": float(np.linalg.norm(g))}

    # --- checkpoints: Adam's state besides the shared parts ---------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {**super().get_algorithm_state(), "adam_t": self.adam.t}

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        super().set_algorithm_state(state)
        self.adam.t = int(state["adam_t"])

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        return {**super().get_algorithm_arrays(), "adam_m": self.adam.m, "adam_v": self.adam.v}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        super().set_algorithm_arrays(arrays)
        self.adam.m = np.asarray(arrays["adam_m"], np.float64)
        self.adam.v = np.asarray(arrays["adam_v"], np.float64)
