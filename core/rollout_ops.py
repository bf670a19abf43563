"""Training-step building blocks over a WorkerSet (plain functions)."""

from __future__ import annotations

from typing import Any

from rlgear.sample_batch import SampleBatch


def synchronous_parallel_sample(workers: Any, min_env_steps: int) -> tuple[SampleBatch, int]:
    """Sample from every worker until at least ``min_env_steps`` env steps are collected.

    Returns the concatenated batch and the env steps it took.
    """
    batches: list[SampleBatch] = []
    steps = 0
    while True:
        for worker in workers.workers():
            batch, count = worker.sample_with_count()
            batches.append(batch)
            steps += count
        if steps >= min_env_steps:
            return SampleBatch.concat(batches), steps
