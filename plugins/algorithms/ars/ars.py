"""ars: the update of Mania et al. 2018 (Algorithm 1, V1-t and V2-t).

Per training step, with N directions ``delta_k`` scored as pairs ``theta +- nu delta_k``
(:class:`rlgear.plugins.families.evolution.evolution.EvolutionTrainer`):

1. keep the b directions with the largest ``max(r+_k, r-_k)``;
2. ``sigma_R`` = standard deviation of those 2b returns;
3. ``theta += alpha / (b sigma_R) * sum_k (r+_k - r-_k) delta_k``.

V2 differs from V1 only in the state normalisation, which is the evaluators'
observation filter (mean and std over every state seen by every worker).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.ars.config import ARSConfig
from rlgear.plugins.families.evolution.evolution import EvolutionTrainer


def ars_step(
    returns: np.ndarray, noise: np.ndarray, stepsize: float, num_top: int | None
) -> tuple[np.ndarray, float]:
    """``(alpha / (b sigma_R) * sum_k (r+_k - r-_k) delta_k, sigma_R)`` over the top ``num_top``
    directions (all when None). ``returns`` ``[N, 2]``, ``noise`` ``[N, P]``."""
    b = len(returns) if num_top is None else num_top
    top = np.argsort(-returns.max(axis=1), kind="stable")[:b]
    sigma_r = float(returns[top].std())
    if sigma_r < 1e-8:  # every kept return equal: no direction is better than another
        return np.zeros(noise.shape[1]), sigma_r
    step = stepsize / (b * sigma_r) * ((returns[top, 0] - returns[top, 1]) @ noise[top].astype(np.float64))
    return step, sigma_r


class ARS(EvolutionTrainer):
    name = "ars"
    description = "augmented random search (Mania et al. 2018), V1/V2, top-b: numpy policy, no backend"
    config_class: ClassVar[type] = ARSConfig

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        if config.training.version == "v1" and config.model.observation_filter != "none":
            raise config.fail(
                "model.observation_filter",
                "ars v1 acts on raw observations: set it to none, or use training.version: v2 "
                "(which normalises them)",
            )

    def setup(self, config: RunConfig) -> None:
        if config.training.version == "v2" and config.model.observation_filter != "mean_std":
            config = dataclasses.replace(
                config, model=dataclasses.replace(config.model, observation_filter="mean_std")
            )
            self.config = config
        super().setup(config)

    def update(
        self, theta: np.ndarray, noise: np.ndarray, returns: np.ndarray
    ) -> tuple[np.ndarray, dict[str, Any]]:
        t = self.config.training
        step, sigma_r = ars_step(returns, noise, t.stepsize, t.num_top_directions)
        return theta + step, {"return_std": sigma_r}
