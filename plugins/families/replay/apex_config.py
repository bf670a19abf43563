"""Ape-X's hyperparameters (Horgan et al. 2018), on top of a replay algorithm's own.

An Ape-X algorithm's config class is ``class ApexDQNConfig(ApexConfig, DQNConfig)``: the base
algorithm's keys (its loss, target network, exploration) plus the distributed replay's. What the
keys mean is in :mod:`rlgear.plugins.families.replay.apex`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.replay.config import ReplayConfig


@dataclass
class ApexConfig(ReplayConfig):
    replay_shards: int = doc(
        "Replay shards: Ray actors each holding a prioritized replay buffer of buffer_size / replay_shards "
        "transitions. Rollout workers send their fragments to them round robin; the learner samples "
        "from them round robin.",
        2,
    )
    max_requests_in_flight_per_shard: int = doc(
        "Replay minibatches requested ahead from each shard, so the learner rarely waits for one.", 2
    )
    broadcast_interval: int = doc(
        "Learner gradient steps between weight broadcasts to the rollout workers.", 16
    )
    worker_epsilon_base: float = doc(
        "Ape-X's per-worker exploration: worker i of N explores with "
        "worker_epsilon_base ** (1 + worker_epsilon_alpha * i / (N - 1)) (DQN: epsilon; DDPG/TD3: the "
        "exploration noise's scale). Horgan et al. 2018 use 0.4 and 7.",
        0.4,
    )
    worker_epsilon_alpha: float = doc("The exponent's spread across workers (see worker_epsilon_base).", 7.0)
    prioritized_replay: bool = doc(
        "Prioritized replay in the shards: Ape-X is built on it, so it must stay true.", True
    )
    store_buffer_in_checkpoints: bool = doc(
        "Must stay false: the replay shards' contents are not checkpointed (a restored run refills them).",
        False,
    )

    def check(self, fail) -> None:
        super().check(fail)
        for key in ("replay_shards", "max_requests_in_flight_per_shard", "broadcast_interval"):
            if getattr(self, key) < 1:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        if not 0 <= self.worker_epsilon_base <= 1:
            raise fail(
                "training.worker_epsilon_base", f"expected a number in [0, 1], got {self.worker_epsilon_base}"
            )
        if self.worker_epsilon_alpha < 0:
            raise fail(
                "training.worker_epsilon_alpha", f"expected 0 or more, got {self.worker_epsilon_alpha}"
            )
        if not self.prioritized_replay:
            raise fail(
                "training.prioritized_replay",
                "Ape-X's replay shards are prioritized (its workers send initial priorities): expected true",
            )
        if self.store_buffer_in_checkpoints:
            raise fail(
                "training.store_buffer_in_checkpoints",
                "Ape-X does not checkpoint its replay shards (a restored run refills them): expected false",
            )
        if self.train_batch_size > self.buffer_size // self.replay_shards:
            raise fail(
                "training.train_batch_size",
                f"the replay minibatch ({self.train_batch_size} rows) is larger than a replay shard "
                f"(training.buffer_size / training.replay_shards: {self.buffer_size // self.replay_shards})",
            )
