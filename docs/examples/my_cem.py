"""cem: the cross-entropy method over the weights of a linear policy (a complete algorithm plugin).

Per training step (Szita & Lorincz 2006, "Learning Tetris Using the Noisy
Cross-Entropy Method"):
  1. draw ``population`` weight vectors from N(mean, std^2);
  2. score each by the mean return of ``episodes_per_candidate`` whole episodes;
  3. refit mean and std to the ``elite_fraction`` best vectors (plus
     ``extra_std`` noise, decaying), and act with the mean.

No gradient, so no framework: the policy is rlgear's numpy MLP with no hidden
layer, listed under ``"*"`` so it runs under any ``backend:`` value and the run
imports neither torch nor tensorflow. The config derives from
``BaseTrainingConfig``: no ``lr``, ``gamma`` or ``optimizer`` keys. The whole
population is scored in one vectorized pass per worker (each env slot plays its
own candidate), and the scores come back as episode returns.
Registered with ``rlgear.algorithms = cem = my_cem:CEM``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config import BaseTrainingConfig, RunConfig
from rlgear.config.schema import doc
from rlgear.numpy_policy import NumpyMLPPolicy
from rlgear.plugins.families.evolution.population import parallel_evaluate_population
from rlgear.trainer import Trainer


@dataclass
class CEMConfig(BaseTrainingConfig):
    population: int = doc("Candidate weight vectors per training step.", 16)
    episodes_per_candidate: int = doc("Whole episodes that score one candidate (their mean return).", 2)
    elite_fraction: float = doc("Fraction of the candidates the distribution is refit to.", 0.25)
    init_std: float = doc("Initial standard deviation of every weight.", 1.0)
    extra_std: float = doc("Noise added to the refit std (decays linearly to 0).", 0.1)
    extra_std_decay_steps: int = doc("Training steps over which extra_std decays to 0.", 20)
    report_episodes: int = doc("Episodes of the mean per step, for episode_return_mean.", 4)

    def check(self, fail) -> None:  # the training keys alone: types are already checked
        if self.population < 2:
            raise fail("training.population", f"expected 2 or more, got {self.population}")
        if not 0 < self.elite_fraction <= 1:
            raise fail("training.elite_fraction", f"expected a number in (0, 1], got {self.elite_fraction}")
        if self.episodes_per_candidate < 1:
            raise fail(
                "training.episodes_per_candidate", f"expected 1 or more, got {self.episodes_per_candidate}"
            )


class LinearPolicy(NumpyMLPPolicy):
    """``obs @ kernel + bias``: argmax for Discrete actions, the value itself for Box (clipped by rlgear)."""

    def hidden_layer_sizes(self, config: RunConfig) -> list[int]:
        return []


class CEM(Trainer):
    name = "cem"
    description = "cross-entropy method over a linear policy's weights (numpy)"
    config_class = CEMConfig
    policies = {"*": "my_cem:LinearPolicy"}  # framework-free: every backend name, no framework imported
    action_spaces = frozenset({"discrete", "continuous"})

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.layout = self.policy.layout  # weight dict <-> flat vector
        self.mean = self.layout.flatten(self.policy.get_weights())
        self.std = np.full_like(self.mean, config.training.init_std)
        self.rng = np.random.default_rng(config.seed)
        self.num_steps = 0

    def training_step(self) -> dict[str, float]:
        training = self.config.training
        candidates = self.mean + self.std * self.rng.standard_normal((training.population, self.mean.size))
        scored = parallel_evaluate_population(self.workers, candidates, training.episodes_per_candidate)
        scores = scored.returns.mean(axis=1)  # whole episodes, the final step's reward included
        num_elite = max(1, round(training.elite_fraction * training.population))
        elite = candidates[np.argsort(scores)[-num_elite:]]
        extra = training.extra_std * max(0.0, 1 - self.num_steps / training.extra_std_decay_steps)
        self.mean, self.std = elite.mean(axis=0), elite.std(axis=0) + extra
        self.num_steps += 1
        self.policy.set_weights(self.layout.unflatten(self.mean))  # greedy evaluation and checkpoints
        self.workers.sync_weights()
        if training.report_episodes:  # the mean's episodes are the run's episode_return_mean
            parallel_evaluate_population(self.workers, self.mean[None], training.report_episodes, True)
        return {
            "score_mean": float(scores.mean()),
            "score_max": float(scores.max()),
            "std": float(self.std.mean()),
        }

    # --- checkpoints: what the policy does not hold --------------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {"num_steps": self.num_steps, "rng": self.rng.bit_generator.state}

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.num_steps = int(state["num_steps"])
        self.rng.bit_generator.state = state["rng"]

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "std": self.std}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean, self.std = arrays["mean"], arrays["std"]
