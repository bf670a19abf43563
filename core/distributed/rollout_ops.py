"""Training-step building blocks (plain functions and iterators over a WorkerSet).

An algorithm's ``training_step`` composes these so that it reads like the
paper's pseudo-code::

    batch, steps = synchronous_parallel_sample(self.workers, cfg.train_batch_size)
    stats = train_one_step(self.policy, self.workers, batch)

or, for flows that run forever (replay-based and asynchronous algorithms)::

    rollouts = concat_batches(parallel_rollouts(self.workers), min_env_steps=1000)
    learning = (train_one_step(policy, workers, replay(buffer, 64)) for _ in itertools.count())
    for item in concurrently([rollouts, learning], weights=[1, 4]): ...

Every iterator yields ``(SampleBatch, env_steps)`` pairs where batches flow, so
env-step accounting (transitions, not rows: LAST rows are dropped by
postprocessing) is never guessed from batch sizes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from rlgear.learner import Learner
from rlgear.sample_batch import MultiAgentBatch, SampleBatch, concat_any
from rlgear.sampling.rollout_worker import RECORDED_EPISODES


class Replay(Protocol):
    def add(self, batch: SampleBatch) -> None: ...
    def sample(self, num_items: int, **kwargs: Any) -> SampleBatch: ...


def synchronous_parallel_sample(workers: Any, min_env_steps: int) -> tuple[SampleBatch, int]:
    """Sample rounds from every worker until about ``min_env_steps`` env steps are collected.

    The number of rounds is fixed up front from each worker's nominal
    ``steps_per_sample`` (fragment length x envs), so the reset steps that
    next-step autoreset inserts between episodes (not counted as env steps)
    never trigger a whole extra round. Returns the concatenated batch and the
    env steps (transitions) it holds.
    """
    if getattr(workers, "has_remote_workers", False):  # remote workers sample, the local one only learns
        from rlgear.distributed.async_ops import synchronous_remote_sample

        return synchronous_remote_sample(workers, min_env_steps)
    per_round = sum(worker.steps_per_sample for worker in workers.workers())
    rounds = max(1, math.ceil(min_env_steps / per_round))
    batches: list[SampleBatch] = []
    steps = 0
    for _ in range(rounds):
        for worker in workers.workers():
            batch, count = worker.sample_with_count()
            batches.append(batch)
            steps += count
    return concat_any(batches), steps


def synchronous_parallel_sample_with_episodes(
    workers: Any, min_env_steps: int
) -> tuple[SampleBatch, int, list[dict[str, Any]]]:
    """:func:`synchronous_parallel_sample`, plus the summaries of the episodes that ended while sampling.

    Each summary (``episode_return``: every reward, the final step's included; ``length``;
    ``terminated``, ``truncated``, ``worker_index``, ...) comes from the evaluator that
    stepped the env, so an algorithm never rebuilds returns from fragments. The episodes
    still reach the run's metrics as usual.
    """
    if getattr(workers, "has_remote_workers", False):
        from rlgear.distributed.async_ops import synchronous_remote_sample

        return synchronous_remote_sample(workers, min_env_steps, with_episodes=True)
    per_round = sum(worker.steps_per_sample for worker in workers.workers())
    rounds = max(1, math.ceil(min_env_steps / per_round))
    batches: list[SampleBatch] = []
    episodes: list[dict[str, Any]] = []
    steps = 0
    for _ in range(rounds):
        for worker in workers.workers():
            batch, count, finished = worker.sample_with_episodes()
            batches.append(batch)
            episodes.extend(finished)
            steps += count
    return concat_any(batches), steps, episodes


def parallel_rollouts(workers: Any, mode: str = "sync") -> Iterator[tuple[SampleBatch, int]]:
    """An endless stream of ``(batch, env_steps)``, one round over all workers per item.

    ``mode="sync"`` waits for every worker each round; ``mode="async"`` yields
    each remote worker's batch as soon as it arrives, keeping
    ``workers.max_requests_in_flight_per_worker`` requests queued per worker
    (:class:`rlgear.distributed.async_ops.AsyncSampler`).
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"parallel_rollouts mode {mode!r} is not available; use 'sync' or 'async'")
    if mode == "async":
        from rlgear.distributed.async_ops import AsyncSampler

        sampler = AsyncSampler(workers, workers.config.workers.max_requests_in_flight_per_worker)
        while True:
            for batch, steps, _ in sampler.get_ready():
                yield batch, steps
    while True:
        yield synchronous_parallel_sample(workers, 0)


def concat_batches(
    rollouts: Iterable[tuple[SampleBatch, int]], min_env_steps: int
) -> Iterator[tuple[SampleBatch, int]]:
    """Concatenate incoming batches until each output holds at least ``min_env_steps`` env steps."""
    pending: list[SampleBatch] = []
    steps = 0
    for batch, count in rollouts:
        pending.append(batch)
        steps += count
        if steps >= min_env_steps:
            yield concat_any(pending), steps
            pending, steps = [], 0


def _is_learner(obj: Any) -> bool:
    """A :class:`~rlgear.learner.Learner`, or a learner group (learner actors) standing in for one."""
    from rlgear.distributed.learner_group import LearnerGroup

    return isinstance(obj, Learner | LearnerGroup)


def train_one_step(
    policy: Any,
    workers: Any,
    batch: SampleBatch | MultiAgentBatch,
    policies_to_train: Sequence[str] | None = None,
) -> dict[str, float]:
    """Learn on ``batch``, then send the new weights to the workers.

    ``policy`` is the trainer's :class:`~rlgear.learner.Learner` (``Learner.update``: with a
    :class:`MultiAgentBatch` each trained policy learns on its own rows, stats ``<id>/<key>``), or,
    as before the Learner, one Policy or the policy set (``{id: Policy}``, each policy of
    ``policies_to_train``, default all, learning on its own rows).
    """
    if _is_learner(policy) and policies_to_train is None:
        stats = policy.update(batch)
    elif isinstance(batch, MultiAgentBatch):
        stats = learn_per_policy(policy, batch, policies_to_train)
    else:
        stats = policy.learn_on_batch(batch)
    workers.sync_weights()
    return stats


def learn_per_policy(
    policies: Mapping[str, Any], batch: MultiAgentBatch, policies_to_train: Sequence[str] | None = None
) -> dict[str, float]:
    """Each trained policy learns on its own rows of ``batch``; stats keyed ``<policy id>/<key>``."""
    stats: dict[str, float] = {}
    for pid in policies if policies_to_train is None else policies_to_train:
        rows = batch.get(pid)
        if rows is None or len(rows) == 0:
            continue
        for key, value in policies[pid].learn_on_batch(rows).items():
            stats[f"{pid}/{key}"] = value
    return stats


def store_to_replay(
    buffer: Replay, rollouts: Iterable[tuple[SampleBatch, int]]
) -> Iterator[tuple[SampleBatch, int]]:
    """Add every incoming batch to ``buffer`` and pass it on unchanged."""
    for batch, count in rollouts:
        buffer.add(batch)
        yield batch, count


def replay(buffer: Replay, num_items: int, **sample_kwargs: Any) -> SampleBatch:
    """One minibatch of ``num_items`` rows from ``buffer`` (kwargs go to ``buffer.sample``)."""
    return buffer.sample(num_items, **sample_kwargs)


def concurrently(flows: Sequence[Iterable[Any]], weights: Sequence[int] | None = None) -> Iterator[Any]:
    """Round-robin over several flows, taking ``weights[i]`` items from flow ``i`` per round.

    Ends when any flow ends. With ``weights=[1, 4]``, one rollout is followed by
    four learning steps, the training intensity of replay-based algorithms.
    """
    weights = list(weights) if weights is not None else [1] * len(flows)
    if len(weights) != len(flows) or any(w < 1 for w in weights):
        raise ValueError(f"need one positive weight per flow, got {weights} for {len(flows)} flows")
    iterators = [iter(flow) for flow in flows]
    while True:
        for iterator, weight in zip(iterators, weights, strict=True):
            for _ in range(weight):
                try:
                    yield next(iterator)
                except StopIteration:
                    return


def standard_metrics(trainer: Any) -> tuple[int, int]:
    """Collect episode metrics and env-step counts from every worker into the trainer.

    Returns ``(env_steps, episodes)`` since the last call; the trainer's
    iteration loop calls this after each training step.
    """
    steps = episodes = agent_steps = 0
    for metrics in trainer.workers.pop_metrics():
        steps += metrics["env_steps"]
        agent_steps += metrics.get("agent_steps", metrics["env_steps"])
        episodes += len(metrics["episodes"])
        trainer.metrics.add(metrics["episodes"])
        recorded = metrics.get(RECORDED_EPISODES)
        if recorded and trainer.dataset_recorder is not None:  # offline.output
            trainer.dataset_recorder.add(recorded)
    trainer.timesteps_total += steps
    if hasattr(trainer, "agent_timesteps_total"):
        trainer.agent_timesteps_total += agent_steps
    trainer.episodes_total += episodes
    return steps, episodes
