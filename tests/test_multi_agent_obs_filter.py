"""``model.observation_filter`` with several policies: one filter per policy, over its own agents' observations.

Agent ``a`` of the late-join env sees ``[k / 5 + ..., 0]``, agent ``b`` ``[..., 1]``: mapped to policies
``pa`` and ``pb``, each filter must hold the statistics of its own agent's active rows only (a shared
filter would mix the second column's 0s and 1s), in-process, through a checkpoint and merged across
Ray workers.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.run import agent
from rlgear.run import checkpoint as ckpt
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.multi_agent_envs import LoggedLateJoinEnv
from tests.test_multi_agent import independent, ma_config

pytest.importorskip("torch")

FILTERED = {"observation_filter": "mean_std", "hidden_sizes": [16]}


class RawLoggedLateJoinEnv(LoggedLateJoinEnv):
    """Logs a copy of each agent's observations as the env gave them (the evaluator filters the
    TimeStep it is handed in place, so the log of the parent class holds filtered ones)."""

    def _mts(self, prev):
        mts = super()._mts(prev)
        self.raw = getattr(self, "raw", [])
        self.raw.append({a: (mts.steps[a].observation.copy(), mts.active[a].copy()) for a in mts.steps})
        return mts


def make_raw_logged(num_envs: int) -> RawLoggedLateJoinEnv:
    return RawLoggedLateJoinEnv(num_envs)


def raw_logged_config(**sections) -> dict:
    raw = ma_config(model=FILTERED, multiagent=independent(), **sections)
    raw["env"]["name"] = f"{__name__}:make_raw_logged"
    return raw


def seen_rows(log, agent_id: str) -> np.ndarray:
    """Every observation the env gave ``agent_id`` where it was active (what its policy's filter counts)."""
    return np.concatenate([log_entry[agent_id][0][log_entry[agent_id][1]] for log_entry in log])


def test_each_policy_filters_the_observations_of_its_own_agents_only():
    raw = raw_logged_config(workers={"num_envs_per_worker": 2, "rollout_fragment_length": 6})
    config = config_mod.resolve(raw)
    algo = registry.load_algorithm("ppo")
    evaluator = RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )
    try:
        batches = [evaluator.sample() for _ in range(3)]
        log = list(evaluator.env.raw)
        filters = evaluator.obs_filters
    finally:
        evaluator.stop()
    assert set(filters) == {"pa", "pb"} and filters["pa"] is not filters["pb"]
    for pid, agent_id in (("pa", "a"), ("pb", "b")):
        rows = seen_rows(log, agent_id)
        stats = filters[pid].stats
        assert stats.count == len(rows) > 10
        np.testing.assert_allclose(stats.mean, rows.mean(axis=0), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(stats.var, rows.var(axis=0), rtol=1e-5, atol=1e-9)
    # b's second column is always 1: its own filter maps it to 0 (a filter shared with a's 0s would not)
    for batch in batches:
        assert np.all(batch["pb"]["obs"][:, 1] == 0.0) and np.all(batch["pa"]["obs"][:, 1] == 0.0)
    assert filters["pa"].stats.mean[1] == 0.0 and filters["pb"].stats.mean[1] == 1.0


def test_a_per_policy_model_override_gives_a_filter_to_that_policy_only():
    raw = ma_config(
        "make_late_join",
        multiagent={
            "policies": {"pa": {"model": {"observation_filter": "mean_std"}}, "pb": {}},
            "policy_mapping": {"a": "pa", "b": "pb"},
        },
    )
    config = config_mod.resolve(raw)
    algo = registry.load_algorithm("ppo")
    evaluator = RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )
    try:
        batch = evaluator.sample()
        assert set(evaluator.obs_filters) == {"pa"} and evaluator.obs_filters["pa"].stats.count > 0
    finally:
        evaluator.stop()
    assert (batch["pa"]["obs"][:, 0] < 0).any()  # standardised: the raw step column is never negative
    assert np.all(batch["pb"]["obs"][:, 1] == 1.0) and (batch["pb"]["obs"][:, 0] >= 0).all()  # b's: raw


def test_a_checkpoint_keeps_each_policys_filter_under_its_prefix_and_restores_it(tmp_path):
    raw = ma_config("make_late_join", model=FILTERED, multiagent=independent())
    trainer = registry.load_algorithm("ppo")(raw, logdir=tmp_path / "run")
    try:
        trainer.train()
        saved = {pid: f.get_state() for pid, f in trainer.workers.local_worker.obs_filters.items()}
        path = trainer.save()
    finally:
        trainer.stop()
    arrays, _, _, _ = ckpt.read(ckpt.resolve_path(path))
    assert {"policy/pa/obs_filter/count", "policy/pb/obs_filter/count"} <= set(arrays)
    assert not any(k.startswith("obs_filter/") for k in arrays)  # no unprefixed (single-policy) copy
    assert int(saved["pa"]["count"]) != int(saved["pb"]["count"])  # b joins late: fewer rows
    resumed = registry.load_algorithm("ppo")(raw, logdir=tmp_path / "resumed")
    try:
        resumed.restore(path)
        restored = {pid: f.get_state() for pid, f in resumed.workers.local_worker.obs_filters.items()}
    finally:
        resumed.stop()
    for pid in ("pa", "pb"):
        for key, value in saved[pid].items():
            np.testing.assert_array_equal(restored[pid][key], value)
    loaded = agent.load(path, policy_id="pb")  # a loaded policy applies its own policy's statistics
    for key, value in saved["pb"].items():
        np.testing.assert_array_equal(loaded.obs_filter.get_state()[key], value)
    assert loaded.obs_filter.frozen


def test_with_two_ray_workers_each_policys_driver_filter_counts_its_agents_observations(ray_session):
    raw = raw_logged_config(
        workers={
            "num_workers": 2,
            "num_envs_per_worker": 2,
            "rollout_fragment_length": 12,
            "ray": {"worker_start_timeout_s": 600.0},
        }
    )
    trainer = registry.load_algorithm("ppo")(raw)
    try:
        for _ in range(2):
            trainer.train()
        seen = trainer.workers.foreach_worker(
            lambda w: {a: len(seen_rows(w.env.raw, a)) for a in ("a", "b")}
        )  # local first (its first reset only), then both remote workers
        driver = trainer.workers.local_worker.obs_filters
        assert len(seen) == 3 and all(s["a"] > 0 and s["b"] > 0 for s in seen[1:])
        assert driver["pa"].stats.count == sum(s["a"] for s in seen)
        assert driver["pb"].stats.count == sum(s["b"] for s in seen)
        # the merged statistics of each policy go back with the weights
        trainer.workers.sync_weights()
        states = trainer.workers.foreach_worker(
            lambda w: {pid: f.get_state() for pid, f in w.obs_filters.items()}
        )
    finally:
        trainer.stop()
    for state in states[1:]:
        for pid in ("pa", "pb"):
            for key, value in states[0][pid].items():
                np.testing.assert_array_equal(state[pid][key], value)
