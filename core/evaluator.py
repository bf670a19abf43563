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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from rlgear.metrics import Episode
from rlgear.postprocessing import trainable_rows
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box
from rlgear.timestep import StepType, TimeStep

PostprocessFn = Callable[[SampleBatch, Any, Any], SampleBatch]

_FIRST, _MID, _LAST = (
    int(StepType.FIRST),
    int(StepType.MID),
    int(StepType.LAST),
)  # plain ints: enum lookups cost in the hot loop

# Env i of worker w is seeded with seed + WORKER_SEED_STRIDE * w + i.
WORKER_SEED_STRIDE = 10_000


def default_postprocess(fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
    return trainable_rows(fragment)


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
            :mod:`rlgear.postprocessing`.
        worker_index: 0 for the local (driver) evaluator, 1.. for remote ones.
        hooks: a pluggy plugin manager (``on_episode_start/end``, ``on_sample_end``).
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
    ):
        self.config = config
        self.worker_index = worker_index
        self.hooks = hooks
        self.postprocess_fn = postprocess_fn
        env_cfg = config.env
        self.env = env_adapter_class().make(
            env_cfg.name,
            config.workers.num_envs_per_worker,
            kwargs=dict(env_cfg.kwargs),
            vectorization=env_cfg.vectorization,
            horizon=config.workers.horizon,
            worker_index=worker_index,
        )
        self.num_envs = self.env.num_envs
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        try:
            if check_spaces is not None:
                check_spaces(config, self.observation_space, self.action_space)
            self.policy = policy_class(self.observation_space, self.action_space, config)
        except BaseException:
            self.env.close()
            raise
        self.fragment_length = config.rollout_fragment_length()
        self.complete_episodes = config.workers.batch_mode == "complete_episodes"
        #: Nominal env steps per ``sample()`` call (``complete_episodes`` may take more).
        self.steps_per_sample = self.fragment_length * self.num_envs
        if isinstance(self.action_space, Box) and self.action_space.bounded:
            self._clip = (self.action_space.low, self.action_space.high)
        else:
            self._clip = None
        n = self.num_envs
        self._episode_return = np.zeros(n, dtype=np.float64)
        self._episode_length = np.zeros(n, dtype=np.int64)
        self._episode_ids = np.zeros(n, dtype=np.int64)
        self._next_episode_id = 0
        self._running: dict[int, Episode] = {}
        self._finished: list[dict[str, Any]] = []
        self._env_steps = 0
        self._partial: list[list[dict[str, np.ndarray]]] = [[] for _ in range(n)]
        self._timestep = self.reset(env_seed(config.seed, worker_index))

    # --- env stepping and episode bookkeeping -------------------------------
    def reset(self, seed: int | None = None) -> TimeStep:
        """Restart every env (running episodes are dropped, not counted)."""
        timestep = self.env.reset(seed=seed)
        self._running.clear()
        self._partial = [[] for _ in range(self.num_envs)]
        self._track(timestep)
        self._timestep = timestep
        return timestep

    def _step(self, actions: np.ndarray) -> TimeStep:
        env_actions = np.clip(actions, *self._clip) if self._clip is not None else actions
        timestep = self.env.step(env_actions)
        self._track(timestep)
        return timestep

    def _track(self, ts: TimeStep) -> None:
        if ts.step_type.min() == _MID and ts.step_type.max() == _MID:  # fast path: no episode starts or ends
            self._env_steps += self.num_envs
            self._episode_return += ts.reward
            self._episode_length += 1
            return
        first = ts.step_type == _FIRST
        if first.any():
            for i in np.flatnonzero(first):
                self._episode_ids[i] = self._next_episode_id
                self._next_episode_id += 1
                self._episode_return[i] = 0.0
                self._episode_length[i] = 0
                episode = Episode(
                    env_id=int(i), episode_id=int(self._episode_ids[i]), worker_index=self.worker_index
                )
                self._running[int(i)] = episode
                if self.hooks is not None:
                    self.hooks.hook.on_episode_start(worker=self, episode=episode)
        moved = ~first
        self._env_steps += int(moved.sum())
        self._episode_return += ts.reward
        self._episode_length += moved
        last = ts.step_type == _LAST
        if last.any():
            for i in np.flatnonzero(last):
                episode = self._running.pop(int(i), None)
                if episode is None:
                    continue  # started before a reset() or restore: its start was not seen
                episode.episode_return = float(self._episode_return[i])
                episode.length = int(self._episode_length[i])
                episode.terminated = bool(ts.discount[i] == 0)
                episode.truncated = not episode.terminated
                if self.hooks is not None:
                    self.hooks.hook.on_episode_end(worker=self, episode=episode)
                self._finished.append(episode.summary())

    # --- sampling -------------------------------------------------------------
    def _act(self, ts: TimeStep, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions, _, extras = self.policy.compute_actions(ts, explore=explore)
        return actions, extras

    def _row(self, ts: TimeStep, actions: np.ndarray, extras: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            SampleBatch.OBS: ts.observation,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: ts.reward,
            SampleBatch.DISCOUNTS: ts.discount,
            SampleBatch.STEP_TYPES: ts.step_type,
            SampleBatch.PREV_ACTIONS: ts.prev_action,
            SampleBatch.EPS_ID: self._episode_ids,  # copied into the fragment buffers
            SampleBatch.T: self._episode_length,
            **extras,
        }

    def _sample_fragment(self) -> SampleBatch:
        """``[T+1, B]`` time-major; the last row is the bootstrap (and the next fragment's first)."""
        length = self.fragment_length
        ts = self._timestep
        buffers: dict[str, np.ndarray] = {}
        for t in range(length + 1):
            actions, extras = self._act(ts)
            row = self._row(ts, actions, extras)
            if not buffers:
                buffers = {
                    k: np.empty((length + 1, *np.shape(v)), dtype=np.asarray(v).dtype) for k, v in row.items()
                }
            for key, value in row.items():
                buffers[key][t] = value
            if t == length:
                break
            ts = self._step(actions)
        self._timestep = ts
        return SampleBatch(buffers)

    def _sample_episodes(self, min_rows: int) -> list[SampleBatch]:
        """Whole episodes, ``[T_e, 1]`` time-major each, until ``min_rows`` env steps are in them."""
        episodes: list[SampleBatch] = []
        rows = 0
        ts = self._timestep
        while rows < min_rows:
            actions, extras = self._act(ts)
            row = self._row(ts, actions, extras)
            last = ts.step_type == StepType.LAST
            for i in range(self.num_envs):
                if ts.step_type[i] == StepType.FIRST:
                    self._partial[i] = []
                self._partial[i].append(
                    {k: np.array(v[i]) for k, v in row.items()}
                )  # the env reuses its buffers
                if last[i]:
                    steps = self._partial[i]
                    self._partial[i] = []
                    if steps[0][SampleBatch.STEP_TYPES] != StepType.FIRST:
                        continue  # began before a reset: incomplete, dropped
                    episodes.append(
                        SampleBatch({k: np.stack([s[k] for s in steps])[:, None] for k in steps[0]})
                    )
                    rows += len(steps) - 1
            ts = self._step(actions)
        self._timestep = ts
        return episodes

    def sample_with_count(self) -> tuple[SampleBatch, int]:
        """One postprocessed batch, and the env steps taken to collect it."""
        steps_before = self._env_steps
        if self.complete_episodes:
            fragments = self._sample_episodes(self.fragment_length * self.num_envs)
        else:
            fragments = [self._sample_fragment()]
        batch = SampleBatch.concat([self.postprocess_fn(f, self.policy, self.config) for f in fragments])
        if self.hooks is not None:
            self.hooks.hook.on_sample_end(worker=self, batch=batch)
        return batch, self._env_steps - steps_before

    def sample(self) -> SampleBatch:
        return self.sample_with_count()[0]

    def pop_metrics(self) -> dict[str, Any]:
        """Episodes finished since the last call (summaries) and env steps taken."""
        out = {"episodes": self._finished, "env_steps": self._env_steps}
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
        ts = self._timestep
        start = time.monotonic()
        while len(finished) < num_episodes:
            actions, _ = self._act(ts, explore=explore)
            ts = self._step(actions)
            finished.extend(self._finished)
            self._finished = []
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                break
        self._env_steps = 0
        self.reset(env_seed(self.config.seed, self.worker_index, epoch=10_001))
        return finished[:num_episodes]

    # --- weights and control --------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        return self.policy.get_weights()

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.policy.set_weights(weights)

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(self, *args)`` where this evaluator lives (in-process or on a Ray actor)."""
        return fn(self, *args)

    def stop(self) -> None:
        self.env.close()


class WorkerSet:
    """The local evaluator plus remote ones (none until the Ray integration lands).

    The local evaluator's policy is the learner's policy. ``sync_weights``
    pushes its weights to every remote evaluator.
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
        self.remote_workers: list[Any] = []

    def workers(self) -> list[Any]:
        return [self.local_worker, *self.remote_workers]

    def sync_weights(self) -> None:
        """Send the learner's weights to every remote evaluator (one copy for all)."""
        if not self.remote_workers:
            return
        weights = self.local_worker.get_weights()
        for worker in self.remote_workers:
            worker.set_weights(weights)

    def foreach_worker(self, fn: Callable[[Evaluator], Any]) -> list[Any]:
        return [w.apply(fn) for w in self.workers()]

    def pop_metrics(self) -> Iterable[dict[str, Any]]:
        return [w.pop_metrics() for w in self.workers()]

    def stop(self) -> None:
        for worker in self.workers():
            worker.stop()
