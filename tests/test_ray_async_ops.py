"""AsyncSampler and AsyncGradients against real Ray actors (one local Ray, 2 CPUs, for the module)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.distributed.async_ops import AsyncGradients, AsyncSampler
from rlgear.distributed.worker_set import WorkerSet
from rlgear.sample_batch import SampleBatch
from tests.conftest import HAS_RAY, small_config

if HAS_RAY:  # the tests that use it ask for the ray_session fixture, which skips without Ray
    import ray

PPO = registry.load_algorithm("ppo")


def make_workers(tmp_path, num_workers=2):
    raw = small_config(
        tmp_path,
        workers={"num_workers": num_workers, "num_envs_per_worker": 2, "rollout_fragment_length": 16},
    )
    config = config_mod.resolve(raw, training_class=PPO.config_class)
    return WorkerSet(
        config, PPO.policy_class("torch"), registry.load_env_adapter("gymnasium"), PPO.postprocess
    )


@pytest.fixture(scope="module")
def workers(tmp_path_factory, ray_session):
    """One WorkerSet (2 actors) for the module; a test that slows a worker down restores it."""
    workers = make_workers(tmp_path_factory.mktemp("workers"))
    yield workers
    workers.stop()


def slow_down(evaluator, seconds):
    """Make this evaluator's sampling slow (runs inside the worker)."""
    original = type(evaluator).sample_with_count

    def slow():
        time.sleep(seconds)
        return original(evaluator)

    evaluator.sample_with_count = slow


def restore_speed(evaluator):
    evaluator.__dict__.pop("sample_with_count", None)


def drain(op):
    """Wait for an op's requests still in flight, so the next test starts with idle workers."""
    if op._pool is not None:
        op._pool.wait(None, wait_for_all=True)


def test_async_sampler_keeps_the_requested_number_in_flight_per_worker(workers):
    sampler = AsyncSampler(workers, max_requests_in_flight_per_worker=3)
    ready = sampler.get_ready()
    assert ready, "get_ready without a timeout returns at least one batch"
    for batch, steps, worker_id in ready:
        assert worker_id in (1, 2)
        assert 0 < len(batch) <= steps <= 32
        assert SampleBatch.ACTION_LOGP in batch  # the behaviour policy's logp travels with the batch
        batch[SampleBatch.OBS][0] = 0.0  # handed over writable, not as read-only shared memory
    assert [sampler.in_flight(i) for i in (1, 2)] == [3, 3]
    drain(sampler)


def test_async_sampler_returns_whichever_worker_finishes_first(workers):
    ray.get(workers.remote_worker(1).apply.remote(slow_down, 1.5))
    sampler = AsyncSampler(workers, max_requests_in_flight_per_worker=1)
    first = sampler.get_ready()
    assert {worker_id for _, _, worker_id in first} == {2}
    seen = [worker_id for _ in range(6) for _, _, worker_id in sampler.get_ready()]
    assert seen.count(2) > seen.count(1)  # the fast worker is never held back by the slow one
    ray.get(workers.remote_worker(1).apply.remote(restore_speed))
    drain(sampler)


def test_async_sampler_drops_a_dead_workers_requests_and_replaces_it(workers):
    restarts, dropped = workers.num_restarts, workers.num_dropped_requests
    sampler = AsyncSampler(workers, max_requests_in_flight_per_worker=2)
    sampler.get_ready()
    victim = workers.remote_worker(1)
    ray.get(victim.apply.remote(slow_down, 0.5))  # its queued requests are still running when it dies
    sampler.get_ready()
    os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while workers.num_restarts == restarts and time.monotonic() < deadline:
        sampler.get_ready(timeout_s=1.0)
    assert workers.num_restarts == restarts + 1
    assert workers.num_dropped_requests >= dropped + 1
    assert workers.remote_worker(1) is not victim
    ids = set()
    # A fresh deadline: the replacement actor imports torch before it samples, which on a loaded
    # 2-core machine has taken more than 60 s (the loop ends as soon as it delivers).
    deadline = time.monotonic() + 180
    while 1 not in ids and time.monotonic() < deadline:
        ids |= {worker_id for _, _, worker_id in sampler.get_ready()}
    assert 1 in ids  # the replacement samples
    assert [sampler.in_flight(i) for i in (1, 2)] == [2, 2]
    drain(sampler)


def test_a_hung_worker_is_replaced_after_the_sample_timeout(workers, monkeypatch):
    restarts, dropped = workers.num_restarts, workers.num_dropped_requests
    quick = dataclasses.replace(workers.config.workers, sample_timeout_s=1.0)
    monkeypatch.setattr(workers, "config", dataclasses.replace(workers.config, workers=quick))
    hung = workers.remote_worker(2)
    ray.get(hung.apply.remote(slow_down, 30.0))  # alive, but never answers in time
    sampler = AsyncSampler(workers, max_requests_in_flight_per_worker=1)
    deadline = time.monotonic() + 30
    while workers.num_restarts == restarts and time.monotonic() < deadline:
        sampler.get_ready(timeout_s=0.5)
    assert workers.num_restarts == restarts + 1
    assert workers.remote_worker(2) is not hung
    assert workers.num_dropped_requests == dropped + 1  # its one request in flight
    drain(sampler)


def test_async_gradients_come_back_with_weight_names_and_steps(workers):
    workers.pop_metrics()  # forget what earlier tests delivered
    gradients = AsyncGradients(workers)
    names = set(workers.local_worker.get_weights())
    received = []
    # Generous: worker 2 may be the previous test's replacement, still importing torch on a
    # loaded 2-core machine (the loop ends as soon as both workers delivered).
    deadline = time.monotonic() + 120
    while len({w for *_, w in received}) < 2 and time.monotonic() < deadline:
        for grads, stats, steps, worker_id in gradients.get_ready():
            assert set(grads) == names
            assert isinstance(stats, dict) and steps > 0
            assert gradients.in_flight(worker_id) == 0  # re-issued only after the learner's sync
            workers.local_worker.policy.apply_gradients(grads)
            workers.sync_weights([worker_id])
            received.append((steps, worker_id))
    assert {w for _, w in received} == {1, 2}
    received += [(steps, worker_id) for _, _, steps, worker_id in gradients.get_ready()]
    assert all(gradients.in_flight(i) <= 1 for i in (1, 2))
    counted = sum(m["env_steps"] for m in workers.pop_metrics())
    assert counted == sum(s for s, _ in received)  # exactly the env steps of delivered gradients
    drain(gradients)


def test_without_remote_workers_the_ops_run_the_local_evaluator(tmp_path):
    workers = make_workers(tmp_path, num_workers=0)
    try:
        ((batch, steps, worker_id),) = AsyncSampler(workers).get_ready()
        assert worker_id == 0 and 0 < len(batch) <= steps
        ((grads, _, steps, worker_id),) = AsyncGradients(workers).get_ready()
        assert worker_id == 0 and set(grads) == set(workers.local_worker.get_weights())
    finally:
        workers.stop()
