"""Ape-X: distributed prioritized experience replay (Horgan et al. 2018, arXiv:1803.00933).

:class:`ApexTrainer` is the training step; an algorithm combines it with a replay algorithm
whose policy has ``compute_td_errors(batch)`` (``class ApexDQN(ApexTrainer, DQN)``), so the
base's policies, losses and target-network updates are reused as they are. The flow:

- **Rollout workers** (Ray actors, ``workers.num_workers >= 1``) sample continuously: each
  request samples one fragment, computes its rows' initial priorities (``|TD error|`` from the
  worker's current weights, as both online and target network) and sends the fragment straight
  to a replay shard (a Ray call from the worker; the rows never pass through the driver). Worker
  ``i`` of ``N`` explores with ``eps_i = worker_epsilon_base ** (1 + worker_epsilon_alpha * i /
  (N - 1))`` (:func:`worker_epsilons`): epsilon for DQN, the noise scale for DDPG/TD3.
- **Replay shards**: ``replay_shards`` prioritized buffers in Ray actors
  (:mod:`rlgear.plugins.families.replay.replay_shards`); a dead one is replaced by an empty one
  (``num_replay_shard_restarts`` and ``num_replay_rows_lost`` in results).
- **The learner** (the driver) takes ``training_intensity / train_batch_size`` gradient steps per
  sampled env step on minibatches requested ahead from the shards (round robin, up to
  ``max_requests_in_flight_per_shard`` each), sends the minibatches' new ``|TD errors|`` back to
  their shards (one call per shard per training step), runs the base algorithm's
  :meth:`after_learning` (DQN's target update), and broadcasts its weights to the workers every
  ``broadcast_interval`` gradient steps.

A training step waits for at least one fragment; the workers go on sampling while the learner
learns, so sampling and learning overlap. Checkpoints hold the weights, optimizer state and
counters, not the shards' contents.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import BATCH_INDEXES
from rlgear.config import RunConfig
from rlgear.distributed.async_ops import RequestPool
from rlgear.plugins.families.replay.replay_shards import ReplayShardSet, ShardSampler
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer


def worker_epsilons(num_workers: int, base: float, alpha: float) -> list[float]:
    """Ape-X's exploration per worker: ``base ** (1 + alpha * i / (N - 1))`` for ``i = 0..N-1``
    (Horgan et al. 2018, section 4.1); a single worker gets ``base``."""
    if num_workers == 1:
        return [float(base)]
    return [float(base ** (1 + alpha * i / (num_workers - 1))) for i in range(num_workers)]


def sample_into_shard(evaluator: Any, shard: Any, exploration: dict[str, float]) -> int:
    """A rollout worker's Ape-X step, run in the worker process: returns the env steps sampled.

    Sets the policy's exploration keys (``exploration``: the worker's own epsilon or noise scale),
    samples one fragment, computes its initial priorities and sends it to ``shard``. The
    worker's target network is set to its current weights first: the learner's target network
    is not broadcast, and the freshest weights give the best estimate of the TD error.
    """
    policy = evaluator.policy
    training = policy.config.training
    if any(getattr(training, key) != value for key, value in exploration.items()):
        policy.config = dataclasses.replace(
            policy.config, training=dataclasses.replace(training, **exploration)
        )
    batch, steps = evaluator.sample_with_count()
    if len(batch):
        policy.update_target(1.0)
        shard.add.remote(batch, policy.compute_td_errors(batch))
    return steps


class ApexTrainer(ReplayTrainer):
    """The Ape-X training step over a replay algorithm (see the module docstring).

    A subclass lists it before its base algorithm and implements :meth:`worker_exploration`.
    """

    reads_datasets = False  # replay lives in remote shards: pre-filling them is not built

    multi_agent = False  # one policy: the shards hold one policy's transitions
    #: ``rlgear plugins --check``'s short run needs a Ray worker (check_config refuses 0)
    check_overrides = {"workers": {"num_workers": 1}}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        if config.workers.num_workers < 1:
            raise config.fail(
                "workers.num_workers",
                f"{cls.name} samples on Ray rollout workers that feed replay shards: expected 1 or more, "
                f"got {config.workers.num_workers} (in-process prioritized replay is training.prioritized_replay "
                "of the base algorithm)",
            )

    def worker_exploration(self, epsilon: float) -> dict[str, float]:
        """The training keys that make a worker's policy explore with Ape-X's ``epsilon``."""
        raise NotImplementedError

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        # The base's in-driver replay buffers go unused (the shards hold the replay): free them.
        self.replay_buffers, self.replay_buffer = {}, None
        training = config.training
        self.replay_shards = ReplayShardSet(
            training.replay_shards,
            training.buffer_size // training.replay_shards,
            alpha=training.prioritized_replay_alpha,
            beta=training.prioritized_replay_beta,
            eps=training.prioritized_replay_eps,
            seed=config.seed,
        )
        #: ``worker_epsilons[i - 1]`` is worker ``i``'s (slot ids start at 1).
        self.worker_epsilons = worker_epsilons(
            config.workers.num_workers, training.worker_epsilon_base, training.worker_epsilon_alpha
        )
        self._next_shard = 0  # fragments go to the shards round robin
        self._samples = RequestPool(self.workers, "apply", make_args=self._sample_request)
        self._replay = ShardSampler(self.replay_shards, training.max_requests_in_flight_per_shard)
        self._gradient_steps_owed = 0.0
        self._steps_since_broadcast = 0
        self.replay_shard_sizes: list[int] = [0] * training.replay_shards

    def _sample_request(self, worker_id: int) -> tuple[Any, ...]:
        shard = self.replay_shards.shards[self._next_shard % len(self.replay_shards)]
        self._next_shard += 1
        epsilon = self.worker_epsilons[(worker_id - 1) % len(self.worker_epsilons)]
        return (sample_into_shard, shard, self.worker_exploration(epsilon))

    def _keep_workers_busy(self) -> None:
        self._samples.drop_replaced()
        self.workers.poll_replacements()
        if not self.workers.remote_worker_ids and self._samples.empty:
            self.workers.wait_for_live_workers()
        in_flight = self.config.workers.max_requests_in_flight_per_worker
        for worker_id in self.workers.remote_worker_ids:
            self._samples.issue(worker_id, in_flight - self._samples.in_flight(worker_id))

    # --- the algorithm ---------------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        training = self.config.training
        self._keep_workers_busy()
        steps = 0
        for worker_id, count in self._samples.wait(None):
            self.workers.record_env_steps(worker_id, count)
            steps += count
        self._keep_workers_busy()
        timesteps = self.timesteps_total + steps
        stats: dict[str, float] = {}
        if timesteps >= training.learning_starts:
            self._gradient_steps_owed += steps * training.training_intensity / training.train_batch_size
            owed = int(self._gradient_steps_owed)
            if owed:
                stats = self.learn_from_shards(owed, timesteps)
                self._gradient_steps_owed -= stats["num_gradient_steps"]
                if stats["num_gradient_steps"]:
                    stats.update(self.after_learning(timesteps))
        return self.learner_stats({f"{self.policies_to_train[0]}/{k}": v for k, v in stats.items()})

    def learn_from_shards(self, num_gradient_steps: int, timesteps: int) -> dict[str, float]:
        """Up to ``num_gradient_steps`` gradient steps on minibatches from the shards (fewer while the
        shards are empty); returns the learner stats averaged over them."""
        policy = self.policy
        training = policy.config.training
        beta = self.prioritized_replay_beta(timesteps)
        totals: dict[str, float] = {}
        done = 0
        empty: set[int] = set()  # shards that had nothing to sample this step
        # New priorities per shard, sent in one call per shard at the end (not one per minibatch)
        updates: dict[int, tuple[Any, list[np.ndarray], list[np.ndarray]]] = {}
        while done < num_gradient_steps:
            self._replay.fill(training.train_batch_size, beta, skip=empty)
            if self._replay.empty:
                break
            index, handle, minibatch = self._replay.next()
            if handle is None:
                continue  # a dead shard: replaced, its request is lost
            if minibatch is None:
                empty.add(index)
                continue
            for key, value in policy.learn_on_batch(minibatch).items():
                totals[key] = totals.get(key, 0.0) + value
            td_errors = policy.td_errors
            finite = np.isfinite(td_errors)  # a skipped non-finite update keeps the old priorities
            _, indexes, priorities = updates.setdefault(id(handle), (handle, [], []))
            indexes.append(minibatch[BATCH_INDEXES][finite])
            priorities.append(td_errors[finite])
            done += 1
            self._steps_since_broadcast += 1
            if self._steps_since_broadcast >= training.broadcast_interval:
                self.workers.sync_weights()
                self._steps_since_broadcast = 0
        for handle, indexes, priorities in updates.values():  # fire and forget: a dead shard loses them
            handle.update_priorities.remote(np.concatenate(indexes), np.concatenate(priorities))
        stats = {key: value / max(done, 1) for key, value in totals.items()}
        stats["num_grad_updates"] = float(policy.num_grad_updates)
        stats["num_gradient_steps"] = float(done)
        stats["prioritized_replay_beta"] = beta
        return stats

    def train(self) -> dict[str, Any]:
        """One iteration; the shards' sizes are asked once per iteration (a round trip to each shard,
        which also finds a dead shard while the learner is not sampling yet)."""
        result = super().train()
        self.replay_shard_sizes = self.replay_shards.sizes()
        result["learner/replay_buffer_size"] = float(sum(self.replay_shard_sizes))
        result["num_replay_shard_restarts"] = self.replay_shards.num_restarts
        result["num_replay_rows_lost"] = self.replay_shards.num_rows_lost
        return result

    # --- checkpoints: weights, optimizer and counters; the shards' contents are not saved ---------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            **super().get_algorithm_state(),
            "num_replay_shard_restarts": self.replay_shards.num_restarts,
            "num_replay_rows_lost": self.replay_shards.num_rows_lost,
            "gradient_steps_owed": self._gradient_steps_owed,
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        super().set_algorithm_state(state)
        self.replay_shards.num_restarts = int(state.get("num_replay_shard_restarts", 0))
        self.replay_shards.num_rows_lost = int(state.get("num_replay_rows_lost", 0))
        self._gradient_steps_owed = float(state.get("gradient_steps_owed", 0.0))

    def stop(self) -> None:
        shards = getattr(self, "replay_shards", None)
        if shards is not None:
            shards.stop()
        super().stop()
