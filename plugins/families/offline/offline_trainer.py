"""OfflineTrainer: the Trainer of algorithms that learn from a dataset instead of an env.

An iteration is ``training.num_gradient_steps_per_iteration`` learner updates, each on one
minibatch of ``train_batch_size`` dataset rows (:mod:`~rlgear.plugins.families.offline.batches`);
nothing is sampled, so ``timesteps_total`` stays 0 and results count
``learner/num_gradient_steps`` (cumulative) and ``offline/dataset_epochs`` (rows read over the
dataset's steps) instead, which ``stop`` may name.

The learner is built from the dataset's spaces alone (:meth:`rlgear.learner.Learner.build`), so a
run needs no env. With an ``env`` section, greedy evaluation episodes run every
``training.evaluation_interval`` iterations on an evaluation worker, as in online runs
(``evaluation/episode_return_mean`` ...), and the env's spaces must be the dataset's. With or
without an env, every ``training.ope_interval`` iterations off-policy estimates of the current
policy from the data are reported as ``offline/ope/<method>``
(:mod:`~rlgear.plugins.families.offline.off_policy_evaluation`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.backend import NoFrameworkBackend, backend_class_for
from rlgear.config import RunConfig, multiagent
from rlgear.discovery import hooks as hooks_mod
from rlgear.discovery import registry
from rlgear.errors import UnsupportedError
from rlgear.learner import Learner
from rlgear.plugins.families.offline import checkpoint
from rlgear.plugins.families.offline.batches import Batches, TransitionBatches
from rlgear.plugins.families.offline.data import OfflineData, check_env_spaces, open_data
from rlgear.plugins.families.offline.observations import DatasetObservations
from rlgear.plugins.families.offline.off_policy_evaluation import OffPolicyEvaluation
from rlgear.sampling.metrics import MetricsWindow
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.trainer import EVALUATION_WORKER_INDEX, Trainer

#: Result keys of an offline run (also read by the progress display, :mod:`rlgear.run.progress`).
GRADIENT_STEPS_KEY = "learner/num_gradient_steps"
DATASET_EPOCHS_KEY = "offline/dataset_epochs"
# Learner stats that are counters or settings, reported as their last value (not averaged).
_LAST_VALUE_STATS = ("num_grad_updates", "num_nonfinite_updates", "cur_lr")
# Config sections reset_config may change on a live offline trainer.
_RESETTABLE = ("training", "stop", "checkpoint", "logging")


class OfflineTrainer(Trainer):
    """Base class of offline algorithms: learner updates on dataset minibatches, no env steps.

    A subclass sets ``name``, ``config_class`` (an
    :class:`~rlgear.plugins.families.offline.OfflineTrainingConfig`) and ``policies``, and overrides
    :meth:`make_batches` when its loss needs more than single transitions (or their discounts) and
    :meth:`after_gradient_step` for periodic work between updates.
    """

    reads_datasets = True

    # --- setup --------------------------------------------------------------------
    def setup(self, config: RunConfig) -> None:
        """Open the dataset, build the learner from its spaces and, with an env, the evaluation worker."""
        if config.checkpoint.init_from is not None:
            raise config.fail(
                "checkpoint.init_from",
                f"algorithm '{self.name}' learns offline from its dataset's statistics and fresh "
                "weights; starting from another run's weights is for online runs (e.g. cql -> sac, "
                "docs/offline-algorithms.md#offline-to-online)",
            )
        policy_cls = self.policy_class(config.backend)
        backend_cls = backend_class_for(policy_cls, config.backend)
        if config.learners.num_learners > 0:
            raise UnsupportedError(
                f"algorithm '{self.name}' learns in the driver: learner actors (learners.num_learners: "
                f"{config.learners.num_learners}) are not supported for offline algorithms yet"
            )
        self.backend = backend_cls()
        self.backend_name = "numpy" if backend_cls is NoFrameworkBackend else config.backend
        self.backend.setup(config.workers.num_cpus_for_driver, config.seed)
        self._check_device(config)
        #: The dataset (:class:`~rlgear.plugins.families.offline.data.OfflineData`).
        self.data: OfflineData = open_data(config)
        #: The env's own spaces, as the dataset holds them (checkpoints keep these).
        self.observation_space = self.data.observation_space
        self.action_space = self.data.action_space
        type(self).check_spaces(config, self.observation_space, self.action_space)
        self._policy_cls = policy_cls
        self._adapter_cls: Any = None
        self._evaluation_worker: RolloutWorker | None = None
        self._evaluation_video: Any = None
        self.evaluations = 0
        if config.has_env:  # before any learning: a dataset of another env fails at once
            self._adapter_cls = registry.load_env_adapter(config.env.adapter)
            worker = self._evaluation_worker_for(config.training.evaluation_episodes)
            check_env_spaces(config, self.data, worker.observation_space, worker.action_space)
        self.observations = DatasetObservations(
            self.observation_space, self.action_space, config.model, config.env.name
        )
        self.learner = Learner.build(
            config,
            policy_cls,
            (self.observation_space, self.action_space),
            config.env.name or "dataset",
            device=config.learners.device,
            backend=self.backend,
        )
        #: Draws the order of the data (episodes, transitions); saved in checkpoints.
        self.data_rng = np.random.default_rng(None if config.seed is None else [config.seed, 0x0FF])
        self.observations.fit_filter(self.data.episodes())
        self.batches = self.make_batches()
        #: Off-policy estimates (``offline/ope/*``), built on first use.
        self._off_policy_evaluation: OffPolicyEvaluation | None = None
        self.metrics = MetricsWindow(config.training.metrics_window)  # env episodes: none offline
        self.iteration = 0
        self.timesteps_total = self.agent_timesteps_total = self.episodes_total = 0
        self.time_total_s = 0.0
        self.restore_epoch = 0
        #: Learner updates taken so far (``learner/num_gradient_steps``).
        self.num_gradient_steps = 0
        self._stop_requested = False
        hooks_mod.call(self.hooks, "on_trainer_init", trainer=self)

    def make_batches(self) -> Batches:
        """The minibatches each learner update takes (single transitions by default; an algorithm
        whose loss needs whole episodes returns an
        :class:`~rlgear.plugins.families.offline.EpisodeBatches`)."""
        return self.transition_batches()

    def transition_batches(self, gamma: float | None = None) -> TransitionBatches:
        """Single-transition minibatches of ``train_batch_size`` rows, drawn from a shuffle buffer
        of ``offline.input_shuffle_buffer_episodes`` episodes; with ``gamma``, their ``discounts``
        (the TD targets of cql, discrete_cql and iql)."""
        return TransitionBatches(
            self.data,
            self.observations,
            self.config.training.train_batch_size,
            self.data_rng,
            gamma,
            buffer_episodes=self.config.offline.input_shuffle_buffer_episodes,
        )

    def after_gradient_step(self) -> None:
        """Called after every learner update, ``num_gradient_steps`` already counting it (discrete
        CQL moves its target network here every ``target_network_update_freq`` steps)."""

    # --- the iteration ------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        """``num_gradient_steps_per_iteration`` learner updates; their stats (means, counters last)."""
        sums: dict[str, float] = {}
        last: dict[str, float] = {}
        steps = self.config.training.num_gradient_steps_per_iteration
        for _ in range(steps):
            stats = self.learner.update(next(self.batches))
            self.num_gradient_steps += 1
            self.after_gradient_step()
            for key, value in stats.items():
                if key.rsplit("/", 1)[-1] in _LAST_VALUE_STATS:
                    last[key] = value
                else:
                    sums[key] = sums.get(key, 0.0) + float(value)
        return {**{key: value / steps for key, value in sums.items()}, **last}

    def train(self) -> dict[str, Any]:
        """One iteration: training steps until ``min_time_s_per_iteration`` has passed (at least one)."""
        training = self.config.training
        start = time.perf_counter()
        while True:
            learner_stats = self.training_step()
            if self._stop_requested or time.perf_counter() - start >= training.min_time_s_per_iteration:
                break
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.time_total_s += elapsed
        result: dict[str, Any] = {
            "training_iteration": self.iteration,
            "timesteps_total": 0,  # no env steps: an offline run counts gradient steps and epochs
            "agent_timesteps_total": 0,
            "timesteps_this_iter": 0,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            "episodes_this_iter": 0,
            "episodes_total": 0,
            "env_steps_per_s": 0.0,
            GRADIENT_STEPS_KEY: float(self.num_gradient_steps),
            DATASET_EPOCHS_KEY: float(self.batches.epochs),
            "offline/rows_read": float(self.batches.rows_read),
        }
        result.update(self.learner_info())
        for key, value in learner_stats.items():
            result[f"learner/{key}"] = value
        interval = training.evaluation_interval
        if self.config.has_env and interval and self.iteration % interval == 0:
            result.update(self.evaluate())
        if training.ope_interval and training.ope_methods and self.iteration % training.ope_interval == 0:
            result.update(self.estimate_off_policy())
        hooks_mod.call(self.hooks, "on_train_result", trainer=self, result=result)
        return result

    # --- evaluation ---------------------------------------------------------------
    def evaluate(self, num_episodes: int | None = None) -> dict[str, Any]:
        """Greedy episodes in ``env`` with the learner's current weights (``evaluation/*`` keys)."""
        if not self.config.has_env:
            raise UnsupportedError(
                f"this {self.name} run has no env section: evaluation episodes need one (env: {{name: ...}})"
            )
        episodes_wanted = num_episodes or self.config.training.evaluation_episodes
        worker = self._evaluation_worker_for(episodes_wanted)
        worker.set_weights(self.learner.get_weights())
        for collector in worker.collectors.values():  # the dataset's statistics, frozen
            if collector.obs_filter is not None and self.observations.obs_filter is not None:
                collector.obs_filter.set_state(self.observations.obs_filter.get_state())
        self.evaluations += 1
        start = time.perf_counter()
        episodes = worker.evaluate(episodes_wanted)
        window = MetricsWindow(len(episodes) or 1)
        window.add(episodes)
        out = {f"evaluation/{k}": v for k, v in window.stats().items()}
        out["evaluation/episodes"] = len(episodes)
        out["evaluation/time_s"] = time.perf_counter() - start
        return out

    def estimate_off_policy(self) -> dict[str, float]:
        """Off-policy estimates of the learner's current policy from the dataset (``offline/ope/*``;
        :mod:`~rlgear.plugins.families.offline.off_policy_evaluation`)."""
        if self._off_policy_evaluation is None:
            self._off_policy_evaluation = OffPolicyEvaluation(
                self.data,
                self.observations,
                self.action_space,
                self.config.training,
                self.config.seed,
                recurrent=bool(self.config.model.lstm),
            )
        return self._off_policy_evaluation(self.learner.policy)

    def _evaluation_worker_for(self, episodes_wanted: int) -> RolloutWorker:
        """The evaluation envs (built once), acting with their own copy of the policy."""
        if self._evaluation_worker is None:
            workers = dataclasses.replace(
                self.config.workers,
                num_envs_per_worker=min(episodes_wanted, self.config.workers.num_envs_per_worker),
                batch_mode="truncate_episodes",
            )
            config = dataclasses.replace(self.config, workers=workers)
            self._evaluation_worker = RolloutWorker(
                config, self._policy_cls, self._adapter_cls, worker_index=EVALUATION_WORKER_INDEX
            )
            self._evaluation_worker.env.freeze_statistics()
            for collector in self._evaluation_worker.collectors.values():
                if collector.obs_filter is not None:
                    collector.obs_filter.frozen = True
        return self._evaluation_worker

    # --- hyperparameters on a live trainer ----------------------------------------------
    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """New ``training``, ``stop``, ``checkpoint`` or ``logging`` values in place (not the
        optimizer's type, not the batch size, which shapes the dataset stream); False otherwise."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.to_dict(), new_config.to_dict()
        if any(old[k] != new[k] for k in old if k not in _RESETTABLE):
            return False
        fixed = ("optimizer", "optimizer_kwargs", "optimizer_epsilon", "train_batch_size")
        if any(old["training"].get(k) != new["training"].get(k) for k in fixed):
            return False
        self.config = new_config
        for policy_id, policy in self.learner.policy_map.items():
            policy.update_config(multiagent.policy_config(new_config, policy_id))
        return True

    # --- checkpoints --------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return checkpoint.collect(self)

    def save_to_object(self) -> dict[str, Any]:
        return checkpoint.snapshot(self)

    def restore_from_object(self, snapshot: Mapping[str, Any], source: str = "checkpoint") -> None:
        checkpoint.restore(self, snapshot, source)

    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            "num_gradient_steps": self.num_gradient_steps,
            "batches": self.batches.get_state(),
            "data_rng": self.data_rng.bit_generator.state,
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.num_gradient_steps = int(state.get("num_gradient_steps", 0))
        self.batches.set_state(state.get("batches", {}))
        if "data_rng" in state:
            self.data_rng.bit_generator.state = state["data_rng"]
        self.batches = self.make_batches()  # the reading restarts in an order drawn from the restored rng
        self.batches.set_state(state.get("batches", {}))

    def reseed(self, seed: int) -> None:
        """New random streams from ``seed``: the framework's, the policies' and the data order's."""
        self.backend.reseed(seed)
        for index, policy in enumerate(self.learner.policy_map.values()):
            policy.reseed(seed + index)
        self.data_rng = np.random.default_rng([seed, 0x0FF])
        state = self.batches.get_state()
        self.batches = self.make_batches()
        self.batches.set_state(state)

    def stop(self) -> None:
        """Close the evaluation envs."""
        if self._evaluation_worker is not None:
            self._evaluation_worker.stop()
            self._evaluation_worker = None
