"""A trainer's checkpoint, assembled and taken apart: what ``Trainer.save`` and ``Trainer.restore`` do.

A checkpoint holds everything needed to continue exactly: the learner's part (each policy's
weights, optimizer state and counters, under ``policy/<id>/``), the framework's RNG state, the
iteration counters, the metrics window, the fault counters, the env statistics
(``env.wrappers_vector``), the observation filters' statistics and the algorithm's own state and
arrays. Arrays go to safetensors, the rest to JSON (:mod:`rlgear.run.checkpoint` writes and reads
the files). Restoring checks everything that can be checked (algorithm, policy ids, spaces,
filter shapes, env statistics) before it changes anything.
"""

from __future__ import annotations

import copy
import platform
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

import rlgear
from rlgear.errors import CheckpointError
from rlgear.policy import PolicyState
from rlgear.run import checkpoint as ckpt
from rlgear.run import league_play
from rlgear.sampling.observation_filter import RunningStats
from rlgear.sampling.rollout_worker import env_seed
from rlgear.spaces import space_from_json


def collect(trainer: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and JSON state for a checkpoint."""
    arrays: dict[str, np.ndarray] = {}
    policy_metas: dict[str, Any] = {}
    for pid, policy_state in trainer.learner.get_state().items():  # policy/<id>/weights/..., /optimizer/...
        arrays.update({f"{ckpt.policy_prefix(pid)}{k}": v for k, v in policy_state.arrays.items()})
        policy_metas[pid] = policy_state.meta
    for key, value in trainer.backend.get_rng_state().items():
        arrays[f"rng/{key}"] = value
    state = {
        "counters": {
            "training_iteration": trainer.iteration,
            "timesteps_total": trainer.timesteps_total,
            "agent_timesteps_total": trainer.agent_timesteps_total,
            "episodes_total": trainer.episodes_total,
            "time_total_s": trainer.time_total_s,
            "restore_epoch": trainer.restore_epoch,
        },
        "metrics_window": trainer.metrics.get_state(),
        "fault_counters": {
            **trainer.workers.get_fault_state(),
            "learner_restarts": int(getattr(trainer.learner, "num_restarts", 0)),
        },
        "policy_metas": policy_metas,
        "algorithm_state": trainer.get_algorithm_state(),
    }
    arrays.update({f"algorithm/{k}": v for k, v in trainer.get_algorithm_arrays().items()})
    if getattr(trainer, "league", None) is not None:  # the league: snapshots' weights, results, ratings
        state["league"], league_arrays = trainer.league.get_state()
        arrays.update({f"league/{k}": v for k, v in league_arrays.items()})
    arrays.update({f"env/{k}": v for k, v in trainer.workers.get_env_state().items()})
    several = len(trainer.policy_map) > 1
    for pid, obs_filter in trainer.workers.local_worker.obs_filters.items():
        # the global statistics (remote workers' deltas merged), per policy
        prefix = ckpt.obs_filter_prefix(pid, several)
        arrays.update({f"{prefix}{k}": v for k, v in obs_filter.get_state().items()})
    return arrays, state


def snapshot(trainer: Any) -> dict[str, Any]:
    """A checkpoint in memory: ``{"arrays", "state", "config", "metadata"}``, as ``save`` writes it.

    Arrays are copies, so the snapshot stays valid while training goes on
    (population-based training clones weights from these without touching disk).
    """
    arrays, state = trainer.get_state()
    worker = trainer.workers.local_worker
    metadata = {
        "rlgear_version": rlgear.__version__,
        "algorithm": trainer.name,
        "backend": trainer.backend_name,
        "training_iteration": trainer.iteration,
        "timesteps_total": trainer.timesteps_total,
        "observation_space": worker.observation_space.to_json(),
        "action_space": worker.action_space.to_json(),
        "policy_spaces": {
            pid: {
                "observation_space": c.observation_space.to_json(),
                "action_space": c.action_space.to_json(),
            }
            for pid, c in worker.collectors.items()
        },
        "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    arrays = {key: np.array(value, copy=True) for key, value in arrays.items()}
    return {
        "arrays": arrays,
        "state": copy.deepcopy(state),
        "config": trainer.config.to_dict(),
        "metadata": metadata,
    }


def restore(trainer: Any, snapshot: Mapping[str, Any], source: str = "checkpoint") -> None:
    """Continue from what ``save_to_object`` (or a checkpoint folder) holds; the config is kept."""
    path = source
    arrays, state, metadata = snapshot["arrays"], snapshot["state"], snapshot["metadata"]
    if metadata.get("algorithm") != trainer.name:
        raise CheckpointError(
            f"{path}: checkpoint of algorithm '{metadata.get('algorithm')}', this trainer is '{trainer.name}'"
        )
    worker = trainer.workers.local_worker
    saved_ids = ckpt.checkpoint_policy_ids(arrays, state)
    if sorted(saved_ids) != sorted(worker.collectors):
        raise CheckpointError(
            f"{path}: the checkpoint holds policies {', '.join(saved_ids)}, this trainer has "
            f"{', '.join(worker.collectors)}"
        )
    saved_spaces = metadata.get("policy_spaces") or {
        saved_ids[0]: {k: metadata[k] for k in ("observation_space", "action_space")}
    }
    for pid, collector in worker.collectors.items():
        for key, space in (
            ("observation_space", collector.observation_space),
            ("action_space", collector.action_space),
        ):
            if space_from_json(saved_spaces[pid][key]) != space:
                which = "" if len(saved_ids) == 1 else f"policy '{pid}': "
                raise CheckpointError(
                    f"{path}: {which}the checkpoint's {key} differs from the env's ({space})"
                )
    filter_arrays = checked_obs_filter_arrays(trainer, arrays, path)  # checked before anything changes
    try:  # first: it checks the arrays against env.wrappers_vector before anything changes
        trainer.workers.set_env_state(
            {k.removeprefix("env/"): v for k, v in arrays.items() if k.startswith("env/")}
        )
    except CheckpointError as err:
        raise CheckpointError(f"{path}: {err}") from err
    same_backend = metadata.get("backend") == trainer.backend_name
    metas = state.get("policy_metas") or {saved_ids[0]: state.get("policy_meta", {})}
    learner = trainer.learner
    try:
        if same_backend:
            learner.set_state(
                {pid: PolicyState(ckpt.policy_arrays(arrays, pid), metas[pid]) for pid in learner.policy_map}
            )
        else:  # another backend: weights are portable, optimizer state is not
            learner.set_weights({pid: ckpt.policy_weights(arrays, pid) for pid in learner.policy_map})
    except ValueError as err:  # the policy checks everything before it changes anything
        raise CheckpointError(f"{path}: the checkpoint does not fit this trainer's config: {err}") from err
    if same_backend:
        trainer.backend.set_rng_state(
            {k.removeprefix("rng/"): v for k, v in arrays.items() if k.startswith("rng/")}
        )
    counters = state["counters"]
    trainer.iteration = int(counters["training_iteration"])
    trainer.timesteps_total = int(counters["timesteps_total"])
    trainer.agent_timesteps_total = int(counters.get("agent_timesteps_total", trainer.timesteps_total))
    trainer.episodes_total = int(counters["episodes_total"])
    trainer.time_total_s = float(counters["time_total_s"])
    trainer.restore_epoch = int(counters.get("restore_epoch", 0)) + 1
    trainer.metrics.set_state(state["metrics_window"])
    faults = state.get("fault_counters", {})
    trainer.workers.set_fault_state(faults)  # counts go on across a resume
    if hasattr(trainer.learner, "restore_fault_state"):  # learner actors: their restarts too
        trainer.learner.restore_fault_state(int(faults.get("learner_restarts", 0)))
    trainer.set_algorithm_state(state.get("algorithm_state", {}))
    if getattr(trainer, "league", None) is not None and "league" in state:
        trainer.league.set_state(
            state["league"],
            {k.removeprefix("league/"): v for k, v in arrays.items() if k.startswith("league/")},
        )
        trainer.workers.league_known.clear()  # the remote workers' mirrors get the restored league whole
        league_play.sync(trainer)
    trainer.set_algorithm_arrays(
        {k.removeprefix("algorithm/"): v for k, v in arrays.items() if k.startswith("algorithm/")}
    )
    if filter_arrays:
        trainer.workers.foreach_worker(lambda w, a=filter_arrays: _set_obs_filter_states(w, a))
    trainer.workers.sync_weights()
    # Env internals can't be saved in general: restart envs with a seed that
    # depends on how often the run was restored, so a resumed run is reproducible.
    # The observation filter keeps the checkpoint's statistics exactly: these first
    # observations are normalised with them, not counted.
    seed, epoch = trainer.config.seed, trainer.restore_epoch
    trainer.workers.foreach_worker_with_id(
        lambda index, evaluator: evaluator.reset(env_seed(seed, index, epoch), update_filter=False)
    )


def checked_obs_filter_arrays(
    trainer: Any, arrays: Mapping[str, Any], path: str
) -> dict[str, dict[str, Any]]:
    """Per policy with a filter, the checkpoint's observation-filter statistics, checked against
    the filter (empty without filters)."""
    several = len(trainer.policy_map) > 1
    out = {}
    for pid, obs_filter in trainer.workers.local_worker.obs_filters.items():
        filter_arrays = ckpt.obs_filter_arrays(dict(arrays), pid, several)
        which = f"policy '{pid}': " if several else ""
        if not filter_arrays:
            raise CheckpointError(
                f"{path}: {which}the checkpoint holds no observation filter statistics, but "
                "model.observation_filter is mean_std (it was trained without the filter)"
            )
        try:
            RunningStats.from_arrays(filter_arrays, obs_filter.shape, "the checkpoint")
        except ValueError as err:
            raise CheckpointError(f"{path}: {which}{err}") from err
        out[pid] = filter_arrays
    return out


def _set_obs_filter_states(evaluator: Any, arrays: dict[str, dict[str, Any]]) -> None:
    """A checkpoint's filter statistics into each policy's filter (on any worker)."""
    for pid, obs_filter in evaluator.obs_filters.items():
        obs_filter.set_state(arrays[pid])
