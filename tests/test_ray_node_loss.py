"""A lost Ray node: its workers are replaced on live nodes and the run goes on (issue 17).

Each test builds its own multi-node cluster on this machine with
``ray.cluster_utils.Cluster`` (every node is a raylet of its own), places the
run's workers on one node, removes that node without warning (as a SIGKILL of
its raylet would) and checks what the run does next. Node health checks are
set fast (0.5 s period) so Ray marks the removed node dead within seconds.
"""

from __future__ import annotations

import os
import time

import pytest

from rlgear.discovery import registry
from rlgear.distributed.ray_session import WorkerFailureError
from tests.conftest import needs_ray, small_config

pytestmark = [needs_ray, pytest.mark.slow]

PPO = registry.load_algorithm("ppo")
FAST_HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
    "health_check_timeout_ms": 500,
}


@pytest.fixture
def cluster():
    """A head node with ``head_cpus`` CPUs (0: nothing runs there); tests add worker nodes."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray.cluster_utils import Cluster

    from rlgear.distributed.ray_session import shutdown_ray

    shutdown_ray(force=True)  # another module's local Ray
    clusters = []

    def make(head_cpus: int) -> Cluster:
        made = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": head_cpus, "_system_config": FAST_HEALTH_CHECKS},
        )
        clusters.append(made)
        return made

    yield make
    ray.shutdown()
    for made in clusters:
        made.shutdown()


def trainer_on(cluster, tmp_path, start_timeout_s: float = 600.0):
    raw = small_config(
        tmp_path,
        workers={
            "num_workers": 2,
            "num_envs_per_worker": 2,
            "ray": {"address": cluster.address, "worker_start_timeout_s": start_timeout_s},
        },
    )
    return PPO(raw)


def worker_nodes(trainer) -> set[str]:
    import ray

    return set(ray.get([handle.node_id.remote() for handle in trainer.workers.remote_workers]))


def wait_until_marked_dead(node_id: str, timeout_s: float = 30.0) -> None:
    import ray

    deadline = time.monotonic() + timeout_s
    while any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
        assert time.monotonic() < deadline, f"Ray never marked node {node_id} dead"
        time.sleep(0.2)


def train_until(trainer, condition, max_seconds: float = 90.0):
    """Train until ``condition(result)`` (iterations take ~20 ms here, a replacement starts in
    seconds: the bound is time); every iteration must add env steps. Returns the results."""
    results = []
    deadline = time.monotonic() + max_seconds
    while True:
        result = trainer.train()
        if results:
            assert result["timesteps_total"] > results[-1]["timesteps_total"], result
        results.append(result)
        if condition(result):
            return results
        assert time.monotonic() < deadline, results[-1]


def test_a_lost_node_is_replaced_on_a_live_node_and_the_run_goes_on(cluster, tmp_path):
    cluster = cluster(head_cpus=0)
    doomed = cluster.add_node(num_cpus=2)
    trainer = trainer_on(cluster, tmp_path)
    try:
        train_until(trainer, lambda r: r["training_iteration"] >= 2)
        assert worker_nodes(trainer) == {doomed.node_id}
        spare = cluster.add_node(num_cpus=2)
        cluster.remove_node(doomed, allow_graceful=False)

        results = train_until(
            trainer, lambda r: r["num_healthy_workers"] == 2 and r["num_worker_restarts"] == 2
        )
        last = results[-1]
        failures = {k: v for k, v in last.items() if k.startswith("worker_failures/")}
        assert sum(failures.values()) == 2, last  # one failure per worker, each with its reason
        assert set(failures) <= {"worker_failures/node_lost", "worker_failures/unreachable"}, failures
        assert last["num_pending_workers"] == 0
        assert worker_nodes(trainer) == {spare.node_id}  # never the dead node
    finally:
        trainer.stop()


def test_while_a_replacement_waits_for_room_the_run_goes_on_with_the_live_worker(cluster, tmp_path):
    cluster = cluster(head_cpus=1)  # one worker on the head, one on the node that dies
    doomed = cluster.add_node(num_cpus=1)
    trainer = trainer_on(cluster, tmp_path)
    try:
        train_until(trainer, lambda r: r["training_iteration"] >= 2)
        assert len(worker_nodes(trainer)) == 2
        cluster.remove_node(doomed, allow_graceful=False)

        # No room for the replacement: iterations go on with the one live worker.
        results = train_until(
            trainer, lambda r: r["num_pending_workers"] == 1 and r["num_healthy_workers"] == 1
        )
        before = results[-1]["timesteps_total"]
        train_until(trainer, lambda r: r["timesteps_total"] >= before + 2 * 62)

        cluster.add_node(num_cpus=1)  # room again: the replacement starts there and joins
        results = train_until(trainer, lambda r: r["num_healthy_workers"] == 2)
        assert results[-1]["num_pending_workers"] == 0
        assert results[-1]["num_worker_restarts"] == 1
        assert doomed.node_id not in worker_nodes(trainer)
    finally:
        trainer.stop()


def test_with_every_worker_lost_and_no_room_the_run_waits_then_names_the_cause(cluster, tmp_path):
    cluster = cluster(head_cpus=0)
    doomed = cluster.add_node(num_cpus=2)
    trainer = trainer_on(cluster, tmp_path)  # the first start gets the usual time (a loaded CI machine)
    try:
        trainer.train()
        # Only the wait after the loss is under test: 4 s from here on (the WorkerSet and the
        # launcher read the trainer's config each time they wait).
        trainer.config.workers.ray.worker_start_timeout_s = 4.0
        cluster.remove_node(doomed, allow_graceful=False)
        started = time.monotonic()
        with pytest.raises(WorkerFailureError) as caught:
            for _ in range(10):
                trainer.train()
        waited = time.monotonic() - started
        message = str(caught.value)
        assert "workers.ray.worker_start_timeout_s" in message
        assert "no remote worker has been live for 4 s" in message
        assert "each worker needs 1" in message
        assert waited >= 4.0  # it waited for room before giving up
    finally:
        trainer.stop()


def test_without_an_address_a_run_starts_its_own_ray_even_beside_a_running_cluster(cluster, monkeypatch):
    """ray.init() with no address attaches to the newest cluster on the machine and then refuses
    num_cpus; rlgear's "no address: a local Ray for this run" must hold anyway."""
    import ray

    from rlgear.distributed.ray_session import init_ray, shutdown_ray

    running = cluster(head_cpus=1)  # a `ray start`-style cluster on this machine
    assert not ray.is_initialized()
    try:
        assert init_ray(num_cpus=1) is True  # started, not attached
        context = ray.get_runtime_context()
        assert ray.cluster_resources()["CPU"] == 1
        assert context.gcs_address != running.address
    finally:
        shutdown_ray(force=True)


def test_the_ray_a_run_starts_runs_its_workers_at_the_drivers_priority(monkeypatch):
    """Ray renices its workers to 15 unless told otherwise; rlgear's sampling workers must not lose
    the CPU to every other process on the machine (ray_session._RAY_ENV)."""
    import ray

    from rlgear.distributed.ray_session import init_ray, shutdown_ray

    monkeypatch.delenv("RAY_worker_niceness", raising=False)  # as in a user's shell (conftest sets it)

    @ray.remote(num_cpus=1)
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)

    try:
        assert init_ray(num_cpus=1) is True
        assert ray.get(niceness.remote(), timeout=120) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        shutdown_ray(force=True)


def test_a_tune_trial_whose_node_is_lost_restarts_from_its_checkpoint_on_a_live_node(cluster, tmp_path):
    """Trials as Ray actors (tune.executor: ray): losing the node is not a trial failure (max_failures 0)."""
    import copy

    from rlgear.plugins.schedulers.fifo import FIFOScheduler
    from rlgear.scheduler import Trial, TrialStatus
    from rlgear.tune.config import TuneConfig
    from rlgear.tune.ray_executor import RayExecutor
    from rlgear.tune.runner import TrialRunner

    cluster = cluster(head_cpus=0)
    doomed = cluster.add_node(num_cpus=1)

    class LoseTheNodeOnce(FIFOScheduler):
        """Removes the trial's node after its 3rd result (in the driver's main thread, as Ray needs)."""

        done = False

        def on_trial_result(self, runner, trial, result):
            if result["training_iteration"] == 3 and not self.done:
                self.done = True
                cluster.add_node(num_cpus=1)
                cluster.remove_node(doomed, allow_graceful=False)
                wait_until_marked_dead(doomed.node_id)  # the actor may answer until then
            return super().on_trial_result(runner, trial, result)

    base = small_config(tmp_path)
    base["stop"] = {"training_iteration": 6}
    tune = TuneConfig(executor="ray", ray_address=cluster.address, checkpoint_freq=1, resource_timeout_s=60)
    trial = Trial(config=copy.deepcopy(base), trial_id="t0", logdir=str(tmp_path / "t0"))
    executor = RayExecutor(tune)
    (tmp_path / "experiment").mkdir()
    runner = TrialRunner(tmp_path / "experiment", tune, LoseTheNodeOnce(), executor, [trial])
    runner.run()
    assert trial.status == TrialStatus.TERMINATED, trial.error
    assert trial.num_failures == 0 and trial.num_lost_actors == 1
    assert trial.last_result["training_iteration"] == 6
    assert [e["event"] for e in runner.events if e.get("trial_id") == "t0"].count("actor_lost") == 1
