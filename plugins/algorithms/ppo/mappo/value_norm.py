"""MAPPO's value normalization (Yu et al. 2022, Sec. 4.1 "Value Normalization"), framework-free.

The critic predicts *normalized* values; the running mean and variance of the value targets turn
them back into returns for GAE. The statistics are a debiased exponential moving average, as in the
authors' ``ValueNorm`` (``onpolicy/algorithms/utils/valuenorm.py``: ``beta=0.99999``,
``epsilon=1e-5``, variance clamped at ``1e-2``)::

    mean_ema    <- beta * mean_ema    + (1 - beta) * mean(x)
    mean_sq_ema <- beta * mean_sq_ema + (1 - beta) * mean(x^2)
    debias      <- beta * debias      + (1 - beta)
    mean = mean_ema / max(debias, eps),  var = max(mean_sq_ema / max(debias, eps) - mean^2, 1e-2)

Why numpy and float64: the statistics are three scalars updated once per train batch; keeping them
outside the framework makes them identical on both backends and lets them travel with the weights
(``critic/value_norm/...``), so remote workers denormalize with the learner's statistics.
"""

from __future__ import annotations

import numpy as np

BETA = 0.99999
EPSILON = 1e-5
MIN_VARIANCE = 1e-2
#: The neutral weight names the statistics travel under (with the critic's weights).
PREFIX = "critic/value_norm/"
KEYS = ("running_mean", "running_mean_sq", "debiasing_term")


class ValueNorm:
    """Running, debiased mean and variance of the value targets (module docstring)."""

    def __init__(self, beta: float = BETA, epsilon: float = EPSILON):
        self.beta, self.epsilon = float(beta), float(epsilon)
        self.running_mean = 0.0
        self.running_mean_sq = 0.0
        self.debiasing_term = 0.0

    def update(self, targets: np.ndarray) -> None:
        """One EMA step with a train batch's value targets (all of them: one update per batch)."""
        x = np.asarray(targets, dtype=np.float64).reshape(-1)
        if x.size == 0:
            return
        b = self.beta
        self.running_mean = b * self.running_mean + (1.0 - b) * float(x.mean())
        self.running_mean_sq = b * self.running_mean_sq + (1.0 - b) * float((x * x).mean())
        self.debiasing_term = b * self.debiasing_term + (1.0 - b)

    def mean_var(self) -> tuple[float, float]:
        """The debiased mean and variance (variance at least ``1e-2``)."""
        debias = max(self.debiasing_term, self.epsilon)
        mean = self.running_mean / debias
        var = max(self.running_mean_sq / debias - mean * mean, MIN_VARIANCE)
        return mean, var

    def normalize(self, values: np.ndarray) -> np.ndarray:
        mean, var = self.mean_var()
        return ((np.asarray(values, np.float64) - mean) / np.sqrt(var)).astype(np.float32)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        mean, var = self.mean_var()
        return (np.asarray(values, np.float64) * np.sqrt(var) + mean).astype(np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        """The statistics as weights (``critic/value_norm/<key>``, float64 ``[1]``)."""
        return {PREFIX + key: np.array([getattr(self, key)], np.float64) for key in KEYS}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Take the statistics from a weights dict; one without them (a mappo checkpoint always has
        them) is refused, naming what is missing."""
        missing = [PREFIX + key for key in KEYS if PREFIX + key not in weights]
        if missing:
            raise ValueError(f"weights are missing {missing} (training.value_normalization statistics)")
        for key in KEYS:
            setattr(self, key, float(np.asarray(weights[PREFIX + key]).reshape(-1)[0]))
