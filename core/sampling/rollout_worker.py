"""RolloutWorker (rollout worker) and WorkerSet.

An :class:`RolloutWorker` owns a vectorized env (from an env adapter) and a policy,
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
:class:`~rlgear.sampling.collector.PolicyCollector`: one for a single-agent env (the policy
``default``, its slots the env slots), one per policy for a
:class:`~rlgear.env.MultiAgentVectorEnv`. Recording (fragments, whole episodes, episode
bookkeeping) is :class:`~rlgear.sampling.sampler.Sampler`, for every env: a
single-agent env is its one-agent case (:class:`~rlgear.sampling.sampler.OneAgentEnv`, one
policy, every slot always active), not a loop of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.config import multiagent
from rlgear.discovery import hooks as hooks_mod
from rlgear.env import MultiAgentVectorEnv, VideoRequest
from rlgear.errors import UnsupportedError
from rlgear.league import remote as league_remote
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.sampling.agent_groups import AgentGroups
from rlgear.sampling.collector import PolicyCollector
from rlgear.sampling.postprocessing import trainable_rows
from rlgear.sampling.sampler import (  # drop_invalid_rows: re-exported, it lived here
    OneAgentEnv,
    Sampler,
    check_policy_spaces,
    drop_invalid_rows,
)
from rlgear.timestep import TimeStep

__all__ = ["RolloutWorker", "drop_invalid_rows", "env_seed", "worker_seed"]

#: ``pop_metrics`` key of the whole episodes recorded for ``offline.output`` (see
#: :class:`~rlgear.sampling.episode_recorder.EpisodeRecorder`), written by the driver.
RECORDED_EPISODES = "recorded_episodes"
#: ``pop_metrics`` key of a remote worker's observation-filter delta (merged by the driver).
OBS_FILTER_DELTA = "obs_filter_delta"

PostprocessFn = Callable[[SampleBatch, Any, Any], SampleBatch]

# Env i of worker w is seeded with seed + WORKER_SEED_STRIDE * w + i.
WORKER_SEED_STRIDE = 10_000


def default_postprocess(fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
    return trainable_rows(fragment)


#: ``worker_index`` of a trainer's evaluation worker (its envs and seeds apart from training's).
EVALUATION_WORKER_INDEX = 999


def _offset(seed: int | None, offset: int) -> int | None:
    return None if seed is None else seed + offset


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


class RolloutWorker:
    """A rollout worker: env adapter + policy.

    Args:
        config: the resolved RunConfig.
        policy_class: the algorithm's policy class for the backend in use. One that sets
            ``groups_agents = True`` (qmix, vdn) gets a multi-agent env as one team agent
            (:class:`~rlgear.sampling.agent_groups.AgentGroups`).
        env_adapter_class: the EnvAdapter plugin class.
        postprocess_fn: ``(fragment, policy, config) -> rows``; see
            :mod:`rlgear.sampling.postprocessing`.
        worker_index: 0 for the local (driver) evaluator, 1.. for remote ones.
        hooks: a pluggy plugin manager (``on_episode_start/end``, ``on_sample_end``).
        video: record episodes of env 0 (the adapter must have ``records_video``); arm it
            (:meth:`~rlgear.env.VideoRequest.arm`) before the episodes to record.
        policy_factory: where the acting policies come from: the in-process worker of a trainer
            acts with its :class:`~rlgear.learner.Learner`'s (``learner.add_policy``); None (remote
            workers, evaluation workers) builds this worker's own acting copies, which receive
            the learner's weights through :meth:`set_weights`.
    """

    #: The league this worker plays (``league`` section): the trainer's, or a remote worker's mirror.
    league: Any = None

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
        policy_factory: Callable[[str, Any, Any], Any] | None = None,
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
        if getattr(env_cfg, "preset", None) is not None:  # adapters without presets refused it
            options["preset"] = env_cfg.preset
        if video is not None:
            options["video"] = video
        league = config.league
        # a league: each learning player plays num_envs_per_worker games at once (rlgear.league.env)
        players = len(league.player_ids()) if league is not None else 1
        self.env = env_adapter_class().make(
            env_cfg.name,
            config.workers.num_envs_per_worker * players,
            kwargs=dict(env_cfg.kwargs),
            vectorization=env_cfg.vectorization,
            horizon=config.workers.horizon,
            worker_index=worker_index,
            **options,
        )
        if getattr(policy_class, "groups_agents", False):
            # a team learner (qmix, vdn): every agent of an env step in one row (agent_groups.py); a
            # single-agent env is a team of one, as it is the one-agent case everywhere else
            try:
                inner = self.env if isinstance(self.env, MultiAgentVectorEnv) else OneAgentEnv(self.env)
                self.env = AgentGroups(inner)
            except BaseException:
                self.env.close()
                raise
        if league is not None:
            try:
                self.env = self._league_env(self.env, policy_class)
            except BaseException:
                self.env.close()
                raise
        self.num_envs = self.env.num_envs
        #: Several agents (an async pool is a one-agent MultiAgentVectorEnv only to step some slots per call)
        self.multi_agent = isinstance(self.env, MultiAgentVectorEnv) and not self.env.one_agent
        try:
            self._build_collectors(config, policy_class, check_spaces, postprocess_fn, policy_factory)
        except BaseException:
            self.env.close()
            raise
        if config.offline.output is not None:  # offline.output: every episode to the driver's dataset
            try:
                self._sampler.start_recording()
            except BaseException:
                self.env.close()
                raise
        self.fragment_length = config.rollout_fragment_length()
        self.complete_episodes = config.workers.batch_mode == "complete_episodes"
        #: Env slots stepped per env step: all, or an async pool's ``steps_per_call``.
        self.steps_per_call = getattr(self.env, "steps_per_call", None) or self.num_envs
        if self.steps_per_call < self.num_envs and config.workers.rollout_fragment_length == "auto":
            self.fragment_length = config.rollout_fragment_length(self.steps_per_call)
        #: Nominal env steps per ``sample()`` call (``complete_episodes`` may take more).
        self.steps_per_sample = self.fragment_length * self.steps_per_call
        self._finished: list[dict[str, Any]] = []
        self._env_steps = 0
        #: Episodes discarded because their env's rows became invalid (an external client dropped).
        self.episodes_aborted = 0
        self._window: dict[str, dict[str, Any]] = {}
        self.reset(env_seed(config.seed, worker_index))

    def _league_env(self, inner: Any, policy_class: type) -> Any:
        """The two-player env as the league's players' env (:mod:`rlgear.league.env`): the driver's
        worker plays the league's games; the evaluation worker plays every game against the baseline."""
        from rlgear.league.env import LeagueEnv
        from rlgear.league.league import League

        config = self.config
        if not isinstance(inner, MultiAgentVectorEnv):
            raise config.fail(
                "league", f"a league plays a two-player env; env '{config.env.name}' has a single agent"
            )
        evaluation = self.worker_index == EVALUATION_WORKER_INDEX
        seed = worker_seed(config.seed, self.worker_index)
        league = League(config.league, seed)
        env = LeagueEnv(
            inner,
            league,
            lambda opponent: self._league_opponent(opponent, policy_class, league, inner),
            max_cached=config.league.max_cached_opponents,
            baseline=config.league.baseline if evaluation else None,
            explore_opponents=config.league.opponent_explore,
            seed=seed,
            report_outcomes=self.worker_index > 0 and not evaluation,  # a remote worker: to the driver
        )
        self.league = league
        return env

    def _league_opponent(self, opponent: str, policy_class: type, league: Any, inner: Any) -> Any:
        """An acting collector for ``opponent`` over the inner env's slots: the baseline, a current
        player (its live policy) or a snapshot (a policy of its own with the snapshot's weights)."""
        from rlgear.league.env import RandomOpponent

        seat = inner.possible_agents[0]
        obs_space, act_space = inner.observation_spaces[seat], inner.action_spaces[seat]
        if opponent == self.config.league.baseline and opponent not in league.players:
            return RandomOpponent(
                obs_space,
                act_space,
                self.config.env.name,
                _offset(worker_seed(self.config.seed, self.worker_index), 1),
            )
        live = self.collectors[opponent].policy if opponent in league.players else None
        collector = PolicyCollector(
            opponent,
            policy_class,
            obs_space,
            act_space,
            self.config,
            inner.num_envs,
            self.config.env.name,
            None if live is None else (lambda *_: live),
        )
        if live is None:
            collector.policy.set_weights(league.snapshot_weights[opponent])
        return collector

    def _build_collectors(
        self,
        config: Any,
        policy_class: type,
        check_spaces: Callable[[Any, Any, Any], None] | None,
        postprocess_fn: PostprocessFn,
        policy_factory: Callable[[str, Any, Any], Any] | None = None,
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
                policy_factory,
            )
            self.collectors = {ids[0]: collector}
            self._collector = collector
            env = self.env if isinstance(self.env, MultiAgentVectorEnv) else OneAgentEnv(self.env)
            self._sampler = Sampler(self, env, self.collectors, {ids[0]: [OneAgentEnv.AGENT]}, postprocess_fn)
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
                policy_factory,
            )
        first = next(iter(self.collectors.values()))
        self._collector = first
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self._sampler = Sampler(self, self.env, self.collectors, agents_of_policy, postprocess_fn)

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
        (:mod:`rlgear.plugins.families.evolution.population`: every slot with its own parameters).
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
        compacted per agent: :mod:`rlgear.sampling.sampler`); a single-agent env a SampleBatch
        (its one policy's rows).
        """
        sampler = self._sampler
        env_steps_before, agent_steps_before = self._env_steps, sampler.agent_steps
        if self.complete_episodes:  # whole agent episodes, as many agent steps as a fragment's env steps
            batches = dict(sampler.sample_episodes(self.fragment_length * self.steps_per_call))
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

        With ``offline.output``, ``recorded_episodes`` holds the whole episodes finished since (packed:
        :func:`rlgear.sampling.episode_recorder.unpack_episodes`).
        A remote worker with an observation filter adds ``obs_filter_delta``: the statistics of
        the observations it saw since the last call, which the driver merges into the global filter.
        """
        out = {"episodes": self._finished, "env_steps": self._env_steps}
        if self._sampler.recorder is not None:  # offline.output: the driver writes them
            recorded = self._sampler.recorder.pop()
            if recorded is not None:
                out[RECORDED_EPISODES] = recorded
        if self.multi_agent:  # agent steps (results: agent_timesteps_total)
            out["agent_steps"] = self._sampler.agent_steps
        if self.league is not None and self.env.report_outcomes and self.env.baseline is None:  # remote
            out[league_remote.LEAGUE_REPORT] = league_remote.report(self)
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

        The envs are reset first and after, so training fragments never mix with these. Each env
        contributes a fixed share of the episodes (env ``i`` its first ``(num_episodes + i) // n``),
        as Stable-Baselines3's ``evaluate_policy`` does: taking whichever episodes end first would
        favour short ones (with 8 envs and 10 episodes, a policy that sometimes balances for 500
        steps would be scored on its failures only).
        """
        self.reset(env_seed(self.config.seed, self.worker_index, epoch=10_000))
        envs = self.num_envs
        quota = [(num_episodes + i) // envs for i in range(envs)]
        taken = [0] * envs
        finished: list[dict[str, Any]] = []
        self._finished = []
        start = time.monotonic()
        while len(finished) < num_episodes:
            self._sampler.step(explore=explore, record=False)
            for summary in self._finished:
                env = int(summary.get("env_id", 0)) % envs
                if taken[env] < quota[env]:
                    taken[env] += 1
                    finished.append(summary)
            self._finished = []
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                break
        self._env_steps = 0
        self._sampler.agent_steps = 0
        self.reset(env_seed(self.config.seed, self.worker_index, epoch=10_001))
        return finished[:num_episodes]

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
