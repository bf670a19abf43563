"""Learner actors on Ray (``learners.num_learners``): N data-parallel learners make one learner's update.

Every equality test trains the same seeded run twice, with the learner in the driver and with two
learner actors (each on a shard of every minibatch, gradients all-reduced over gloo), and compares
the weights after three iterations. The shards differ in size and content, so a wrong share, a
missed all-reduce or a per-shard statistic shows as a gap far above float noise.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.distributed.ray_session import LearnerFailureError, RayResourceError, shutdown_ray
from tests.conftest import HAS_RAY, start_local_ray

pytestmark = pytest.mark.skipif(not HAS_RAY, reason="needs Ray: pip install 'rlgear[ray]'")

#: Logical CPUs of this module's Ray: two learners and one remote worker fit.
RAY_CPUS = 4


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with room for two learners and a remote worker (logical CPUs)."""
    shutdown_ray(force=True)
    start_local_ray(num_cpus=RAY_CPUS)
    yield
    shutdown_ray(force=True)


def flat_weights(weights: dict, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in weights.items():
        if isinstance(value, dict):
            out.update(flat_weights(value, f"{prefix}{key}/"))
        else:
            out[prefix + key] = np.asarray(value)
    return out


def config_for(algorithm: str, num_learners: int) -> dict:
    """A small seeded run of ``algorithm`` whose minibatches split unevenly over two learners."""
    base = {
        "algorithm": algorithm,
        "seed": 11,
        "learners": {"num_learners": num_learners},
        "workers": {"num_envs_per_worker": 2, "ray": {"worker_start_timeout_s": 600.0}},
        "logging": {"progress": "none"},
    }
    if algorithm == "ppo":  # 3 minibatches of 67 rows: shards of 34 and 33
        base.update(
            env={"name": "CartPole-v1", "vectorization": "sync"},
            training={
                "train_batch_size": 200,
                "sgd_minibatch_size": 67,
                "num_sgd_iter": 2,
                "normalize_advantages": True,
            },
        )
    elif algorithm == "ppo-lstm":  # padded sequences: shards weigh their valid rows (seq_mask)
        base.update(
            algorithm="ppo",
            env={"name": "CartPole-v1", "vectorization": "sync"},
            model={"lstm": True, "lstm_cell_size": 16, "max_seq_len": 8, "hidden_sizes": [32]},
            training={"train_batch_size": 160, "sgd_minibatch_size": 80, "num_sgd_iter": 2},
        )
    elif algorithm == "dqn":
        base.update(
            env={"name": "CartPole-v1", "vectorization": "sync"},
            training={"learning_starts": 64, "train_batch_size": 33, "prioritized_replay": True},
        )
    elif algorithm == "sac":
        base.update(
            env={"name": "Pendulum-v1", "vectorization": "sync"},
            model={"hidden_sizes": [32, 32]},
            training={"learning_starts": 64, "train_batch_size": 33, "training_intensity": 4},
        )
        base["workers"]["num_envs_per_worker"] = 1
    elif algorithm == "impala":
        base.update(env={"name": "CartPole-v1", "vectorization": "sync"})
        base["workers"]["num_workers"] = 1
    return base


def train_weights(config: dict, iterations: int = 3) -> tuple[dict[str, np.ndarray], dict]:
    cls = registry.load_algorithm(config["algorithm"])
    trainer = cls(config)
    try:
        for _ in range(iterations):
            result = trainer.train()
        return flat_weights(trainer.learner.get_weights()), result
    finally:
        trainer.stop()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "ppo-lstm", "dqn", "sac", "impala"])
def test_two_learners_make_the_same_update_as_the_learner_in_the_driver(ray_session, algorithm):
    alone, _ = train_weights(config_for(algorithm, 0))
    sharded, result = train_weights(config_for(algorithm, 2))
    assert result["learner/num_learners"] == 2.0
    assert set(alone) == set(sharded)
    gap = max(float(np.max(np.abs(alone[k] - sharded[k]))) for k in alone)
    assert gap <= 1e-4, f"{algorithm}: 2 learners drifted from 1 by {gap}"
    # and the learners did learn: the weights moved from the initial ones
    cls = registry.load_algorithm(config_for(algorithm, 0)["algorithm"])
    fresh = cls(config_for(algorithm, 0))
    try:
        initial = flat_weights(fresh.learner.get_weights())
    finally:
        fresh.stop()
    assert max(float(np.max(np.abs(initial[k] - sharded[k]))) for k in initial) > 1e-3


def test_one_learner_actor_trains_and_reports_itself(ray_session):
    config = config_for("ppo", 1)
    weights, result = train_weights(config, iterations=2)
    assert result["learner/num_learners"] == 1.0
    assert result["num_learner_restarts"] == 0.0
    assert np.isfinite(result["learner/total_loss"])
    alone, _ = train_weights(config_for("ppo", 0), iterations=2)
    assert max(float(np.max(np.abs(alone[k] - weights[k]))) for k in alone) <= 1e-5


def test_a_dead_learner_is_replaced_from_the_last_weights_and_training_goes_on(ray_session, tmp_path):
    cls = registry.load_algorithm("ppo")
    trainer = cls(config_for("ppo", 2))
    try:
        trainer.train()
        before = flat_weights(trainer.learner.get_weights())
        import ray

        ray.kill(trainer.learner._actors[1], no_restart=True)
        result = trainer.train()
        assert result["num_learner_restarts"] == 1.0
        assert np.isfinite(result["learner/total_loss"])
        after = flat_weights(trainer.learner.get_weights())
        # the new group started from `before` and learned on: close to it, but moved
        moved = max(float(np.max(np.abs(before[k] - after[k]))) for k in before)
        assert 0 < moved < 1.0
        path = trainer.save(tmp_path / "after_restart")
    finally:
        trainer.stop()
    resumed = cls(config_for("ppo", 2))
    try:
        resumed.restore(path)
        assert resumed.train()["num_learner_restarts"] == 1.0  # the count goes on across a resume
    finally:
        resumed.stop()


def test_past_max_restarts_the_run_stops_naming_the_cause_and_a_checkpoint_holds_the_last_weights(
    ray_session, tmp_path
):
    config = config_for("ppo", 2)
    config["learners"]["max_restarts"] = 0
    cls = registry.load_algorithm("ppo")
    trainer = cls(config, logdir=tmp_path)
    try:
        trainer.train()
        last = flat_weights(trainer.learner.get_weights())
        import ray

        ray.kill(trainer.learner._actors[0], no_restart=True)
        with pytest.raises(LearnerFailureError, match=r"learners\.max_restarts is 0"):
            trainer.train()
        path = trainer.save(tmp_path / "last_good")
    finally:
        trainer.stop()
    restored = cls(config_for("ppo", 0))
    try:
        restored.restore(path)
        weights = flat_weights(restored.learner.get_weights())
    finally:
        restored.stop()
    assert max(float(np.max(np.abs(last[k] - weights[k]))) for k in last) == 0.0


def test_a_checkpoint_of_learner_actors_restores_in_the_driver_and_back(ray_session, tmp_path):
    cls = registry.load_algorithm("ppo")
    trainer = cls(config_for("ppo", 2))
    try:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        saved = flat_weights(trainer.learner.get_weights())
    finally:
        trainer.stop()
    in_driver = cls(config_for("ppo", 0))
    try:
        in_driver.restore(path)
        assert all(
            np.array_equal(saved[k], v) for k, v in flat_weights(in_driver.learner.get_weights()).items()
        )
        path_back = in_driver.save(tmp_path / "ckpt_back")
    finally:
        in_driver.stop()
    actors = cls(config_for("ppo", 2))
    try:
        actors.restore(path_back)
        assert all(np.array_equal(saved[k], v) for k, v in flat_weights(actors.learner.get_weights()).items())
        # and the local rollout worker acts with them
        local = flat_weights(actors.workers.local_worker.get_weights())
        assert all(np.array_equal(saved[k], v) for k, v in local.items())
    finally:
        actors.stop()


def test_more_learner_cpus_than_the_cluster_has_fail_before_anything_starts(ray_session):
    config = config_for("ppo", 3)
    config["learners"]["num_cpus_per_learner"] = 2
    cls = registry.load_algorithm("ppo")
    with pytest.raises(
        RayResourceError, match=r"learners: asked for 3 learners x 2 CPU, the cluster has 4 CPUs"
    ):
        cls(config)
    config = config_for("ppo", 1)
    config["learners"]["num_gpus_per_learner"] = 1
    with pytest.raises(
        RayResourceError, match=r"learners: asked for 1 learners x 1 GPU, the cluster has 0 GPUs"
    ):
        cls(config)


@pytest.fixture
def cluster():
    """A local 2-node Ray cluster (``ray.cluster_utils.Cluster``: each node a raylet of its own), 2
    CPUs a node, the head holding none (the driver only)."""
    import os

    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray.cluster_utils import Cluster

    shutdown_ray(force=True)  # another test's local Ray
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        made.add_node(num_cpus=2)
    made.wait_for_nodes()
    yield made
    ray.shutdown()
    made.shutdown()


def wait_for_free_cpus(cpus: float, timeout_s: float = 60.0) -> None:
    """Ray frees a removed placement group's bundles asynchronously; wait until ``cpus`` are free."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < cpus:
        assert time.monotonic() < deadline, f"Ray still holds CPUs: {ray.available_resources()}"
        time.sleep(0.2)


@pytest.mark.slow
def test_learners_spread_over_two_nodes_train_as_one(cluster):
    """``placement: spread`` puts the two learners on two nodes, and they learn as one learner."""
    config = config_for("ppo", 2)
    config["learners"]["placement"] = "spread"
    config["workers"]["ray"]["address"] = cluster.address
    cls = registry.load_algorithm("ppo")
    trainer = cls(config)
    try:
        assert len(set(trainer.learner.node_ids())) == 2
        for _ in range(3):
            result = trainer.train()
        spread = flat_weights(trainer.learner.get_weights())
    finally:
        trainer.stop()
    assert result["learner/num_learners"] == 2.0
    config["learners"]["placement"] = "pack"
    wait_for_free_cpus(4.0)  # PACK is best effort: the spread group's CPUs must be back first
    packed_trainer = cls(config)
    try:
        assert len(set(packed_trainer.learner.node_ids())) == 1  # 2 CPUs a node: both fit on one
    finally:
        packed_trainer.stop()
    import ray

    ray.shutdown()
    alone, _ = train_weights(config_for("ppo", 0))
    assert max(float(np.max(np.abs(alone[k] - spread[k]))) for k in alone) <= 1e-4


@pytest.mark.slow
def test_ppo_with_two_learners_solves_cartpole_within_200k_env_steps(ray_session):
    from tests.conftest import train_until_stop

    result = train_until_stop(
        registry.load_algorithm("ppo"),
        "ppo-cartpole.yaml",
        "seed=0",
        "learners.num_learners=2",
        "stop={episode_return_mean: 475, timesteps_total: 200000}",
    )
    assert result["learner/num_learners"] == 2.0
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 200_000 + 2048


def test_a_live_config_change_reaches_the_learner_actors(ray_session):
    """PBT's reset_config: the learners' own policies take the new learning rate."""
    from rlgear import config as config_mod

    cls = registry.load_algorithm("ppo")
    raw = config_for("ppo", 2)
    trainer = cls(raw)
    try:
        assert trainer.train()["learner/cur_lr"] == pytest.approx(trainer.config.training.lr)
        raw["training"]["lr"] = 1.234e-4
        assert trainer.reset_config(config_mod.resolve(raw, training_class=cls.config_class))
        assert trainer.train()["learner/cur_lr"] == pytest.approx(1.234e-4)  # as the learners report it
    finally:
        trainer.stop()
