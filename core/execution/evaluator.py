"""Evaluator (rollout worker) and WorkerSet.

An :class:`Evaluator` owns a vectorized env (from an env adapter) and a policy,
steps them together, and returns postprocessed SampleBatches. The same class
serves in-process (the embedded default) and, later, as a Ray actor: its
constructor arguments are plain picklable values and its results are numpy.

Fragments (``batch_mode: truncate_episodes``) are time-major ``[T+1, B]``: the
last row is the current TimeStep, recorded only for its value (the bootstrap),
and it becomes row 0 of the next fragment, where it is trained on. So no
transition is lost or duplicated between consecutive batches. With
``complete_episodes`` each batch holds only whole episodes (FIRST..LAST);
an episode still running keeps its rows for the next call.

The per-policy work (preprocessing, the observation filter, recurrent state, actions) is a
:class:`~rlgear.execution.collector.PolicyCollector`: one for a single-agent env (the policy
``default``, its slots the env slots), one per policy for a
:class:`~rlgear.env.MultiAgentVectorEnv`. Recording (fragments, whole episodes, episode
bookkeeping) is :class:`~rlgear.execution.multi_agent.MultiAgentSampler`, for every env: a
single-agent env is its one-agent case (:class:`~rlgear.execution.multi_agent.OneAgentEnv`, one
policy, every slot always active), not a loop of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config import multiagent
from rlgear.discovery import hooks as hooks_mod
from rlgear.env import MultiAgentVectorEnv, VideoRequest
from rlgear.errors import UnsupportedError
from rlgear.execution.collector import PolicyCollector
from rlgear.execution.multi_agent import (  # drop_invalid_rows: re-exported, it lived here
    MultiAgentSampler,
    OneAgentEnv,
    check_policy_spaces,
    drop_invalid_rows,
)
from rlgear.execution.postprocessing import trainable_rows
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.timestep import TimeStep

__all__ = ["Evaluator", "WorkerSet", "drop_invalid_rows", "env_seed", "worker_seed"]

#: ``pop_metrics`` key of a remote worker's observation-filter delta (merged by the driver).
OBS_FILTER_DELTA = "obs_filter_delta"

PostprocessFn = Callable[[SampleBatch, Any, Any], SampleBatch]

# Env i of worker w is seeded with seed + WORKER_SEED_STRIDE * w + i.
WORKER_SEED_STRIDE = 10_000


def default_postprocess(fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
    return trainable_rows(fragment)


def worker_seed(seed: int | None, worker_index: int) -> int | None:
    """The seed of a remote worker's policy and framework (distinct per worker, like env seeds)."""
    if seed is None:
        return None
    return int(seed) + WORKER_SEED_STRIDE * worker_index + 1


def env_seed(seed: int | None, worker_index: int, epoch: int = 0) -> int | None:
    """The reset seed of a worker's envs; ``epoch`` changes it after a restore."""
    if seed is None:
        return None
    return int(seed) + WORKER_SEED_STRIDE * worker_index + 7_919 * epoch


class Evaluator:
    """A rollout worker: env adapter + policy.

    Args:
        config: the resolved RunConfig.
        policy_class: the algorithm's policy class for the backend in use.
        env_adapter_class: the EnvAdapter plugin class.
        postprocess_fn: ``(fragment, policy, config) -> rows``; see
            :mod:`rlgear.execution.postprocessing`.
        worker_index: 0 for the local (driver) evaluator, 1.. for remote ones.
        hooks: a pluggy plugin manager (``on_episode_start/end``, ``on_sample_end``).
        video: record episodes of env 0 (the adapter must have ``records_video``); arm it
            (:meth:`~rlgear.env.VideoRequest.arm`) before the episodes to record.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        env_adapter_class: type,
        postprocess_fn: PostprocessFn = default_postprocess,
        worker_index: int = 0,
        hooks: Any = None,
        check_spaces: Callable[[Any, Any, Any], None] | None = None,
        video: VideoRequest | None = None,
    ):
        self.config = config
        self.worker_index = worker_index
        self.hooks = hooks
        self.postprocess_fn = postprocess_fn
        env_cfg = config.env
        options: dict[str, Any] = {}  # only what the config uses: adapters without wrappers refused them
        if env_cfg.wrappers:
            options["wrappers"] = list(env_cfg.wrappers)
        if env_cfg.wrappers_vector:
            options["wrappers_vector"] = list(env_cfg.wrappers_vector)
        if video is not None:
            options["video"] = video
        self.env = env_adapter_class().make(
            env_cfg.name,
            config.workers.num_envs_per_worker,
            kwargs=dict(env_cfg.kwargs),
            vectorization=env_cfg.vectorization,
            horizon=config.workers.horizon,
            worker_index=worker_index,
            **options,
        )
        self.num_envs = self.env.num_envs
        self.multi_agent = isinstance(self.env, MultiAgentVectorEnv)
        try:
            self._build_collectors(config, policy_class, check_spaces, postprocess_fn)
        except BaseException:
            self.env.close()
            raise
        self.fragment_length = config.rollout_fragment_length()
        self.complete_episodes = config.workers.batch_mode == "complete_episodes"
        #: Nominal env steps per ``sample()`` call (``complete_episodes`` may take more).
        self.steps_per_sample = self.fragment_length * self.num_envs
        self._finished: list[dict[str, Any]] = []
        self._env_steps = 0
        #: Episodes discarded because their env's rows became invalid (an external client dropped).
        self.episodes_aborted = 0
        self._window: dict[str, dict[str, Any]] = {}
        self.reset(env_seed(config.seed, worker_index))

    def _build_collectors(
        self,
        config: Any,
        policy_class: type,
        check_spaces: Callable[[Any, Any, Any], None] | None,
        postprocess_fn: PostprocessFn,
    ) -> None:
        """One :class:`PolicyCollector` per policy: the only one (single-agent env) or one per
        policy of ``multiagent`` (a multi-agent env), each with the spaces of its agents."""
        env_name = config.env.name
        ids = multiagent.policy_ids(config)
        if not self.multi_agent:
            if len(ids) > 1:
                raise config.fail(
                    "multiagent.policies",
                    f"env '{env_name}' has a single agent, so it runs one policy; the config names "
                    f"{len(ids)} ({', '.join(ids)})",
                )
            #: The env's own spaces (checkpoints keep these); the policy sees ``preprocessor.observation_space``.
            self.observation_space = self.env.observation_space
            self.action_space = self.env.action_space
            if check_spaces is not None:
                check_spaces(config, self.observation_space, self.action_space)
            collector = PolicyCollector(
                ids[0],
                policy_class,
                self.observation_space,
                self.action_space,
                multiagent.policy_config(config, ids[0]),
                self.num_envs,
                env_name,
            )
            self.collectors = {ids[0]: collector}
            self._collector = collector
            self._sampler = MultiAgentSampler(
                self, OneAgentEnv(self.env), self.collectors, {ids[0]: [OneAgentEnv.AGENT]}, postprocess_fn
            )
            return
        algorithm = getattr(check_spaces, "__self__", None)  # Trainer.check_spaces is a classmethod
        if algorithm is not None and not getattr(algorithm, "multi_agent", False):
            raise UnsupportedError(
                f"algorithm '{getattr(algorithm, 'name', algorithm)}' does not support multi-agent envs "
                f"(env '{env_name}' has agents {', '.join(self.env.possible_agents)}); its Trainer sets no "
                "multi_agent = True (rlgear plugins shows the Multi-Agent column)"
            )
        mapping = multiagent.PolicyMapping(config)
        agents_of_policy: dict[str, list[str]] = {pid: [] for pid in ids}
        for agent in self.env.possible_agents:
            agents_of_policy[mapping(agent)].append(agent)
        agents_of_policy = {pid: agents for pid, agents in agents_of_policy.items() if agents}
        check_policy_spaces(config, agents_of_policy, self.env)
        #: Per policy, the spaces of its agents (checkpoints keep these).
        self.policy_spaces = {
            pid: (self.env.observation_spaces[agents[0]], self.env.action_spaces[agents[0]])
            for pid, agents in agents_of_policy.items()
        }
        self.collectors = {}
        for pid, (obs_space, act_space) in self.policy_spaces.items():
            if check_spaces is not None:
                check_spaces(config, obs_space, act_space)
            self.collectors[pid] = PolicyCollector(
                pid,
                policy_class,
                obs_space,
                act_space,
                multiagent.policy_config(config, pid),
                len(agents_of_policy[pid]) * self.num_envs,
                env_name,
            )
        first = next(iter(self.collectors.values()))
        self._collector = first
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self._sampler = MultiAgentSampler(self, self.env, self.collectors, agents_of_policy, postprocess_fn)

    # --- the policy set ---------------------------------------------------------------
    @property
    def policy_map(self) -> dict[str, Any]:
        """``{policy id: Policy}`` (``{"default": policy}`` for a single-agent run)."""
        return {pid: c.policy for pid, c in self.collectors.items()}

    @property
    def policy(self) -> Any:
        """The policy, when the run has one (else use :attr:`policy_map`)."""
        if len(self.collectors) > 1:
            raise AttributeError(
                f"this run has {len(self.collectors)} policies ({', '.join(self.collectors)}); "
                "use evaluator.policy_map[policy_id]"
            )
        return self._collector.policy

    @property
    def preprocessor(self) -> ObservationPreprocessor:
        return self._collector.preprocessor

    @property
    def obs_filter(self) -> Any:
        """``model.observation_filter`` of the (first) policy (None when off); see :attr:`obs_filters`."""
        return self._collector.obs_filter

    @property
    def obs_filters(self) -> dict[str, Any]:
        """``{policy id: observation filter}`` of the policies that have one: each policy's filter
        sees the observations of the agents mapped to it (its own statistics, merged across workers
        and checkpointed per policy)."""
        return {pid: c.obs_filter for pid, c in self.collectors.items() if c.obs_filter is not None}

    def obs_filter_state(self) -> Any:
        """The filter statistics :meth:`set_weights` takes: the filter's arrays (one policy),
        ``{policy id: arrays}`` (several), None without a filter."""
        filters = self.obs_filters
        if not filters:
            return None
        if len(self.collectors) == 1:
            return next(iter(filters.values())).get_state()
        return {pid: f.get_state() for pid, f in filters.items()}

    def merge_obs_filter_delta(self, delta: Any) -> None:
        """Merge a remote worker's ``obs_filter_delta`` (as its :meth:`pop_metrics` gives it) into
        these filters (the driver's: the global statistics)."""
        if len(self.collectors) == 1:
            if self.obs_filter is not None:
                self.obs_filter.merge_delta(delta)
            return
        for pid, arrays in delta.items():
            own = self.collectors[pid].obs_filter if pid in self.collectors else None
            if own is not None:
                own.merge_delta(arrays)

    @obs_filter.setter
    def obs_filter(self, value: Any) -> None:
        self._collector.obs_filter = value

    @property
    def _state(self) -> list[np.ndarray]:
        """The recurrent state per env slot (empty for feed-forward policies)."""
        return self._collector.state

    @property
    def _timestep(self) -> TimeStep | None:
        """The current TimeStep the policy sees (single-agent env; None on a multi-agent env)."""
        return self._sampler.streams[self._collector.policy_id].ts if not self.multi_agent else None

    @property
    def _episode_length(self) -> np.ndarray:
        """Env steps of the episode running in each env slot."""
        return self._sampler._episode_length

    # --- env stepping and episode bookkeeping -------------------------------
    def reset(self, seed: int | None = None, update_filter: bool = True) -> TimeStep | None:
        """Restart every env (running episodes are dropped, not counted); the current TimeStep of a
        single-agent env (None on a multi-agent one).

        ``update_filter=False`` keeps the observation filter's statistics as they are
        (a restore: the checkpoint's statistics stay exactly as saved).
        """
        filters = [c.obs_filter for c in self.collectors.values() if c.obs_filter is not None]
        frozen = [f.frozen for f in filters]
        if not update_filter:
            for f in filters:
                f.frozen = True
        try:
            self._sampler.reset(seed)
        finally:
            for f, was in zip(filters, frozen, strict=True):
                f.frozen = was
        return self._timestep

    def _step(self, actions: np.ndarray) -> TimeStep | None:
        """One env step with actions the caller chose (single-agent env): observed and tracked as
        sampling does (episodes reach ``_finished``), not recorded. The new current TimeStep.

        For code that acts itself, e.g. population evaluation
        (:mod:`rlgear.execution.population`: every slot with its own parameters).
        """
        sampler = self._sampler
        sampler._observe(sampler.env.step({OneAgentEnv.AGENT: self._collector.env_actions(actions)}))
        return self._timestep

    def _hooked(self, name: str) -> bool:
        """Whether any plugin implements hook ``name``: calling pluggy with none costs
        microseconds per episode, and most runs have no episode hooks."""
        return self.hooks is not None and bool(getattr(self.hooks.hook, name).get_hookimpls())

    # --- sampling -------------------------------------------------------------
    def _act(
        self, ts: TimeStep, explore: bool = True, advance_state: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The single policy's actions for ``ts`` (:meth:`PolicyCollector.act`: recurrent state per
        env slot); the sampler acts on a single-agent env through this."""
        return self._collector.act(ts, explore=explore, advance_state=advance_state)

    def _sample_fragment(self) -> SampleBatch:
        """Records one fragment (every policy's window, kept for :meth:`sample_with_count` to cut);
        returns the first policy's table. On a single-agent env that is the fragment, ``[T+1, B]``
        time-major: the last row is the bootstrap, recorded again as the next fragment's first row."""
        self._window = self._sampler.record(self.fragment_length)
        return SampleBatch(self._window[self._collector.policy_id]["rows"])

    def sample_with_count(self) -> tuple[SampleBatch | MultiAgentBatch, int]:
        """One postprocessed batch, and the env steps taken to collect it.

        A multi-agent env gives a :class:`~rlgear.sample_batch.MultiAgentBatch` (rows per policy,
        compacted per agent: :mod:`rlgear.execution.multi_agent`); a single-agent env a SampleBatch
        (its one policy's rows).
        """
        sampler = self._sampler
        env_steps_before, agent_steps_before = self._env_steps, sampler.agent_steps
        if self.complete_episodes:  # whole agent episodes, as many agent steps as a fragment's env steps
            batches = dict(sampler.sample_episodes(self.fragment_length * self.num_envs))
        else:
            self._sample_fragment()
            batches = sampler.cut(self._window)
            self._window = {}
        env_steps = self._env_steps - env_steps_before
        if self.multi_agent:
            batch: SampleBatch | MultiAgentBatch = MultiAgentBatch(
                batches, env_steps=env_steps, agent_steps=sampler.agent_steps - agent_steps_before
            )
        else:
            batch = batches.get(self._collector.policy_id, SampleBatch())
        if self.hooks is not None:
            hooks_mod.call(self.hooks, "on_sample_end", worker=self, batch=batch)
        return batch, env_steps

    def sample(self) -> SampleBatch:
        return self.sample_with_count()[0]

    def pop_metrics(self) -> dict[str, Any]:
        """Episodes finished since the last call (summaries) and env steps taken.

        A remote worker with an observation filter adds ``obs_filter_delta``: the statistics of
        the observations it saw since the last call, which the driver merges into the global filter.
        """
        out = {"episodes": self._finished, "env_steps": self._env_steps}
        if self.multi_agent:  # agent steps (results: agent_timesteps_total)
            out["agent_steps"] = self._sampler.agent_steps
        self._sampler.agent_steps = 0
        filters = self.obs_filters
        if filters and self.worker_index > 0:  # one policy: its arrays; several: {policy id: arrays}
            deltas = {pid: f.pop_delta() for pid, f in filters.items()}
            out[OBS_FILTER_DELTA] = deltas if len(self.collectors) > 1 else next(iter(deltas.values()))
        self._finished = []
        self._env_steps = 0
        return out

    def evaluate(
        self, num_episodes: int, explore: bool = False, max_seconds: float | None = None
    ) -> list[dict[str, Any]]:
        """Run ``num_episodes`` fresh episodes (greedy unless ``explore``) and return their summaries.

        The envs are reset first and after, so training fragments never mix with these.
        """
        self.reset(env_seed(self.config.seed, self.worker_index, epoch=10_000))
        finished: list[dict[str, Any]] = []
        self._finished = []
        start = time.monotonic()
        while len(finished) < num_episodes:
            self._sampler.step(explore=explore, record=False)
            finished.extend(self._finished)
            self._finished = []
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                break
        self._env_steps = 0
        self._sampler.agent_steps = 0
        self.reset(env_seed(self.config.seed, self.worker_index, epoch=10_001))
        return finished[:num_episodes]

    def evaluate_population(
        self, parameters: np.ndarray, episodes_per_candidate: int = 1, report_episodes: bool = False
    ) -> Any:
        """Whole episodes with each flat weight vector of ``parameters`` ``[N, P]``, every env slot
        acting with its own candidate in one batched pass; a
        :class:`~rlgear.execution.population.PopulationResult` (per-candidate returns and lengths, env
        steps). See :func:`rlgear.execution.population.evaluate_population`."""
        from rlgear.execution.population import evaluate_population

        return evaluate_population(self, parameters, episodes_per_candidate, report_episodes)

    def sample_with_episodes(self) -> tuple[SampleBatch | MultiAgentBatch, int, list[dict[str, Any]]]:
        """:meth:`sample_with_count` plus the summaries of the episodes that ended during it.

        Each summary has ``episode_return`` (every reward of the episode, the final step's
        included) and ``length`` (its env steps), so an algorithm that needs them never
        rebuilds them from fragments (whose LAST rows postprocessing may drop). The same
        episodes still reach the run's metrics through :meth:`pop_metrics`.
        """
        before = len(self._finished)
        batch, steps = self.sample_with_count()
        return batch, steps, [dict(summary) for summary in self._finished[before:]]

    def compute_gradients(
        self, batch: SampleBatch | MultiAgentBatch
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """The policy's gradients on ``batch`` (A3C's worker step) and its learner stats.

        With a :class:`MultiAgentBatch`: ``({policy id: gradients}, {"<id>/<key>": stat})`` for the
        policies of ``multiagent.policies_to_train`` that have rows in it.
        """
        if not isinstance(batch, MultiAgentBatch):
            return self.policy.compute_gradients(batch)
        grads: dict[str, Any] = {}
        stats: dict[str, float] = {}
        for pid in multiagent.policies_to_train(self.config):
            rows = batch.get(pid)
            if rows is None or len(rows) == 0:
                continue
            grads[pid], policy_stats = self.collectors[pid].policy.compute_gradients(rows)
            stats.update({f"{pid}/{key}": value for key, value in policy_stats.items()})
        return grads, stats

    # --- weights and control --------------------------------------------------
    def get_weights(self) -> dict[str, Any]:
        """The policy's weights; with several policies ``{policy id: weights}``."""
        if len(self.collectors) > 1:
            return {pid: c.policy.get_weights() for pid, c in self.collectors.items()}
        return self._collector.policy.get_weights()

    def set_weights(self, weights: dict[str, Any], obs_filter: dict[str, Any] | None = None) -> None:
        """The learner's weights (as :meth:`get_weights` gives them) and, with an observation
        filter, the driver's merged statistics (``{policy id: statistics}`` with several policies)."""
        if len(self.collectors) > 1:
            for pid, policy_weights in weights.items():
                self.collectors[pid].policy.set_weights(policy_weights)
            if obs_filter is not None:
                for pid, arrays in obs_filter.items():
                    if self.collectors[pid].obs_filter is not None:
                        self.collectors[pid].obs_filter.sync(arrays)
            return
        self._collector.policy.set_weights(weights)
        if obs_filter is not None and self.obs_filter is not None:
            self.obs_filter.sync(obs_filter)

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(self, *args)`` where this evaluator lives (in-process or on a Ray actor)."""
        return fn(self, *args)

    def stop(self) -> None:
        self.env.close()


class WorkerSet:
    """The local evaluator plus ``workers.num_workers`` remote ones (Ray actors).

    The local evaluator's policy is the learner's policy. Remote workers sit
    in stable slots with ids 1..N (0 is the local evaluator); a worker that
    dies is replaced in its slot by a fresh actor holding the current weights,
    so every op that keeps per-worker state (in-flight requests, metrics)
    keys it by worker id and sees a replacement as a new handle in the same
    slot. With ``num_workers: 0`` nothing here touches Ray.

    Replacements start in the background: a slot whose actor died is
    *pending* until its replacement answers, and the ops go on with the live
    workers meanwhile (a whole node can fail, and its replacements may have
    to wait for the cluster to schedule them elsewhere). A replacement that
    dies before it answers (placed on a node that was dying but not yet
    marked dead) is started again after a backoff; Ray's scheduler never
    places it on a node it has marked dead. With no live worker at all,
    :meth:`wait_for_live_workers` waits up to
    ``workers.ray.worker_start_timeout_s``, then fails.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        env_adapter_class: type,
        postprocess_fn: PostprocessFn = default_postprocess,
        hooks: Any = None,
        check_spaces: Callable[[Any, Any, Any], None] | None = None,
    ):
        self.config = config
        self.local_worker = Evaluator(
            config, policy_class, env_adapter_class, postprocess_fn, 0, hooks, check_spaces=check_spaces
        )
        self._slots: dict[int, Any] = {}
        #: Remote workers replaced so far (shown as ``num_worker_restarts`` in results).
        self.num_restarts = 0
        #: Requests lost with failed workers (``num_dropped_requests`` in results).
        self.num_dropped_requests = 0
        #: Metrics collections that gave up waiting for a worker (``num_metrics_timeouts``).
        self.num_metrics_timeouts = 0
        #: Why workers failed, by reason (``worker_failures/<reason>`` in results).
        self.failure_reasons: Counter[str] = Counter()
        #: Replacement actors that died or timed out before answering (``num_worker_start_failures``).
        self.num_start_failures = 0
        self._restarts_before_resume = 0  # max_restarts counts this session's replacements
        self._pending: dict[int, _PendingStart] = {}
        self._delivered_steps: dict[int, int] = {}
        self._pending_metrics: dict[int, tuple[Any, Any]] = {}
        self.last_weights_ref: Any = None
        if config.workers.num_workers > 0:
            try:
                from rlgear.execution import remote_worker

                self._remote = remote_worker.RemoteWorkerFactory(
                    config, policy_class, env_adapter_class, postprocess_fn, hooks, check_spaces
                )
                self._slots = self._remote.start(range(1, config.workers.num_workers + 1), config)
                self._delivered_steps = dict.fromkeys(self._slots, 0)
                self.sync_weights()
            except BaseException:
                self.local_worker.stop()
                raise

    # --- the lists of workers -----------------------------------------------------
    @property
    def has_remote_workers(self) -> bool:
        """True when the run samples on remote workers (even while all of them are being replaced)."""
        return self.config.workers.num_workers > 0

    @property
    def remote_workers(self) -> list[Any]:
        """Ray actor handles of the live remote workers, in slot order (ids 1..N)."""
        return [self._slots[i] for i in sorted(self._slots)]

    @property
    def remote_worker_ids(self) -> list[int]:
        """Slots holding a live actor (pending replacements are left out)."""
        return sorted(self._slots)

    def remote_worker(self, worker_id: int) -> Any:
        """The current actor in slot ``worker_id`` (a replacement is a new handle), or None while
        that slot's replacement is starting."""
        return self._slots.get(worker_id)

    def healthy_remote_ids(self) -> list[int]:
        """Slots holding a live actor; a dead one is pending until its replacement answers."""
        return sorted(self._slots)

    @property
    def pending_worker_ids(self) -> list[int]:
        """Slots whose replacement has not answered yet."""
        return sorted(self._pending)

    def workers(self) -> list[Any]:
        return [self.local_worker, *self.remote_workers]

    # --- weights ----------------------------------------------------------------
    def sync_weights(self, worker_ids: Sequence[int] | None = None) -> None:
        """Send the learner's weights to the remote workers (all, or ``worker_ids``).

        One ``ray.put`` per call: every worker receives the same object-store
        reference, not its own copy. Calls on an actor run in order, so a
        sample requested after this call uses the new weights.
        """
        ids = self.remote_worker_ids if worker_ids is None else [i for i in worker_ids if i in self._slots]
        if not ids:
            return
        ray = self._remote.ray
        ref = ray.put(self.local_worker.get_weights())
        self.last_weights_ref = ref
        filter_state = self.local_worker.obs_filter_state()
        filter_ref = None if filter_state is None else ray.put(filter_state)
        for worker_id in ids:
            if filter_ref is None:
                self._slots[worker_id].set_weights.remote(ref)
            else:  # the driver's merged observation-filter statistics travel with the weights
                self._slots[worker_id].set_weights.remote(ref, filter_ref)

    # --- env statistics ---------------------------------------------------------
    def get_env_state(self) -> dict[str, np.ndarray]:
        """The env statistics a checkpoint keeps (``VectorEnv.get_state``: ``env.wrappers_vector``'s).

        Each worker's envs keep their own statistics. Without remote workers they are the local
        worker's; with them, the first live remote worker's (the local worker does not sample,
        so its statistics never move).
        """
        for worker_id in self.remote_worker_ids:
            handle = self._slots[worker_id]
            try:
                return self._remote.ray.get(handle.apply.remote(_env_state))
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
        return self.local_worker.env.get_state()

    def set_env_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Give every worker's envs these statistics (a resume: all continue from the checkpoint's)."""
        self.foreach_worker(lambda w, a=arrays: w.env.set_state(a))

    # --- failures ---------------------------------------------------------------
    def replace_worker(self, worker_id: int, failed_handle: Any, error: BaseException | None = None) -> Any:
        """Start a replacement for the actor in ``worker_id``'s slot, which failed with ``error``.

        The replacement starts in the background with the current weights;
        until it answers, the slot is pending and this returns None (or the new
        handle when it answered at once). Idempotent per failure: when the slot
        already holds another handle, or is already pending (an op saw the same
        death first), that is returned. Raises
        :class:`~rlgear.execution.ray_session.WorkerFailureError` when recreation is off
        or ``workers.max_restarts`` is used up.
        """
        current = self._slots.get(worker_id)
        if current is not failed_handle:
            return current
        self._remote.kill(failed_handle)
        self._pending_metrics.pop(worker_id, None)  # its episodes died with it
        self._remote.check_restart_allowed(worker_id, self.num_restarts - self._restarts_before_resume, error)
        self.num_restarts += 1
        self.failure_reasons[failure_reason(error)] += 1
        del self._slots[worker_id]
        self._pending[worker_id] = _PendingStart()
        self.poll_replacements()
        return self._slots.get(worker_id)

    def poll_replacements(self) -> None:
        """Move answered replacements into their slots and (re)start the ones that are due. Never blocks."""
        if not self._pending:
            return
        ray = self._remote.ray
        now = time.monotonic()
        for worker_id, pending in list(self._pending.items()):
            if pending.handle is None:
                if now >= pending.next_try:
                    pending.handle, pending.ping = self._remote.launch(worker_id, self.config)
                continue
            ready, _ = ray.wait([pending.ping], timeout=0)
            if not ready:
                continue  # still being placed or starting: Ray schedules it when a node has room
            try:
                ray.get(pending.ping)
            except Exception as err:
                self._remote.raise_if_not_failure(err)  # a bug in the worker's setup is not a crash
                self._start_failed(pending, err)
                continue
            del self._pending[worker_id]
            self._slots[worker_id] = pending.handle
            self._delivered_steps.setdefault(worker_id, 0)
            self.sync_weights([worker_id])

    def _start_failed(self, pending: _PendingStart, error: BaseException) -> None:
        """A replacement died before answering: try again after a backoff (1, 2, 4 ... 30 s)."""
        self._remote.kill(pending.handle)
        self.num_start_failures += 1
        pending.last_error = f"{type(error).__name__}: {_first_line(error)}"
        pending.handle = pending.ping = None
        pending.next_try = time.monotonic() + min(2.0**pending.attempts, _MAX_BACKOFF_S)
        pending.attempts += 1

    def wait_for_live_workers(self) -> None:
        """Block until at least one remote worker is live, for up to ``workers.ray.worker_start_timeout_s``.

        Called by the ops when every slot is pending: sampling cannot go on
        without a worker, so the run waits for the cluster to place the
        replacements, then stops with an error naming why they did not start.
        """
        from rlgear.execution.ray_session import WorkerFailureError

        timeout = self.config.workers.ray.worker_start_timeout_s
        deadline = time.monotonic() + timeout
        ray = self._remote.ray
        while not self._slots:
            self.poll_replacements()
            if self._slots:
                return
            now = time.monotonic()
            if now >= deadline:
                reasons = sorted({p.last_error for p in self._pending.values() if p.last_error})
                free = ray.available_resources().get("CPU", 0.0)
                raise WorkerFailureError(
                    f"no remote worker has been live for {timeout:g} s (workers.ray.worker_start_timeout_s): "
                    f"{len(self._pending)} replacement(s) could not start"
                    + (f" ({'; '.join(reasons)})" if reasons else "")
                    + f"; the cluster has {free:g} CPUs free, each worker needs "
                    f"{self.config.workers.num_cpus_per_worker}"
                )
            pings = [p.ping for p in self._pending.values() if p.ping is not None]
            next_try = min((p.next_try for p in self._pending.values() if p.handle is None), default=deadline)
            pause = max(0.01, min(deadline, next_try, now + 1.0) - now)
            if pings:
                ray.wait(pings, num_returns=1, timeout=pause)
            else:
                time.sleep(pause)

    def record_env_steps(self, worker_id: int, steps: int) -> None:
        """Count env steps the learner received from a remote worker (reported by ``pop_metrics``).

        Remote env steps are counted when their batch (or gradient) reaches
        the learner, so requests lost with a dead worker are never counted.
        """
        if worker_id in self._delivered_steps:
            self._delivered_steps[worker_id] += int(steps)

    # --- per-worker work -------------------------------------------------------------
    def foreach_worker(self, fn: Callable[[Evaluator], Any]) -> list[Any]:
        """``fn(evaluator)`` on the local and every remote evaluator (replaced ones are skipped)."""
        return [result for _, result in self.foreach_worker_with_id(lambda _, w: fn(w))]

    def foreach_worker_with_id(self, fn: Callable[[int, Evaluator], Any]) -> list[tuple[int, Any]]:
        """``fn(worker_id, evaluator)`` everywhere; ``(worker_id, result)`` pairs, local first."""
        out = [(0, fn(0, self.local_worker))]
        if not self._slots:
            return out
        ray = self._remote.ray
        calls = {
            worker_id: (handle, handle.apply.remote(_bind_id(fn, worker_id)))
            for worker_id, handle in sorted(self._slots.items())
        }  # all workers at once, then collect in slot order
        for worker_id, (handle, ref) in calls.items():
            try:
                out.append((worker_id, ray.get(ref)))
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
        return out

    def pop_metrics(self) -> Iterable[dict[str, Any]]:
        """Episodes finished and env steps taken since the last call, per worker.

        Never waits longer than ``workers.metrics_timeout_s`` for a remote
        worker: a late answer is kept and collected next time.
        """
        out = [self.local_worker.pop_metrics()]
        if not self._slots and not self._pending:
            return out
        ray = self._remote.ray
        refs = {}
        for worker_id in self.remote_worker_ids:
            handle = self._slots[worker_id]
            ref, pending_handle = self._pending_metrics.pop(worker_id, (None, None))
            if pending_handle is not handle:
                ref = handle.pop_metrics.remote()
            refs[ref] = (worker_id, handle)
        ready, not_ready = (
            ray.wait(list(refs), num_returns=len(refs), timeout=self.config.workers.metrics_timeout_s)
            if refs
            else ([], [])
        )
        for ref in not_ready:
            worker_id, handle = refs[ref]
            self._pending_metrics[worker_id] = (ref, handle)
            self.num_metrics_timeouts += 1
        for ref in ready:
            worker_id, handle = refs[ref]
            try:
                metrics = ray.get(ref)
            except Exception as err:
                self._remote.raise_if_not_failure(err)
                self.replace_worker(worker_id, handle, err)
                metrics = {"episodes": []}
            delta = metrics.pop(OBS_FILTER_DELTA, None)
            if delta is not None:
                self.local_worker.merge_obs_filter_delta(delta)  # the global filters
            metrics["env_steps"] = self._delivered_steps.get(worker_id, 0)
            self._delivered_steps[worker_id] = 0
            out.append(metrics)
        late = [refs[ref][0] for ref in not_ready]
        # Steps are counted even if episodes are late, or their worker died after delivering them.
        for worker_id in [*late, *self._pending]:
            out.append({"episodes": [], "env_steps": self._delivered_steps.get(worker_id, 0)})
            self._delivered_steps[worker_id] = 0
        return out

    def get_fault_state(self) -> dict[str, Any]:
        """The failure counters, for checkpoints: a resumed run keeps counting from them."""
        return {
            "num_restarts": self.num_restarts,
            "num_start_failures": self.num_start_failures,
            "num_dropped_requests": self.num_dropped_requests,
            "num_metrics_timeouts": self.num_metrics_timeouts,
            "failure_reasons": dict(self.failure_reasons),
        }

    def set_fault_state(self, state: dict[str, Any]) -> None:
        """Counters from :meth:`get_fault_state` (missing ones, from older checkpoints, stay 0).

        ``workers.max_restarts`` counts from the resume: a run stopped by it can
        be resumed once its cause is fixed.
        """
        self.num_restarts = int(state.get("num_restarts", 0))
        self._restarts_before_resume = self.num_restarts
        self.num_start_failures = int(state.get("num_start_failures", 0))
        self.num_dropped_requests = int(state.get("num_dropped_requests", 0))
        self.num_metrics_timeouts = int(state.get("num_metrics_timeouts", 0))
        self.failure_reasons = Counter({str(k): int(v) for k, v in state.get("failure_reasons", {}).items()})

    def fault_stats(self) -> dict[str, int]:
        """Result keys about remote-worker failures (empty without remote workers)."""
        if self.config.workers.num_workers == 0:
            return {}
        stats = {
            "num_worker_restarts": self.num_restarts,
            "num_worker_start_failures": self.num_start_failures,
            "num_dropped_requests": self.num_dropped_requests,
            "num_metrics_timeouts": self.num_metrics_timeouts,
            "num_healthy_workers": len(self.healthy_remote_ids()),
            "num_pending_workers": len(self._pending),
        }
        stats.update({f"worker_failures/{reason}": n for reason, n in sorted(self.failure_reasons.items())})
        return stats

    def stop(self) -> None:
        self.local_worker.stop()
        if self._slots:
            # Let the workers close their envs (subprocesses of async vector envs) before the kill.
            closing = [handle.stop.remote() for handle in self._slots.values()]
            self._remote.ray.wait(closing, num_returns=len(closing), timeout=2.0)
            for handle in self._slots.values():
                self._remote.kill(handle)
            self._slots = {}
        for pending in self._pending.values():
            if pending.handle is not None:
                self._remote.kill(pending.handle)
        self._pending = {}


_MAX_BACKOFF_S = 30.0


@dataclass
class _PendingStart:
    """A slot whose replacement actor has not answered yet."""

    handle: Any = None  # the actor being started (None: waiting for ``next_try``)
    ping: Any = None  # its first call's ref: ready once the actor runs
    attempts: int = 0  # replacements of this slot that died before answering
    next_try: float = 0.0  # monotonic time of the next start
    last_error: str = ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def failure_reason(error: BaseException | None) -> str:
    """A short, countable reason for a worker failure (the ``worker_failures/<reason>`` result keys).

    ``node_lost``: Ray says the actor's node died; ``unreachable``: the
    actor's process stopped answering (a killed node often shows this first);
    ``hung``: no answer within ``workers.sample_timeout_s``; ``worker_died``:
    the worker process died on a live node.
    """
    if error is None:
        return "unknown"
    if isinstance(error, TimeoutError):
        return "hung"
    text = str(error)
    if "node has died" in text or "node was terminated" in text or "NodeDiedError" in type(error).__name__:
        return "node_lost"
    if type(error).__name__ == "ActorUnavailableError":
        return "unreachable"
    return "worker_died"


def _env_state(evaluator: Evaluator) -> dict[str, np.ndarray]:
    return evaluator.env.get_state()


def _bind_id(fn: Callable[[int, Evaluator], Any], worker_id: int) -> Callable[[Evaluator], Any]:
    def call(evaluator: Evaluator) -> Any:
        return fn(worker_id, evaluator)

    return call
