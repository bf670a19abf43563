"""The machinery es and ars share: noise table, perturbation tasks, the training step around an update rule.

Both algorithms (Salimans et al. 2017, "Evolution Strategies as a Scalable
Alternative to Reinforcement Learning"; Mania et al. 2018, "Simple random
search provides a competitive approach to reinforcement learning") search
the flat parameter vector ``theta`` of a numpy policy by scoring antithetic
pairs ``theta + sigma * eps``, ``theta - sigma * eps``, and differ only in how
they turn the pairs' returns into a step. So everything but that rule lives
here, once, and each plugin is its config and its ``update``:

- **the shared noise table** (:class:`NoiseTable`): one seeded block of
  Gaussian numbers built once per process (``training.noise_table_seed``);
  a perturbation ``eps`` is a slice of it, so a worker is sent the slice's
  start index, never a vector;
- **the worker protocol** (:func:`run_perturbation_task`): a worker receives a
  :class:`PerturbationTask` (noise indices), builds the candidates from the
  ``theta`` it received once per training step (``WorkerSet.sync_weights``,
  one object-store put) and scores them in one vectorized pass over its env
  slots (:func:`~rlgear.plugins.families.evolution.population.evaluate_population`).
  It returns only noise indices, returns and lengths;
- **perturbation bookkeeping and fault tolerance** (:meth:`EvolutionTrainer.training_step`
  over :func:`rlgear.distributed.async_ops.run_tasks`): tasks lost with a dead
  worker are re-issued (``learner/num_reissued_tasks``), env steps of every
  delivered episode are counted;
- **reporting**: the unperturbed policy plays ``training.report_episodes`` per step,
  and only those episodes feed ``episode_return_mean``.

Observation filtering is the evaluators' own (``model.observation_filter: mean_std``,
:mod:`rlgear.sampling.observation_filter`, merged across workers with the weights).
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rlgear.config import RunConfig
from rlgear.distributed.async_ops import run_tasks
from rlgear.errors import CheckpointError
from rlgear.numpy_policy import NumpyMLPPolicy
from rlgear.plugins.families.evolution.config import EvolutionConfig
from rlgear.plugins.families.evolution.population import evaluate_population
from rlgear.trainer import Trainer


class NoiseTable:
    """``size`` float32 standard-normal numbers from ``seed``: every process builds the same table.

    Perturbation ``eps`` of a ``dim``-parameter policy at index ``i`` is
    ``noise[i : i + dim]`` (overlapping slices, as in Salimans et al.'s code: the
    table is far larger than one vector, so the slices are nearly independent).
    """

    def __init__(self, seed: int, size: int):
        self.seed, self.size = int(seed), int(size)
        self.noise = np.random.default_rng(self.seed).standard_normal(self.size, dtype=np.float32)

    def get(self, index: int, dim: int) -> np.ndarray:
        """``eps`` at ``index``: a read-only view ``[dim]``."""
        return self.noise[index : index + dim]

    def get_many(self, indices: np.ndarray, dim: int) -> np.ndarray:
        """``[len(indices), dim]`` float32: the rows ``get(i, dim)``."""
        return (
            np.stack([self.get(int(i), dim) for i in indices])
            if len(indices)
            else np.zeros((0, dim), np.float32)
        )

    def sample_indices(self, rng: np.random.Generator, dim: int, count: int) -> np.ndarray:
        """``count`` start indices, uniform over the positions where a whole ``dim`` slice fits."""
        return rng.integers(0, self.size - dim + 1, size=count, dtype=np.int64)


@functools.lru_cache(maxsize=2)
def shared_noise_table(seed: int, size: int) -> NoiseTable:
    """The process's table for ``(seed, size)``, built on first use (once per worker, never shipped)."""
    return NoiseTable(seed, size)


class EvolutionPolicy(NumpyMLPPolicy):
    """:class:`~rlgear.numpy_policy.NumpyMLPPolicy` with ``training.policy_model``: ``linear`` has no
    hidden layer, ``mlp`` the catalog's (``model.hidden_sizes``)."""

    def hidden_layer_sizes(self, config: Any) -> list[int]:
        return [] if config.training.policy_model == "linear" else list(config.model.hidden_sizes)


@dataclass
class PerturbationTask:
    """One worker request: score the antithetic pairs at ``noise_indices``, and (when
    ``report_episodes`` > 0) play the unperturbed policy for the run's episode metrics."""

    noise_indices: np.ndarray  # int64 [k]
    noise_stdev: float
    table_seed: int
    table_size: int
    report_episodes: int = 0


@dataclass
class PerturbationResult:
    """What a worker sends back: no parameter vector, only indices and episode summaries."""

    noise_indices: np.ndarray  # int64 [k]
    returns: np.ndarray  # float64 [k, 2]: column 0 for theta + sigma * eps, column 1 for theta - sigma * eps
    lengths: np.ndarray  # int64 [k, 2]
    report_returns: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [report_episodes]


def run_perturbation_task(evaluator: Any, task: PerturbationTask) -> tuple[PerturbationResult, int]:
    """Runs in the worker (or in-process): ``(result, env steps taken)``.

    ``theta`` is the weights the worker's policy holds (sent once per training step).
    """
    policy = evaluator.policy
    theta = policy.layout.flatten(policy.weights)
    table = shared_noise_table(task.table_seed, task.table_size)
    eps = table.get_many(task.noise_indices, theta.size)
    k = len(task.noise_indices)
    candidates = np.concatenate([theta + task.noise_stdev * eps, theta - task.noise_stdev * eps])
    scored = evaluate_population(evaluator, candidates, 1)
    steps = scored.env_steps
    result = PerturbationResult(
        np.asarray(task.noise_indices, np.int64),
        np.stack([scored.returns[:k, 0], scored.returns[k:, 0]], axis=1),
        np.stack([scored.lengths[:k, 0], scored.lengths[k:, 0]], axis=1),
    )
    if task.report_episodes:
        report = evaluate_population(evaluator, theta[None], task.report_episodes, report_episodes=True)
        result.report_returns = report.returns[0]
        steps += report.env_steps
    return result, steps


class EvolutionTrainer(Trainer):
    """The training step of es and ars; a subclass sets its config class and implements :meth:`update`.

    Per step: draw ``num_perturbations`` noise indices (the driver's seeded RNG, so
    the search does not depend on which worker answers first), score the pairs on the
    workers, :meth:`update` ``theta`` from their returns, send it to the workers.
    """

    config_class: ClassVar[type] = EvolutionConfig
    policies: ClassVar[dict[str, str]] = {"*": "rlgear.plugins.families.evolution.evolution:EvolutionPolicy"}
    action_spaces = frozenset({"discrete", "continuous"})

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse ``offline.output``: perturbed policies are scored in episodes the workers run
        themselves (:func:`run_perturbation_task`), not through the sampler that records them, so
        the run would write no dataset."""
        super().check_config(config)
        if config.offline.output is not None:
            raise config.fail(
                "offline.output",
                f"algorithm '{cls.name}' records nothing: it scores perturbed policies outside the "
                "sampler that records episodes; record with an algorithm that samples (ppo, dqn, sac, "
                "...) or leave offline.output unset",
            )

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        training = config.training
        self.layout = self.policy.layout
        if training.noise_table_size < self.layout.size:
            raise config.fail(
                "training.noise_table_size",
                f"the policy has {self.layout.size} parameters, more than the noise table's "
                f"{training.noise_table_size} numbers (make it much larger)",
            )
        self.theta = self.layout.flatten(self.policy.get_weights()).astype(np.float64)
        self.noise = shared_noise_table(training.noise_table_seed, training.noise_table_size)
        self.rng = np.random.default_rng([config.seed or 0, zlib.crc32(b"noise indices")])
        self.num_reissued_tasks = 0

    def update(
        self, theta: np.ndarray, noise: np.ndarray, returns: np.ndarray
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The new ``theta`` from the pairs' ``returns`` ``[n, 2]`` (``+`` then ``-``) and their
        ``noise`` ``[n, P]``; plus learner stats."""
        raise NotImplementedError

    def perturbation_tasks(self, indices: np.ndarray) -> list[PerturbationTask]:
        training = self.config.training
        per_task = training.perturbations_per_task
        return [
            PerturbationTask(
                indices[start : start + per_task],
                training.noise_stdev,
                training.noise_table_seed,
                training.noise_table_size,
                report_episodes=training.report_episodes if start == 0 else 0,
            )
            for start in range(0, len(indices), per_task)
        ]

    def training_step(self) -> dict[str, float]:
        training = self.config.training
        indices = self.noise.sample_indices(self.rng, self.layout.size, training.num_perturbations)
        results, reissued = run_tasks(self.workers, run_perturbation_task, self.perturbation_tasks(indices))
        self.num_reissued_tasks += reissued
        returned = np.concatenate([r.noise_indices for r in results])
        if not np.array_equal(returned, indices):  # a worker answered another task than it was given
            raise RuntimeError("perturbation results do not match the noise indices sent")
        returns = np.concatenate([r.returns for r in results])
        lengths = np.concatenate([r.lengths for r in results])
        noise = self.noise.get_many(indices, self.layout.size)
        theta, stats = self.update(self.theta, noise, returns)
        stats.update(
            {
                "update_norm": float(np.linalg.norm(theta - self.theta)),
                "theta_norm": float(np.linalg.norm(theta)),
                "perturbation_return_mean": float(returns.mean()),
                "perturbation_return_max": float(returns.max()),
                "perturbation_episodes": int(returns.size),
                "perturbation_env_steps": int(lengths.sum()),
                "num_reissued_tasks": self.num_reissued_tasks,
            }
        )
        self.set_theta(theta)
        return stats

    def set_theta(self, theta: np.ndarray) -> None:
        """Act with ``theta`` here and, from their next task, on every worker."""
        self.theta = np.asarray(theta, np.float64)
        self.policy.set_weights(self.layout.unflatten(self.theta.astype(np.float32)))
        self.workers.sync_weights()

    def reseed(self, seed: int) -> None:
        """Also a new stream of noise indices (PBT: two trials cloned from one donor search apart)."""
        super().reseed(seed)
        self.rng = np.random.default_rng([int(seed), zlib.crc32(b"noise indices")])

    # --- checkpoints: theta in float64, the index RNG, the table's identity ---------------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            "rng": self.rng.bit_generator.state,
            "noise_table_seed": self.noise.seed,
            "noise_table_size": self.noise.size,
            "num_reissued_tasks": self.num_reissued_tasks,
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        saved = (state.get("noise_table_seed"), state.get("noise_table_size"))
        if saved != (self.noise.seed, self.noise.size):
            raise CheckpointError(
                f"the checkpoint was trained with noise table (seed, size) {saved}, this config has "
                f"{(self.noise.seed, self.noise.size)} (training.noise_table_seed, training.noise_table_size)"
            )
        self.rng.bit_generator.state = state["rng"]
        self.num_reissued_tasks = int(state.get("num_reissued_tasks", 0))

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.theta = np.asarray(arrays["theta"], np.float64)
