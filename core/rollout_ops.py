"""Training-step building blocks over a WorkerSet (plain functions)."""

from __future__ import annotations

import math
from typing import Any

from rlgear.sample_batch import SampleBatch


def synchronous_parallel_sample(workers: Any, min_env_steps: int) -> tuple[SampleBatch, int]:
    """Sample rounds from every worker until about ``min_env_steps`` env steps are collected.

    The number of rounds is fixed up front from each worker's nominal
    ``steps_per_sample`` (fragment length x envs), so the reset steps that
    next-step autoreset inserts between episodes (not counted as env steps)
    never trigger a whole extra round. Returns the concatenated batch and the
    env steps (transitions) it holds.
    """
    per_round = sum(worker.steps_per_sample for worker in workers.workers())
    rounds = max(1, math.ceil(min_env_steps / per_round))
    batches: list[SampleBatch] = []
    steps = 0
    for _ in range(rounds):
        for worker in workers.workers():
            batch, count = worker.sample_with_count()
            batches.append(batch)
            steps += count
    return SampleBatch.concat(batches), steps
