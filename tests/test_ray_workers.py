"""Remote workers on a real local Ray (2 CPUs, one session for the whole module).

Covers the WorkerSet's remote side: one object-store put per weight sync,
sampling on the actors, SIGKILL fault tolerance (restart counted, no stale or
duplicated samples), max_restarts, Ray's resource errors as rlgear errors, and
metrics collection that gives up on a hung worker.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import warnings

import numpy as np
import pytest

from rlgear import hookimpl
from rlgear.discovery import registry
from rlgear.distributed.ray_session import RayResourceError, WorkerFailureError
from rlgear.sample_batch import SampleBatch
from tests.conftest import HAS_RAY, small_config

if HAS_RAY:  # the tests that use it ask for the ray_session fixture, which skips without Ray
    import ray


PPO = registry.load_algorithm("ppo")


def remote_config(tmp_path, **workers):
    return small_config(
        tmp_path,
        workers={"num_workers": 2, "num_envs_per_worker": 2, **workers},
        training={"train_batch_size": 200, "sgd_minibatch_size": 50, "num_sgd_iter": 2},
    )


class CheckedPPO(PPO):
    """PPO that checks every sampled batch before learning on it.

    On-policy sampling means each row's recorded ``action_logp`` is the
    log-probability under the learner's current weights (a stale worker would
    have sampled with older ones), and no transition may appear twice.
    """

    def setup(self, config):
        super().setup(config)
        self.sampled_steps: list[int] = []

    def training_step(self):
        from rlgear.distributed.rollout_ops import synchronous_parallel_sample, train_one_step

        batch, steps = synchronous_parallel_sample(self.workers, self.config.training.train_batch_size)
        logits = self.policy.action_distribution_inputs(batch[SampleBatch.OBS])
        logp_all = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        current = logp_all[np.arange(len(batch)), batch[SampleBatch.ACTIONS]]
        np.testing.assert_allclose(batch[SampleBatch.ACTION_LOGP], current, atol=1e-4)
        rows = {
            (int(e), int(t), batch[SampleBatch.OBS][i].tobytes())
            for i, (e, t) in enumerate(zip(batch[SampleBatch.EPS_ID], batch[SampleBatch.T], strict=True))
        }
        assert len(rows) == len(batch), "a transition was sampled twice"
        assert len(batch) <= steps
        self.sampled_steps.append(steps)
        return train_one_step(self.policy, self.workers, batch)


class WorkerIdMetric:
    """A hook plugin passed in code: it must run inside the remote workers too."""

    @hookimpl
    def on_episode_end(self, worker, episode):
        episode.custom_metrics["worker_index"] = worker.worker_index


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, ray_session):
    """One checked PPO trainer on 2 remote workers (they take the 2 CPUs) for most tests here."""
    config = remote_config(tmp_path_factory.mktemp("shared"), metrics_timeout_s=2.0)
    trainer = CheckedPPO(config, hooks=[WorkerIdMetric()])
    yield trainer
    trainer.stop()


def test_hooks_passed_in_code_run_in_the_remote_workers(trainer):
    result = trainer.train()
    assert result["episodes_this_iter"] > 0
    assert result["custom_metrics/worker_index_min"] >= 1  # no episode from the local evaluator
    assert result["custom_metrics/worker_index_max"] <= 2


def test_weights_go_out_through_one_put_shared_by_all_workers(trainer, monkeypatch):
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(1) or real_put(value, **kw))
    sent = []
    for handle in trainer.workers.remote_workers:
        original = handle.set_weights

        class Spy:
            def remote(self, ref, _original=original):
                sent.append(ref)
                return _original.remote(ref)

        monkeypatch.setattr(handle, "set_weights", Spy())
    trainer.train()  # learns, then syncs once
    assert len(puts) == 1
    assert len(sent) == 2 and sent[0] is sent[1] is trainer.workers.last_weights_ref
    local = trainer.policy.get_weights()
    for handle in trainer.workers.remote_workers:
        remote = ray.get(handle.get_weights.remote())
        for name, value in local.items():
            np.testing.assert_array_equal(remote[name], value)


def test_remote_workers_do_the_sampling_with_their_own_seeds(trainer):
    result = trainer.train()
    assert result["num_worker_restarts"] == 0
    assert trainer.workers.remote_worker_ids == [1, 2]
    assert trainer.workers.local_worker.pop_metrics()["env_steps"] == 0  # the driver only learns
    pids = {ray.get(h.pid.remote()) for h in trainer.workers.remote_workers}
    assert len(pids) == 2 and os.getpid() not in pids
    # Same weights and (by design) different seeds: the two workers draw different actions.
    batches = [ray.get(h.sample_with_count.remote())[0] for h in trainer.workers.remote_workers]
    assert not np.array_equal(batches[0][SampleBatch.ACTIONS], batches[1][SampleBatch.ACTIONS])
    # One round of 2 workers x 2 envs x 50 steps; the reset step after each episode is no env step.
    assert 200 - result["episodes_this_iter"] - 4 <= result["timesteps_this_iter"] <= 200


def test_a_synchronous_batch_is_laid_out_in_worker_order_whichever_worker_answers_first(trainer, monkeypatch):
    # Arrival order depends on timing; if it decided the row order, the learner's seeded
    # minibatch shuffle would differ from run to run and a seeded run would not repeat.
    from rlgear.distributed import async_ops

    arrivals: list[int] = []
    wait = async_ops.RequestPool.wait

    def tagging_wait(self, *args, **kwargs):
        results = wait(self, *args, **kwargs)
        for worker_id, (batch, _) in results:
            arrivals.append(worker_id)
            batch["worker"] = np.full(len(batch), worker_id)
        return results

    monkeypatch.setattr(async_ops.RequestPool, "wait", tagging_wait)
    trainer.workers.remote_worker(1).apply.remote(lambda evaluator: time.sleep(1.5))  # worker 1 answers last
    batch, _ = async_ops.synchronous_remote_sample(trainer.workers, 400)  # 2 requests per worker
    assert arrivals[0] == 2 and sorted(arrivals) == [1, 1, 2, 2]
    assert np.all(np.diff(batch["worker"]) >= 0), "rows must come in worker order, not arrival order"
    assert set(batch["worker"]) == {1, 2}
    list(trainer.workers.pop_metrics())  # don't leave these steps to the next test's first result


def test_reset_config_reaches_the_remote_workers(trainer):
    training = dataclasses.replace(trainer.config.training, lr=1.5e-4)
    assert trainer.reset_config(dataclasses.replace(trainer.config, training=training))
    assert trainer.workers.foreach_worker(lambda evaluator: evaluator.config.training.lr) == [1.5e-4] * 3


def test_sigkilled_worker_is_replaced_and_no_sample_is_stale_or_duplicated(trainer):
    restarts, sampled = trainer.workers.num_restarts, len(trainer.sampled_steps)
    total = trainer.timesteps_total
    results = [trainer.train() for _ in range(2)]
    victim = trainer.workers.remote_worker(1)
    os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)
    results += [trainer.train() for _ in range(3)]  # CheckedPPO checks every batch
    # The replacement starts in the background; worker 2 samples alone meanwhile.
    # A replacement imports torch before it answers: over 60 s on a loaded 2-core machine.
    deadline = time.monotonic() + 240
    while trainer.workers.healthy_remote_ids() != [1, 2] and time.monotonic() < deadline:
        results.append(trainer.train())
    assert results[-1]["num_worker_restarts"] == restarts + 1 == 1
    assert trainer.workers.remote_worker(1) is not victim
    assert trainer.workers.healthy_remote_ids() == [1, 2]
    # Env steps: what each iteration reports is exactly what its batches held.
    assert [r["timesteps_this_iter"] for r in results] == trainer.sampled_steps[sampled:]
    assert results[-1]["timesteps_total"] - total == sum(trainer.sampled_steps[sampled:])
    assert all(r["num_healthy_workers"] + r["num_pending_workers"] == 2 for r in results)
    assert all(r["timesteps_this_iter"] > 0 for r in results)  # no iteration stalled on the dead worker
    results.append(trainer.train())
    assert results[-1]["num_healthy_workers"] == 2 and results[-1]["num_pending_workers"] == 0
    lrs = trainer.workers.foreach_worker(lambda evaluator: evaluator.config.training.lr)
    assert lrs == [trainer.config.training.lr] * 3  # the replacement runs the current config


def test_too_many_workers_read_as_an_rlgear_resource_error(tmp_path, ray_session):
    with warnings.catch_warnings():
        # Ray is already running (this module's session): no local Ray starts, so no oversubscription warning
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RayResourceError, match="asked for 4 workers x 1 CPU, the cluster has 2 CPUs"):
            PPO(remote_config(tmp_path, num_workers=4))


def test_metrics_collection_gives_up_on_a_hung_worker_and_collects_later(trainer):
    trainer.train()
    workers = trainer.workers
    timeouts = workers.num_metrics_timeouts
    hung = workers.remote_worker(1)
    hung.apply.remote(lambda evaluator: time.sleep(6))  # the actor is busy, so pop_metrics queues
    start = time.monotonic()
    metrics = list(workers.pop_metrics())
    assert time.monotonic() - start < 5  # metrics_timeout_s is 2
    assert workers.num_metrics_timeouts == timeouts + 1
    assert len(metrics) == 3  # local, the answering worker, and the late one (steps only)
    time.sleep(6)
    later = list(workers.pop_metrics())
    assert workers.num_metrics_timeouts == timeouts + 1  # the kept request answered this time
    assert len(later) == 3


def test_run_stops_with_a_clear_error_after_max_restarts(trainer, tmp_path):
    trainer.stop()  # last test of the module: free the shared trainer's CPUs for a fresh run
    run = PPO(remote_config(tmp_path, max_restarts=0))
    try:
        run.train()
        os.kill(ray.get(run.workers.remote_worker(2).pid.remote()), signal.SIGKILL)
        with pytest.raises(WorkerFailureError, match=r"remote worker 2 failed .*workers.max_restarts is 0"):
            for _ in range(3):
                run.train()
    finally:
        run.stop()


def test_more_worker_cpus_than_cores_warns_before_a_local_ray_starts(monkeypatch):
    from rlgear.distributed.remote_worker import warn_if_oversubscribed

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(RuntimeWarning, match=r"4 workers x 1 CPU = 4 CPUs on a machine with 2 cores"):
        warn_if_oversubscribed(4, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_oversubscribed(2, 1)  # fits: no warning


def test_the_cli_prints_a_warning_as_one_line():
    from rlgear.cli.main import _one_line_warning

    text = _one_line_warning(RuntimeWarning("workers.num_workers: too many"), RuntimeWarning, "x.py", 3)
    assert text == "rlgear: warning: workers.num_workers: too many\n"
