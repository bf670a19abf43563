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

With ``learners.num_learners: N >= 1`` the learner is a group of N learner actors, each reading
its own shard of the dataset and its own share of every minibatch
(:mod:`~rlgear.plugins.families.offline.learner_readers`); the driver then only counts, evaluates
and checkpoints, with the weights it fetches after every iteration.
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
from rlgear.discovery.hooks import make_plugin_manager
from rlgear.errors import UnsupportedError
from rlgear.learner import Learner
from rlgear.plugins.families.offline import checkpoint, learner_readers
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

    With learner actors, an object of the subclass is also each actor's reader, set up by
    :meth:`setup_reader` (not :meth:`setup`): ``make_batches``, ``training_step`` and
    ``after_gradient_step`` run there, so whatever they keep between steps (discrete CQL's
    target-update count) must be set by :meth:`set_algorithm_state`, which starts every reader
    (with an empty state on a fresh run), and returned by :meth:`get_algorithm_state`.
    """

    reads_datasets = True
    #: The learner actors' group while they read the dataset themselves (None: the driver reads).
    reader_group: Any = None

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
        actors = config.learners.num_learners > 0
        self.backend = backend_cls()
        self.backend_name = "numpy" if backend_cls is NoFrameworkBackend else config.backend
        self.backend.setup(config.workers.num_cpus_for_driver, config.seed)
        if not actors:  # each learner actor checks the device it is given
            self._check_device(config)
        #: The dataset (:class:`~rlgear.plugins.families.offline.data.OfflineData`).
        self.data: OfflineData = open_data(config)
        open_in_actor = learner_readers.check_readable_in_actors(config, self.data) if actors else None
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
            device="cpu" if actors else config.learners.device,
            backend=self.backend,
        )
        #: Draws the order of the data (episodes, transitions); saved in checkpoints.
        self.data_rng = np.random.default_rng(
            None if config.seed is None else [config.seed, learner_readers.DATA_STREAM]
        )
        self.observations.fit_filter(self.data.episodes())
        self.batches: Batches | learner_readers.ReaderCounts
        if open_in_actor is None:
            self.batches = self.make_batches()
        else:
            self._start_readers(config, policy_cls, backend_cls, open_in_actor)
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

    def _start_readers(self, config: RunConfig, policy_cls: type, backend_cls: type, open_data: Any) -> None:
        """The learner actors, started from the driver's initial weights (a run starts alike
        whatever its number of learners), each with a reader of its shard attached. The driver's
        own learner stays, on the CPU, for off-policy estimates with the fetched weights."""
        from rlgear.distributed import learner_group

        try:
            learner_group.check_before_start(config, policy_cls, backend_cls)
            local = self.learner
            spaces = {pid: (p.observation_space, p.action_space) for pid, p in local.policy_map.items()}
            self.learner = learner_group.LearnerGroup(
                config, policy_cls, backend_cls, spaces, weights=local.get_weights()
            )
            self._driver_learner = local
            obs_filter = self.observations.obs_filter
            self._reader_factory = learner_readers.ReaderFactory(
                type(self), config, open_data, None if obs_filter is None else obs_filter.get_state()
            )
            self.reader_group = self.learner
            self.batches = learner_readers.ReaderCounts(self.data)
            self.learner.attach(self._reader_factory)
        except BaseException:
            self.stop()
            raise

    def setup_reader(
        self,
        config: RunConfig,
        learner: Any,
        group: Any,
        rank: int,
        num_learners: int,
        data: OfflineData,
        filter_state: Mapping[str, np.ndarray] | None,
        state: dict[str, Any] | None,
    ) -> None:
        """Make this object learner ``rank``'s reader in its learner actor (instead of :meth:`setup`):
        shard ``rank`` of ``num_learners`` of ``data``, the driver's filter statistics, and
        minibatches of this learner's rows (:mod:`~rlgear.plugins.families.offline.learner_readers`)."""
        self.hooks = make_plugin_manager(())
        self.logdir = None
        self.rank = rank
        self.config = learner_readers.reader_config(config, rank, num_learners)
        self.data = learner_readers.ShardOf(data, rank, num_learners)  # type: ignore[assignment]
        self.observation_space, self.action_space = data.observation_space, data.action_space
        self.observations = DatasetObservations(
            self.observation_space, self.action_space, config.model, config.env.name
        )
        if self.observations.obs_filter is not None and filter_state is not None:
            self.observations.obs_filter.set_state(dict(filter_state), "the driver's filter statistics")
        rows = learner_readers.rows_per_learner(config.training.train_batch_size, num_learners)
        self.learner = learner_readers.OwnRowsLearner(
            learner, group, sum(rows[:rank]), config.training.train_batch_size
        )
        self.data_rng = learner_readers.reader_rng(config.seed, rank)
        self.num_gradient_steps = 0
        self.batches = self.make_batches()
        self.set_algorithm_state(state or {})

    def reader_step(self) -> tuple[dict[str, float], dict[str, Any]]:
        """A reader's iteration in its learner actor: :meth:`training_step`, and its state after."""
        return self.training_step(), self.get_algorithm_state()

    def reader_info(self) -> dict[str, Any]:
        """Which shard this reader reads and how much of it (``rows_read`` so far)."""
        data = self.data
        return {
            "rank": self.rank,
            "shard": getattr(data, "shard", 0),
            "num_shards": getattr(data, "num_shards", 1),
            "rows_per_update": self.config.training.train_batch_size,
            "rows_read": self.batches.rows_read,
        }

    def reader_config_changed(self, config: RunConfig, num_learners: int) -> None:
        """A live config change (:meth:`reset_config`), in a reader."""
        self.config = learner_readers.reader_config(config, self.rank, num_learners)

    def reseed_reader(self, seed: int) -> None:
        """A new data order from ``seed``, in a reader (:meth:`reseed`)."""
        self.data_rng = learner_readers.reader_rng(seed, self.rank)
        state = self.batches.get_state()
        self.batches = self.make_batches()
        self.batches.set_state(state)

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
        batches: Any = self.batches
        for _ in range(steps):
            stats = self.learner.update(next(batches))
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
            learner_stats = self.training_step() if self.reader_group is None else self._readers_step()
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

    def _readers_step(self) -> dict[str, float]:
        """One training step in every learner actor, each on the rows it reads; the driver takes
        learner 0's stats and counters (every learner's are the same) and all of their rows."""
        answers = self.reader_group.on_each("reader_step")
        states = [state for _, state in answers]
        self._reader_factory.states = states  # a restarted group's readers go on from here
        main = {**states[0], "data_rng": self.data_rng.bit_generator.state, "readers": states}
        main["batches"] = {"rows_read": self.batches.base + sum(_rows(s) for s in states)}
        self._mirroring = True
        try:
            self.set_algorithm_state(main)  # the subclass's counters too, as its checkpoint would
        finally:
            self._mirroring = False
        return answers[0][0]

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
                recurrent=self.config.model.recurrent,
            )
        policy = self.learner.policy
        if self.reader_group is not None:  # learner actors: the driver's copy, with their weights
            self._driver_learner.set_weights(self.learner.get_weights())
            policy = self._driver_learner.policy
        return self._off_policy_evaluation(policy)

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
        if self.reader_group is not None:
            self.reader_group.update_config(new_config)
            self.reader_group.on_each("reader_config_changed", new_config, self.reader_group.num_learners)
            self._reader_factory.config = new_config
            return True
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
        state = {
            "num_gradient_steps": self.num_gradient_steps,
            "batches": self.batches.get_state(),
            "data_rng": self.data_rng.bit_generator.state,
        }
        if self.reader_group is not None:  # each learner's reader, by rank
            state["readers"] = list(self._reader_factory.states or [])
        return state

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.num_gradient_steps = int(state.get("num_gradient_steps", 0))
        if "data_rng" in state:
            self.data_rng.bit_generator.state = state["data_rng"]
        if self.reader_group is not None:
            self._set_readers_state(state)
            return
        self.batches = self.make_batches()  # the reading restarts in an order drawn from the restored rng
        self.batches.set_state(state.get("batches", {}))

    def _set_readers_state(self, state: dict[str, Any]) -> None:
        """The driver's counters; unless it is only mirroring its readers (:meth:`_readers_step`),
        the readers start again from ``state`` (a checkpoint's), each from its own saved state when
        the checkpoint had as many learners."""
        if getattr(self, "_mirroring", False):
            self.batches.set_state(state.get("batches", {}), state.get("readers"))
            return
        states = learner_readers.reader_states(state, self.reader_group.num_learners, self.data_rng)
        self.batches.set_state(state.get("batches", {}), states)
        self._reader_factory.states = states
        self.reader_group.attach(self._reader_factory)

    def reseed(self, seed: int) -> None:
        """New random streams from ``seed``: the framework's, the policies' and the data order's."""
        self.backend.reseed(seed)
        for index, policy in enumerate(self.learner.policy_map.values()):
            policy.reseed(seed + index)
        self.data_rng = np.random.default_rng([seed, learner_readers.DATA_STREAM])
        if self.reader_group is not None:
            self.reader_group.on_each("reseed_reader", seed)
            return
        state = self.batches.get_state()
        self.batches = self.make_batches()
        self.batches.set_state(state)

    def stop(self) -> None:
        """Close the evaluation envs and stop the learner actors."""
        if getattr(self, "_evaluation_worker", None) is not None:
            self._evaluation_worker.stop()
            self._evaluation_worker = None
        if self.reader_group is not None:
            self.reader_group.stop()
            self.reader_group = None


def _rows(state: Mapping[str, Any]) -> int:
    return int(state.get("batches", {}).get("rows_read", 0))
