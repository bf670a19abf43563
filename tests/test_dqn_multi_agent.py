"""dqn on a multi-agent env on the TF backend and on Ray workers (a few iterations on the toy env).

Each policy must fill its own replay buffer with its own agents' transitions, learn from it (its own
learner stats), and its weights must change and reach every remote worker.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.discovery import registry
from tests.test_multi_agent import dqn_config, independent

pytest.importorskip("torch")


def short_dqn(**extra) -> dict:
    raw = dqn_config(multiagent=independent(), **extra)
    raw["training"] = {**raw["training"], "learning_starts": 64, "train_batch_size": 32}
    return raw


def train_and_check(trainer, iterations: int) -> dict:
    """Trains, then checks what every multi-agent dqn run must show; returns the last result."""
    before = {pid: p.get_weights() for pid, p in trainer.policy_map.items()}
    for _ in range(iterations):
        result = trainer.train()
    sizes = {pid: len(buffer) for pid, buffer in trainer.replay_buffers.items()}
    assert set(sizes) == {"pa", "pb"} and sizes["pa"] == sizes["pb"] > 0  # one transition per agent step
    assert result["agent_timesteps_total"] == 2 * result["timesteps_total"]
    for pid in ("pa", "pb"):
        assert result[f"learner/{pid}/num_grad_updates"] > 0
        assert result[f"learner/{pid}/replay_buffer_size"] == sizes[pid]
        after = trainer.policy_map[pid].get_weights()
        assert any(not np.array_equal(after[k], v) for k, v in before[pid].items()), pid
    assert trainer.replay_buffers["pa"] is not trainer.replay_buffers["pb"]
    return result


def test_dqn_learns_each_policy_on_the_tf_backend():
    pytest.importorskip("tensorflow")
    trainer = registry.load_algorithm("dqn")(short_dqn(backend="tf"))
    try:
        assert type(trainer.policy_map["pa"]).__module__.endswith("tf_policy")
        train_and_check(trainer, 3)
    finally:
        trainer.stop()


def test_dqn_samples_on_ray_workers_and_syncs_every_policys_weights(ray_session):
    raw = short_dqn(
        workers={"num_workers": 2, "num_envs_per_worker": 2, "ray": {"worker_start_timeout_s": 600.0}}
    )
    trainer = registry.load_algorithm("dqn")(raw)
    try:
        result = train_and_check(trainer, 4)
        assert result["timesteps_total"] > 0
        local = trainer.workers.local_worker.get_weights()
        remote = trainer.workers.foreach_worker(lambda w: w.get_weights())[1:]
        assert len(remote) == 2
        for weights in remote:  # synced after the training step: every policy, every worker
            for pid in ("pa", "pb"):
                for key, value in local[pid].items():
                    np.testing.assert_array_equal(weights[pid][key], value)
        # the exploration schedule follows the run's timesteps on the remote workers too
        epsilons = trainer.workers.foreach_worker(
            lambda w: {pid: p.epsilon() for pid, p in w.policy_map.items()}
        )
        for eps in epsilons[1:]:
            assert eps == epsilons[0]
    finally:
        trainer.stop()
