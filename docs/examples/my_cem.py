"""cem: the cross-entropy method over the weights of a linear policy (a complete algorithm plugin).

Per training step (Szita & Lorincz 2006, "Learning Tetris Using the Noisy
Cross-Entropy Method"):
  1. draw ``population`` weight vectors from N(mean, std^2);
  2. score each: run it for whole episodes (at least ``train_batch_size`` env
     steps) and average their returns;
  3. refit mean and std to the ``elite_fraction`` best vectors (plus
     ``extra_std`` noise, decaying), and act with the mean.

No gradient, so no framework: the policy is numpy. Registered with
``rlgear.algorithms = cem = my_cem:CEM``; run with ``algorithm: cem`` and
``workers.batch_mode: complete_episodes`` (check_config refuses anything else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config import RunConfig, TrainingConfig
from rlgear.config.schema import doc
from rlgear.execution.rollout_ops import synchronous_parallel_sample
from rlgear.policy import Policy, PolicyState, action_dim, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Discrete, flat_dim
from rlgear.trainer import Trainer
from rlgear.value_ops import discounted_return


@dataclass
class CEMConfig(TrainingConfig):
    train_batch_size: int = doc("Env steps (in whole episodes) that score one candidate.", 200)
    population: int = doc("Candidate weight vectors per training step.", 16)
    elite_fraction: float = doc("Fraction of the candidates the distribution is refit to.", 0.25)
    init_std: float = doc("Initial standard deviation of every weight.", 1.0)
    extra_std: float = doc("Noise added to the refit std (decays linearly to 0).", 0.1)
    extra_std_decay_steps: int = doc("Training steps over which extra_std decays to 0.", 20)

    def check(self, fail) -> None:  # the training keys alone: types are already checked
        if self.population < 2:
            raise fail("training.population", f"expected 2 or more, got {self.population}")
        if not 0 < self.elite_fraction <= 1:
            raise fail("training.elite_fraction", f"expected a number in (0, 1], got {self.elite_fraction}")


class LinearPolicy(Policy):
    """``obs @ kernel + bias``: argmax for Discrete actions, the value itself for Box (clipped by rlgear)."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        shape = (flat_dim(observation_space), action_dim(action_space))
        self.weights = {
            "policy/kernel": np.zeros(shape, np.float32),
            "policy/bias": np.zeros(shape[1], np.float32),
        }

    def compute_actions(self, timestep, state=None, explore=True):
        obs = flatten_observations(self.observation_space, timestep.observation)
        out = obs @ self.weights["policy/kernel"] + self.weights["policy/bias"]
        if isinstance(self.action_space, Discrete):
            return out.argmax(axis=1), state, {}
        return out.reshape(len(out), *self.action_space.shape), state, {}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        return {}  # CEM learns in the trainer, by setting weights

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self.weights.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        for name, value in self.weights.items():
            if np.shape(weights[name]) != value.shape:  # check all before changing any
                raise ValueError(
                    f"weight '{name}' has shape {np.shape(weights[name])}, expected {value.shape}"
                )
        self.weights = {name: np.array(weights[name], np.float32) for name in self.weights}

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{name}": value for name, value in self.get_weights().items()}
        return PolicyState(arrays, {"global_timestep": self.global_timestep})

    def set_state(self, state: PolicyState) -> None:
        self.set_weights({k.removeprefix("weights/"): v for k, v in state.arrays.items()})
        self.global_timestep = int(state.meta.get("global_timestep", 0))


class CEM(Trainer):
    name = "cem"
    description = "cross-entropy method over a linear policy's weights (numpy)"
    config_class = CEMConfig
    # The numpy policy under every backend name: "numpy" (the backend plugin of
    # docs/examples/my_numpy_backend.py) imports no framework; torch and tf import theirs, unused.
    policies = {"numpy": "my_cem:LinearPolicy", "torch": "my_cem:LinearPolicy", "tf": "my_cem:LinearPolicy"}
    action_spaces = frozenset({"discrete", "continuous"})
    # what `rlgear plugins --check cem` needs for its short runs (check_config refuses the default)
    check_overrides = {"workers": {"batch_mode": "complete_episodes"}}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        if config.workers.batch_mode != "complete_episodes":
            raise config.fail(
                "workers.batch_mode", "cem scores candidates by whole episodes: set it to complete_episodes"
            )

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """One row per episode: its undiscounted return (the fragment is one whole episode, [T, 1])."""
        rewards = fragment[SampleBatch.REWARDS]
        returns = discounted_return(  # gamma 1, no bootstrap value: the plain sum of the episode's rewards
            rewards, np.zeros_like(rewards), fragment[SampleBatch.STEP_TYPES], fragment[SampleBatch.DISCOUNTS]
        )
        return SampleBatch({"episode_return": returns[0], "episode_length": np.array([len(rewards) - 1])})

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.names = sorted(self.policy.get_weights())
        flat = self._flatten(self.policy.get_weights())
        self.mean = flat
        self.std = np.full_like(flat, config.training.init_std)
        self.rng = np.random.default_rng(config.seed)
        self.num_steps = 0

    def _flatten(self, weights: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([weights[name].ravel() for name in self.names])

    def _unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        out, start = {}, 0
        for name, value in self.policy.get_weights().items():
            out[name] = flat[start : start + value.size].reshape(value.shape)
            start += value.size
        return out

    def _use(self, flat: np.ndarray) -> None:
        self.policy.set_weights(self._unflatten(flat))
        self.workers.sync_weights()  # the remote workers act with these weights from their next sample
        # Episodes still running began under the previous weights: drop them (not counted, not reported).
        self.workers.foreach_worker(lambda worker: worker.reset())

    def training_step(self) -> dict[str, float]:
        training = self.config.training
        candidates = self.mean + self.std * self.rng.standard_normal((training.population, self.mean.size))
        scores = np.empty(training.population)
        for i, candidate in enumerate(candidates):
            self._use(candidate)
            rows, _ = synchronous_parallel_sample(self.workers, training.train_batch_size)
            scores[i] = rows["episode_return"].mean()  # the episodes it played, all whole
        num_elite = max(1, round(training.elite_fraction * training.population))
        elite = candidates[np.argsort(scores)[-num_elite:]]
        extra = training.extra_std * max(0.0, 1 - self.num_steps / training.extra_std_decay_steps)
        self.mean, self.std = elite.mean(axis=0), elite.std(axis=0) + extra
        self.num_steps += 1
        self._use(self.mean)  # greedy evaluation and checkpoints use the mean
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
