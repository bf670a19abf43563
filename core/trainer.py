"""Trainer: the Tune-style trainable every algorithm subclasses.

An algorithm is a Trainer subclass that sets its name, config class and
per-backend policy classes, and overrides :meth:`Trainer.training_step` (and
optionally :meth:`Trainer.postprocess`). The base class owns everything else:
building workers and policies, the iteration loop with its minimum time and
env-step counts, metrics, results, checkpoints and restore.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rlgear import config as config_mod
from rlgear.backend import NoFrameworkBackend, backend_class_for
from rlgear.config import RunConfig, TrainingConfig, multiagent
from rlgear.config.devices import DEVICE_KEY
from rlgear.config.exploration import check_exploration_support
from rlgear.discovery import hooks as hooks_mod
from rlgear.discovery import registry
from rlgear.discovery.hooks import make_plugin_manager
from rlgear.distributed.rollout_ops import standard_metrics, synchronous_parallel_sample, train_one_step
from rlgear.distributed.worker_set import WorkerSet
from rlgear.errors import CheckpointError, DeviceError, UnsupportedError, did_you_mean
from rlgear.learner import Learner
from rlgear.run import checkpoint as ckpt
from rlgear.run import league_play, trainer_state
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.sampling.intrinsic import wrap_postprocess
from rlgear.sampling.metrics import MetricsWindow
from rlgear.sampling.postprocessing import trainable_rows, with_clipped_rewards
from rlgear.sampling.rollout_worker import EVALUATION_WORKER_INDEX, RolloutWorker, env_seed, worker_seed

#: The ``policies`` key of a framework-free policy: used under every ``backend:`` value.
ANY_BACKEND = "*"
# Config sections that reset_config may change on a live trainer.
_RESETTABLE = ("training", "stop", "checkpoint", "logging")
# Training keys that reset_config can't apply in place (they shape the optimizer object).
_NEEDS_NEW_OPTIMIZER = ("optimizer", "optimizer_kwargs", "optimizer_epsilon")


class Trainer:
    """Base class of algorithms.

    Class attributes a subclass sets:
        name: the algorithm's registry name.
        description: one line for ``rlgear plugins``.
        config_class: a dataclass subclassing :class:`~rlgear.config.TrainingConfig` (gradient-based
            algorithms) or :class:`~rlgear.config.BaseTrainingConfig` (only the loop's keys).
        policies: ``{backend name: "module:PolicyClass"}``, imported lazily. The key ``"*"`` names a
            framework-free policy (:class:`~rlgear.numpy_policy.NumpyPolicy`) used under every
            ``backend:`` value without a policy of its own; a run with it loads no backend plugin and
            imports no framework.
        action_spaces: the action-space kinds supported: "discrete", "continuous", "multi_discrete"
            (MultiDiscrete) and "composite" (Tuple/Dict of Discrete, Box and MultiDiscrete);
            the ``kind`` of an :mod:`rlgear.spaces` space.
        multi_agent, recurrent: capability flags shown by ``rlgear plugins``; ``recurrent``: the
            algorithm learns on sequences, so it takes ``model.lstm`` and ``model.attention``;
            ``league_play``: whether a ``league`` section works with it (None: a multi-agent
            algorithm that keeps agents apart).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_class: ClassVar[type] = TrainingConfig
    policies: ClassVar[dict[str, str]] = {}
    action_spaces: ClassVar[frozenset[str]] = frozenset({"discrete", "continuous"})
    multi_agent: ClassVar[bool] = False
    recurrent: ClassVar[bool] = False
    #: Whether the algorithm's policies use the catalog actor-critic, so take ``model.relational``.
    relational: ClassVar[bool] = False
    league_play: ClassVar[bool | None] = None
    #: Config values ``rlgear plugins --check`` applies to its short runs, for an algorithm whose
    #: ``check_config`` refuses the defaults (e.g. ``{"workers": {"batch_mode": "complete_episodes"}}``).
    check_overrides: ClassVar[dict[str, Any]] = {}
    #: Whether the algorithm reads ``offline.input``: offline algorithms learn from it, replay
    #: algorithms pre-fill their buffer from it. Others refuse the key rather than ignore it.
    reads_datasets: ClassVar[bool] = False

    def __init__(
        self,
        config: RunConfig | Mapping[str, Any] | str | os.PathLike,
        hooks: Iterable[Any] = (),
        logdir: str | os.PathLike | None = None,
    ):
        self.hooks = make_plugin_manager(hooks)
        self.logdir = Path(logdir) if logdir is not None else None
        self.config: RunConfig = (
            config
            if isinstance(config, RunConfig)
            else config_mod.resolve(config, training_class=self.config_class)
            if isinstance(config, Mapping)
            else config_mod.load(config, training_class=self.config_class)
        )
        config_mod.check_recurrent_support(self.config, type(self))
        config_mod.check_relational_support(self.config, type(self))
        check_exploration_support(self.config, type(self))
        if self.config.offline.input is not None and not type(self).reads_datasets:
            raise self.config.fail(
                "offline.input",
                f"algorithm '{self.name}' does not read datasets: offline algorithms (bc, marwil, cql, "
                "discrete_cql, iql) learn from them, and replay algorithms (dqn, sac, td3, ddpg) "
                "pre-fill their replay buffer from them",
            )
        type(self).check_config(self.config)
        self.setup(self.config)

    # --- capabilities -----------------------------------------------------------
    @classmethod
    def capabilities(cls) -> dict[str, Any]:
        return {
            "discrete": "discrete" in cls.action_spaces,
            "continuous": "continuous" in cls.action_spaces,
            "multi_discrete": "multi_discrete" in cls.action_spaces,
            "composite": "composite" in cls.action_spaces,
            "backends": sorted(cls.policies),
            "multi_agent": cls.multi_agent,
            "recurrent": cls.recurrent,
            "relational": cls.relational,
            "league": cls.multi_agent and not getattr(cls, "groups_agents", False)
            if cls.league_play is None
            else cls.league_play,
        }

    @classmethod
    def policy_class(cls, backend: str) -> type:
        """The policy class under ``backend``: its own entry, else the framework-free ``"*"`` one."""
        key = backend if backend in cls.policies else ANY_BACKEND if ANY_BACKEND in cls.policies else None
        if key is None:
            supported = ", ".join(sorted(cls.policies)) or "none"
            raise UnsupportedError(
                f"algorithm '{cls.name}' does not support backend '{backend}' (supported: {supported})"
            )
        return registry.resolve_object(cls.policies[key], f"algorithm '{cls.name}' policy")

    # --- setup ------------------------------------------------------------------
    def setup(self, config: RunConfig) -> None:
        """Check support, then build the backend, evaluators and policy (before any training)."""
        policy_cls = self.policy_class(config.backend)  # unsupported backend: fail before any work
        backend_cls = backend_class_for(policy_cls, config.backend)
        installed = registry.names("env")
        if config.env.adapter not in installed:  # a config mistake: say which key (and which --set)
            raise config.fail(
                "env.adapter",
                f"unknown env adapter '{config.env.adapter}'{did_you_mean(config.env.adapter, installed)} "
                f"(installed: {', '.join(installed) or 'none'})",
            )
        adapter_cls = registry.load_env_adapter(config.env.adapter)
        #: ``offline.output``: the Minari dataset this run's episodes go to (None when off).
        self.dataset_recorder: Any = None
        if config.offline.output is not None:
            from rlgear.offline.recorder import check_output

            check_output(config)  # an existing dataset: refused before any env or worker starts
        self.backend = backend_cls()
        #: What the checkpoints record as their backend: "numpy" for a framework-free policy (its
        #: checkpoints restore fully under any ``backend:`` value), else the ``backend:`` plugin's name.
        self.backend_name = "numpy" if backend_cls is NoFrameworkBackend else config.backend
        self.backend.setup(config.workers.num_cpus_for_driver, config.seed)
        #: What learns: the trainable policies, their optimizers and the update. In the driver
        #: (``learners.num_learners: 0``) a :class:`~rlgear.learner.Learner` whose policies the
        #: in-process rollout worker adds as its env shows their spaces, and acts with; else a
        #: :class:`~rlgear.distributed.learner_group.LearnerGroup` of learner actors on Ray.
        self.learner: Any
        if config.learners.num_learners > 0:  # each learner actor checks the device it is given
            self._setup_learner_group(config, policy_cls, backend_cls, adapter_cls)
        else:
            self._check_device(config)
            self.learner = Learner(config, policy_cls, device=config.learners.device, backend=self.backend)
            self.workers = self._worker_set(config, policy_cls, adapter_cls, self.learner)
        if config.offline.output is not None:
            from rlgear.offline.recorder import DatasetRecorder

            local = self.workers.local_worker
            self.dataset_recorder = DatasetRecorder(config, local.observation_space, local.action_space)
        self.metrics = MetricsWindow(config.training.metrics_window)
        self.iteration = 0
        self.timesteps_total = 0
        #: Agent steps (every agent's steps of a multi-agent env; env steps for a single agent).
        self.agent_timesteps_total = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.restore_epoch = 0
        self._stop_requested = False
        self._policy_cls, self._adapter_cls = policy_cls, adapter_cls
        self._evaluation_worker: RolloutWorker | None = None
        self._evaluation_video: Any = None  # rlgear.run.video.EvaluationVideo, with evaluation_video_every
        self.evaluations = 0  # evaluations run by this trainer object (video clips count them)
        if config.checkpoint.init_from is not None:  # before sampling: the first actions are the checkpoint's
            from rlgear.run.warm_start import start_from_checkpoint

            start_from_checkpoint(self, config.checkpoint.init_from)
        if config.training.evaluation_video_every:
            from rlgear.run.video import EvaluationVideo

            self._evaluation_video = EvaluationVideo(self.logdir)
            # build the recording env now: a missing render mode fails before training, not at an evaluation
            self._evaluation_worker_for(config.training.evaluation_episodes)
        #: ``league``: the league the driver's worker plays (:mod:`rlgear.league.league`), else None.
        self.league: Any = league_play.attach(self)  # after init_from: exploiters restart from its weights
        hooks_mod.call(self.hooks, "on_trainer_init", trainer=self)

    def _worker_set(self, config: RunConfig, policy_cls: type, adapter_cls: type, learner: Any) -> WorkerSet:
        """The rollout workers; the in-process one acts with ``learner``'s policies (None: its own copies)."""
        return WorkerSet(
            config,
            policy_cls,
            adapter_cls,
            # training.clip_rewards (outermost: the env's rewards are clipped before intrinsic ones join them),
            # exploration: intrinsic rewards
            with_clipped_rewards(wrap_postprocess(type(self).postprocess, config, self.name), config),
            self.hooks,
            check_spaces=self.check_spaces,
            learner=learner,
        )

    def _setup_learner_group(
        self, config: RunConfig, policy_cls: type, backend_cls: type, adapter_cls: type
    ) -> None:
        """``learners.num_learners >= 1``: the rollout workers act with copies of their own, the
        policies that learn live in learner actors, started from the driver's initial weights
        (so a run starts alike whatever its number of learners)."""
        from rlgear.distributed import learner_group

        learner_group.check_before_start(config, policy_cls, backend_cls)
        self.workers = self._worker_set(config, policy_cls, adapter_cls, None)
        try:
            local = self.workers.local_worker
            spaces = {pid: (p.observation_space, p.action_space) for pid, p in local.policy_map.items()}
            self.learner = learner_group.LearnerGroup(
                config, policy_cls, backend_cls, spaces, weights=local.get_weights()
            )
        except BaseException:
            self.workers.stop()
            raise
        self.workers.learner = self.learner

    def _check_device(self, config: RunConfig) -> None:
        """``learners.device`` against the backend's devices, before any env, worker or policy exists:
        a device this machine lacks is one line naming the file (or ``--set``), the key and the
        devices there are. Then the backend's own device settings (TF hides its GPUs for ``cpu``)."""
        try:
            self.backend.check_device(config.learners.device)
        except DeviceError as err:
            raise DeviceError(str(config.fail(DEVICE_KEY, err.detail)), err.detail) from None
        self.backend.use_device(config.learners.device)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse a config this algorithm can't run, before anything is built; the default accepts all.

        Keys of ``training`` are checked by its config class (types, ranges, unknown keys);
        override this for what depends on other sections or on several keys at once
        (``model``, ``workers``, ``env``), raising ``config.fail(path, message)`` so the user
        reads the file (or ``--set``) and key at fault. Called when the config is resolved
        (``rlgear train``, and for every trial of ``rlgear tune`` before any trial runs) and
        again when a Trainer is built from an already resolved config.
        """

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """Refuse an env this algorithm can't handle, before any policy is built."""
        if action_space.kind not in cls.action_spaces:
            raise UnsupportedError(
                f"algorithm '{cls.name}' does not support {action_space.kind} actions, which env "
                f"'{config.env.name}' has ({action_space!r}; it supports: {', '.join(sorted(cls.action_spaces))})"
            )

    @property
    def policy(self) -> Any:
        """The learner's policy, when the run has one; else see :attr:`policy_map`."""
        policies = self.learner.policy_map
        if len(policies) > 1:
            raise UnsupportedError(
                f"this run has {len(policies)} policies ({', '.join(policies)}): use "
                "trainer.policy_map[policy_id] (trainer.policy is the single policy of a one-policy run)"
            )
        return next(iter(policies.values()))

    @property
    def policy_map(self) -> dict[str, Any]:
        """``{policy id: Policy}``, the learner's policies (``{"default": policy}`` for a single-agent run).

        Each is built with its own resolved config (``multiagent.policies.<id>`` overrides
        applied) and the spaces of the agents mapped to it.
        """
        return self.learner.policy_map

    @property
    def policies_to_train(self) -> list[str]:
        """The ids of the policies that learn (``multiagent.policies_to_train``; default all)."""
        trained = multiagent.policies_to_train(self.config)
        return [pid for pid in trained if pid in self.policy_map]

    # --- the algorithm ----------------------------------------------------------
    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """Fragment -> training rows, on the evaluator. Default: drop bootstrap and LAST rows."""
        return trainable_rows(fragment)

    def training_step(self) -> dict[str, float]:
        """One step of the algorithm; returns learner stats.

        The default is the on-policy step PPO, A2C and PG share: sample
        ``train_batch_size`` env steps (postprocessed on the evaluators), learn
        on them with the policy's SGD loop, send the new weights to the workers.
        Replay-based and asynchronous algorithms override it.
        """
        batch, steps = synchronous_parallel_sample(self.workers, self.config.training.train_batch_size)
        batch, exploration_stats = self.learn_exploration(batch)
        self.learner.set_global_timestep(self.timesteps_total + steps)  # for lr and clip schedules
        stats = train_one_step(self.learner, self.workers, batch)
        stats.update(exploration_stats)
        # each trained policy learned on its own agents' rows
        return self.learner_stats(stats) if isinstance(batch, MultiAgentBatch) else stats

    def learn_exploration(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """With an ``exploration`` plugin: train its module on the freshly sampled ``batch`` and
        return the batch without the columns only it reads, and its stats; else ``(batch, {})``.
        A training step that samples calls it once, before the algorithm learns."""
        if self.config.exploration.name is None:
            return batch, {}
        return self.learner.learn_exploration(batch)

    def learner_stats(self, per_policy: dict[str, float]) -> dict[str, float]:
        """Stats keyed ``<policy id>/<key>`` as they are with several policies, unprefixed with one
        (so a multi-agent run with one shared policy reports the keys a single-agent run does)."""
        if len(self.policy_map) > 1:
            return per_policy
        return {key.split("/", 1)[1]: value for key, value in per_policy.items()}

    # --- the iteration loop -------------------------------------------------------
    def request_stop(self) -> None:
        """Ask ``train()`` to return after the current training step (Ctrl-C handling)."""
        self._stop_requested = True

    def train(self) -> dict[str, Any]:
        """One iteration: training steps until the minimum time and env steps are met."""
        training = self.config.training
        start = time.perf_counter()
        steps_this_iter = episodes_this_iter = 0
        learner_stats: dict[str, float] = {}
        while True:
            learner_stats = self.training_step()
            steps, episodes = standard_metrics(self)
            steps_this_iter += steps
            episodes_this_iter += episodes
            elapsed = time.perf_counter() - start
            if self._stop_requested:
                break
            if (
                elapsed >= training.min_time_s_per_iteration
                and steps_this_iter >= training.min_env_steps_per_iteration
            ):
                break
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.time_total_s += elapsed
        result: dict[str, Any] = {
            "training_iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "agent_timesteps_total": self.agent_timesteps_total,
            "timesteps_this_iter": steps_this_iter,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            "episodes_this_iter": episodes_this_iter,
            "episodes_total": self.episodes_total,
            **self.metrics.stats(),
            "env_steps_per_s": steps_this_iter / elapsed if elapsed > 0 else 0.0,
        }
        result.update(self.workers.fault_stats())  # num_worker_restarts ... (remote workers only)
        result.update(self.learner_info())
        for key, value in learner_stats.items():
            result[f"learner/{key}"] = value
        if self.league is not None:
            result.update(league_play.after_iteration(self))
        interval = training.evaluation_interval
        if interval and self.iteration % interval == 0:
            result.update(self.evaluate())
        hooks_mod.call(self.hooks, "on_train_result", trainer=self, result=result)
        return result

    def learner_info(self) -> dict[str, Any]:
        """``learner/num_learners`` (1 for the learner in the driver), ``learner_device`` (a string, so not under ``learner/``, whose keys are numbers) and,
        with learner actors, ``num_learner_restarts``."""
        info: dict[str, Any] = {
            "learner/num_learners": float(max(1, self.config.learners.num_learners)),
            "learner_device": str(getattr(self.learner, "device", "cpu")),
        }
        if hasattr(self.learner, "fault_stats"):
            info.update(self.learner.fault_stats())
        return info

    def evaluate(self, num_episodes: int | None = None) -> dict[str, Any]:
        """Greedy episodes on separate envs with the current weights (``evaluation/*`` keys).

        Its env steps are not counted in ``timesteps_total``.
        """
        episodes_wanted = num_episodes or self.config.training.evaluation_episodes
        worker = self._evaluation_worker_for(episodes_wanted)
        local = self.workers.local_worker
        worker.set_weights(local.get_weights())
        worker.env.set_state(self.workers.get_env_state())  # normalize as training does, frozen
        for pid, collector in worker.collectors.items():  # the same: the global statistics, frozen
            if collector.obs_filter is not None:
                collector.obs_filter.set_state(local.collectors[pid].obs_filter.get_state())
        self.evaluations += 1
        every = self.config.training.evaluation_video_every
        video = self._evaluation_video if every and self.evaluations % every == 0 else None
        if video is not None:
            video.request.arm(1)
        start = time.perf_counter()
        episodes = worker.evaluate(episodes_wanted)
        window = MetricsWindow(len(episodes) or 1)
        window.add(episodes)
        stats = window.stats()
        out = {f"evaluation/{k}": v for k, v in stats.items()}
        out["evaluation/episodes"] = len(episodes)
        if self.league is not None:  # every game of the evaluation worker was against the baseline
            out.update(self.league.evaluation_results(worker.env.pop_outcomes()))
        out["evaluation/time_s"] = time.perf_counter() - start
        if video is not None:
            out.update(video.collect(self.iteration))
        return out

    def _evaluation_worker_for(self, episodes_wanted: int) -> RolloutWorker:
        """The evaluation envs (built once), with frozen env statistics and, with
        ``training.evaluation_video_every``, env 0 recording (sync, so it records in this process)."""
        if self._evaluation_worker is None:
            workers = dataclasses.replace(
                self.config.workers,
                num_envs_per_worker=min(episodes_wanted, self.config.workers.num_envs_per_worker),
                batch_mode="truncate_episodes",
            )
            config = dataclasses.replace(self.config, workers=workers)
            video = None
            if self._evaluation_video is not None:
                config = dataclasses.replace(
                    config, env=dataclasses.replace(config.env, vectorization="sync")
                )
                video = self._evaluation_video.request
            self._evaluation_worker = RolloutWorker(
                config, self._policy_cls, self._adapter_cls, worker_index=EVALUATION_WORKER_INDEX, video=video
            )
            self._evaluation_worker.env.freeze_statistics()
            for collector in self._evaluation_worker.collectors.values():
                if collector.obs_filter is not None:
                    collector.obs_filter.frozen = True
        return self._evaluation_worker

    # --- hyperparameters on a live trainer ------------------------------------
    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """Take new hyperparameters without rebuilding; False if the change needs a new trainer.

        Only ``training``, ``stop``, ``checkpoint`` and ``logging`` may change
        in place (weights, optimizer state and envs are kept), except the
        optimizer's type and epsilon. Every loss and the learning rate read
        ``policy.config`` at each step, so new values apply from the next step.
        """
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.to_dict(), new_config.to_dict()
        if any(old[k] != new[k] for k in old if k not in _RESETTABLE):
            return False
        if any(old["training"].get(k) != new["training"].get(k) for k in _NEEDS_NEW_OPTIMIZER):
            return False  # the policy's optimizer object is built once, in setup
        if new_config.rollout_fragment_length() != self.config.rollout_fragment_length():
            return False  # the evaluators cut fragments of a length fixed when they were built
        self.config = new_config
        self.workers.config = new_config  # a replacement for a failed remote worker starts with it
        self.workers.foreach_worker(lambda w, c=new_config: _update_config(w, c))
        if self.config.learners.num_learners > 0:  # learner actors hold policies of their own
            self.learner.update_config(new_config)
        self.metrics.episodes = type(self.metrics.episodes)(
            self.metrics.episodes, maxlen=new_config.training.metrics_window
        )
        return True

    # --- checkpoints ----------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and JSON state for a checkpoint (:func:`rlgear.run.trainer_state.collect`)."""
        return trainer_state.collect(self)

    def get_algorithm_state(self) -> dict[str, Any]:
        """JSON-able algorithm state beyond the policy (override when there is some)."""
        return {}

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_algorithm_state`` returned."""

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        """Algorithm arrays beyond the policy (a replay buffer ...), stored in safetensors.

        Called right after ``get_algorithm_state`` when a checkpoint is written.
        """
        return {}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore what ``get_algorithm_arrays`` returned (called after ``set_algorithm_state``)."""

    def save(self, checkpoint_dir: str | os.PathLike | None = None) -> str:
        """Write a checkpoint (default: ``<logdir>/checkpoint_<iteration>``) and return its path."""
        if checkpoint_dir is None:
            if self.logdir is None:
                raise CheckpointError("save() needs a checkpoint_dir when the trainer has no logdir")
            checkpoint_dir = self.logdir / ckpt.checkpoint_name(self.iteration)
        snapshot = self.save_to_object()
        path = ckpt.write(
            checkpoint_dir, snapshot["arrays"], snapshot["state"], snapshot["config"], snapshot["metadata"]
        )
        hooks_mod.call(self.hooks, "on_checkpoint", trainer=self, checkpoint_dir=str(path))
        return str(path)

    def save_to_object(self) -> dict[str, Any]:
        """A checkpoint in memory: ``{"arrays", "state", "config", "metadata"}``, as ``save`` writes it.

        Arrays are copies, so the snapshot stays valid while training goes on
        (population-based training clones weights from these without touching disk).
        """
        return trainer_state.snapshot(self)

    def restore(self, checkpoint_path: str | os.PathLike) -> None:
        """Continue from a checkpoint: weights, optimizer, counters, RNG and metrics window."""
        path = ckpt.resolve_path(checkpoint_path)
        arrays, state, config, metadata = ckpt.read(path)
        self.restore_from_object(
            {"arrays": arrays, "state": state, "config": config, "metadata": metadata}, source=str(path)
        )

    def restore_from_object(self, snapshot: Mapping[str, Any], source: str = "checkpoint") -> None:
        """Continue from what ``save_to_object`` (or a checkpoint folder) holds; the config is kept."""
        trainer_state.restore(self, snapshot, source)

    def reseed(self, seed: int) -> None:
        """New random streams derived from ``seed`` for everything this trainer draws from.

        The framework's global RNG, every policy's generators (the learner's and
        each remote worker's) and the envs, which restart with seeds from ``seed``.
        PBT calls it after an exploit, so a trial that took a donor's weights,
        optimizer and config does not also replay the donor's randomness.
        """
        self.backend.reseed(seed)
        for index, policy in enumerate(self.policy_map.values()):
            policy.reseed(seed + index)
        epoch = self.restore_epoch
        own_copies = self.config.learners.num_learners > 0  # the local worker acts with its own copies
        self.workers.foreach_worker_with_id(
            lambda index, evaluator: _reseed_evaluator(evaluator, seed, index, epoch, own_copies)
        )

    def stop(self) -> None:
        """Release envs, processes and files (``offline.output``: the dataset is completed first)."""
        try:
            if self.dataset_recorder is not None:
                self.dataset_recorder.close()
        finally:
            self._stop_workers()

    def _stop_workers(self) -> None:
        self.workers.stop()
        if hasattr(self.learner, "stop"):  # learner actors
            self.learner.stop()
        if self._evaluation_worker is not None:
            self._evaluation_worker.stop()
            self._evaluation_worker = None


def _reseed_evaluator(
    evaluator: RolloutWorker, seed: int, index: int, epoch: int, local_has_own_policies: bool = False
) -> None:
    """A worker's share of :meth:`Trainer.reseed` (runs where the worker lives)."""
    if index > 0 or local_has_own_policies:  # else the local worker's policy is the learner's, reseeded
        for offset, policy in enumerate(evaluator.policy_map.values()):
            policy.reseed(worker_seed(seed, index) + offset)
    evaluator.reset(env_seed(seed, index, epoch))


def _update_config(evaluator: RolloutWorker, config: RunConfig) -> None:
    """A worker's share of :meth:`Trainer.reset_config`: each policy takes its own resolved config."""
    evaluator.config = config
    for pid, collector in evaluator.collectors.items():
        collector.config = multiagent.policy_config(config, pid)
        collector.policy.update_config(collector.config)


def read_progress(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The results a run wrote to ``progress.jsonl``, oldest first."""
    path = Path(run_dir) / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
