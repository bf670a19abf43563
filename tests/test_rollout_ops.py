"""The training-step building blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.distributed.rollout_ops import (
    concat_batches,
    concurrently,
    parallel_rollouts,
    replay,
    store_to_replay,
    synchronous_parallel_sample,
    train_one_step,
)
from rlgear.distributed.worker_set import WorkerSet
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter
from rlgear.sample_batch import SampleBatch
from tests.conftest import small_config


@pytest.fixture
def workers(tmp_path):
    raw = small_config(tmp_path, workers={"num_envs_per_worker": 2, "rollout_fragment_length": 5})
    config = config_mod.resolve(raw)
    workers = WorkerSet(config, PPO.policy_class("torch"), GymnasiumAdapter, PPO.postprocess)
    yield workers
    workers.stop()


def fake_rollouts(sizes):
    for n in sizes:
        yield SampleBatch(a=np.arange(n)), n


def test_synchronous_sample_takes_whole_rounds_up_to_the_requested_steps(workers):
    batch, steps = synchronous_parallel_sample(workers, 25)  # 10 steps per round -> 3 rounds
    assert 25 <= steps <= 30
    assert len(batch) <= steps  # LAST rows are dropped, never added
    assert workers.local_worker.pop_metrics()["env_steps"] == steps


def test_parallel_rollouts_yield_one_round_per_item(workers):
    items = list(itertools.islice(parallel_rollouts(workers), 3))
    assert [steps <= 10 for _, steps in items] == [True, True, True]
    _, steps = next(parallel_rollouts(workers, mode="async"))  # no remote workers: the local one samples
    assert 0 < steps <= 10
    with pytest.raises(ValueError, match="async"):
        next(parallel_rollouts(workers, mode="fast"))


def test_concat_batches_reaches_the_minimum_env_steps_and_loses_nothing():
    out = list(concat_batches(fake_rollouts([3, 4, 5, 6, 7]), min_env_steps=8))
    assert [steps for _, steps in out] == [12, 13]  # 3+4+5, 6+7
    assert [len(batch) for batch, _ in out] == [12, 13]
    np.testing.assert_array_equal(out[0][0]["a"], np.concatenate([np.arange(3), np.arange(4), np.arange(5)]))


def test_concurrently_round_robins_with_weights_and_stops_with_the_first_flow():
    flows = [iter(["r1", "r2", "r3"]), itertools.count()]
    assert list(concurrently(flows, weights=[1, 3])) == ["r1", 0, 1, 2, "r2", 3, 4, 5, "r3", 6, 7, 8]
    with pytest.raises(ValueError):
        list(concurrently([[1], [2]], weights=[1]))


class ListBuffer:
    def __init__(self):
        self.batches = []

    def add(self, batch):
        self.batches.append(batch)

    def sample(self, num_items, **kwargs):
        rows = SampleBatch.concat(self.batches)
        return rows.slice(0, num_items)


def test_store_to_replay_passes_batches_through_and_replay_samples():
    buffer = ListBuffer()
    passed = list(store_to_replay(buffer, fake_rollouts([2, 3])))
    assert [steps for _, steps in passed] == [2, 3]
    assert len(buffer.batches) == 2
    assert len(replay(buffer, 4)) == 4


def test_train_one_step_learns_then_syncs_weights():
    calls = []

    class Policy:
        def learn_on_batch(self, batch):
            calls.append(("learn", len(batch)))
            return {"loss": 1.0}

    class Workers:
        def sync_weights(self):
            calls.append(("sync", None))

    assert train_one_step(Policy(), Workers(), SampleBatch(a=np.zeros(3))) == {"loss": 1.0}
    assert calls == [("learn", 3), ("sync", None)]
