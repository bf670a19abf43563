"""Worker-failure counters go on across a checkpoint and resume; max_restarts counts from the resume."""

from __future__ import annotations

from rlgear.discovery import registry
from tests.conftest import small_config

PPO = registry.load_algorithm("ppo")


def test_failure_counters_survive_a_checkpoint_and_max_restarts_counts_from_the_resume(tmp_path):
    trainer = PPO(small_config(tmp_path))
    try:
        trainer.train()
        workers = trainer.workers
        workers.num_restarts, workers.num_start_failures = 3, 2
        workers.num_dropped_requests, workers.num_metrics_timeouts = 5, 1
        workers.failure_reasons.update({"node_lost": 2, "worker_died": 1})
        path = trainer.save(tmp_path / "checkpoint")
    finally:
        trainer.stop()
    resumed = PPO(small_config(tmp_path))
    try:
        resumed.restore(path)
        workers = resumed.workers
        assert workers.get_fault_state() == {
            "num_restarts": 3,
            "num_start_failures": 2,
            "num_dropped_requests": 5,
            "num_metrics_timeouts": 1,
            "failure_reasons": {"node_lost": 2, "worker_died": 1},
        }
        assert workers.num_restarts - workers._restarts_before_resume == 0  # a fresh allowance
    finally:
        resumed.stop()
