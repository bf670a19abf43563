"""An offline trainer's checkpoint: the learner, counters, filter statistics and data order.

Written like an online run's (:mod:`rlgear.run.trainer_state`, the same file layout and keys, so
``rlgear evaluate`` and ``rlgear export`` read it), without what only envs and workers have (env
statistics, fault counters, the episode window). The metadata keeps the dataset's spaces and,
under ``dataset_env_id`` (and ``dataset_env``: its adapter and kwargs), the env the dataset was
recorded in when its metadata says (a run without an ``env`` section has no other record of it:
``rlgear evaluate`` falls back to it).

What resumes exactly: weights, optimizer state, counters, the framework's RNG, the filter
statistics and the generator of the data order. What does not: the position in the dataset, as
the reading restarts in a fresh order drawn from the restored generator (a resumed run learns on
other minibatches than an uninterrupted one would).
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
from rlgear.spaces import space_from_json


def collect(trainer: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and JSON state, as :func:`rlgear.run.trainer_state.collect` lays them out."""
    arrays: dict[str, np.ndarray] = {}
    policy_metas: dict[str, Any] = {}
    for pid, policy_state in trainer.learner.get_state().items():
        arrays.update({f"{ckpt.policy_prefix(pid)}{k}": v for k, v in policy_state.arrays.items()})
        policy_metas[pid] = policy_state.meta
    for key, value in trainer.backend.get_rng_state().items():
        arrays[f"rng/{key}"] = value
    obs_filter = trainer.observations.obs_filter
    if obs_filter is not None:
        for pid in trainer.learner.policy_map:
            prefix = ckpt.obs_filter_prefix(pid, False)
            arrays.update({f"{prefix}{k}": v for k, v in obs_filter.get_state().items()})
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
        "fault_counters": {"learner_restarts": int(getattr(trainer.learner, "num_restarts", 0))},
        "policy_metas": policy_metas,
        "algorithm_state": trainer.get_algorithm_state(),
    }
    arrays.update({f"algorithm/{k}": v for k, v in trainer.get_algorithm_arrays().items()})
    return arrays, state


def snapshot(trainer: Any) -> dict[str, Any]:
    """A checkpoint in memory (``{"arrays", "state", "config", "metadata"}``), arrays copied."""
    arrays, state = collect(trainer)
    spaces = {
        "observation_space": trainer.observation_space.to_json(),
        "action_space": trainer.action_space.to_json(),
    }
    metadata = {
        "rlgear_version": rlgear.__version__,
        "algorithm": trainer.name,
        "backend": trainer.backend_name,
        "training_iteration": trainer.iteration,
        "timesteps_total": trainer.timesteps_total,
        **spaces,
        "policy_spaces": {pid: dict(spaces) for pid in trainer.learner.policy_map},
        **dataset_env(trainer),
        "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return {
        "arrays": {key: np.array(value, copy=True) for key, value in arrays.items()},
        "state": copy.deepcopy(state),
        "config": trainer.config.to_dict(),
        "metadata": metadata,
    }


def dataset_env(trainer: Any) -> dict[str, Any]:
    """``dataset_env_id``: the run's env, else the one its dataset was recorded in (None when
    unknown); without an env section also ``dataset_env`` (adapter, kwargs), which ``rlgear
    evaluate`` builds when no ``env.name`` is given."""
    if trainer.config.env.name:
        return {"dataset_env_id": trainer.config.env.name}
    recorded = getattr(trainer.data, "env", None)
    out: dict[str, Any] = {"dataset_env_id": getattr(trainer.data, "env_id", None)}
    if recorded is not None:
        out["dataset_env"] = {
            "name": recorded.name,
            "adapter": recorded.adapter,
            "kwargs": dict(recorded.kwargs),
            "source": recorded.source,
        }
    return out


def restore(trainer: Any, snapshot: Mapping[str, Any], source: str = "checkpoint") -> None:
    """Continue from :func:`snapshot`'s contents; everything is checked before anything changes."""
    arrays, state, metadata = snapshot["arrays"], snapshot["state"], snapshot["metadata"]
    if metadata.get("algorithm") != trainer.name:
        raise CheckpointError(
            f"{source}: checkpoint of algorithm '{metadata.get('algorithm')}', this trainer is '{trainer.name}'"
        )
    saved_ids = ckpt.checkpoint_policy_ids(arrays, state)
    if sorted(saved_ids) != sorted(trainer.learner.policy_map):
        raise CheckpointError(
            f"{source}: the checkpoint holds policies {', '.join(saved_ids)}, this trainer has "
            f"{', '.join(trainer.learner.policy_map)}"
        )
    for key in ("observation_space", "action_space"):
        if space_from_json(metadata[key]) != getattr(trainer, key):
            raise CheckpointError(
                f"{source}: the checkpoint's {key} differs from the dataset's ({getattr(trainer, key)!r})"
            )
    obs_filter = trainer.observations.obs_filter
    filter_arrays = {}
    if obs_filter is not None:
        filter_arrays = ckpt.obs_filter_arrays(dict(arrays), saved_ids[0], False)
        if not filter_arrays:
            raise CheckpointError(
                f"{source}: the checkpoint holds no observation filter statistics, but "
                "model.observation_filter is mean_std (it was trained without the filter)"
            )
    same_backend = metadata.get("backend") == trainer.backend_name
    metas = state.get("policy_metas", {})
    learner = trainer.learner
    try:
        if same_backend:
            learner.set_state(
                {pid: PolicyState(ckpt.policy_arrays(arrays, pid), metas[pid]) for pid in learner.policy_map}
            )
        else:  # another backend: weights are portable, optimizer state is not
            learner.set_weights({pid: ckpt.policy_weights(arrays, pid) for pid in learner.policy_map})
    except ValueError as err:
        raise CheckpointError(f"{source}: the checkpoint does not fit this trainer's config: {err}") from err
    if same_backend:
        trainer.backend.set_rng_state(
            {k.removeprefix("rng/"): v for k, v in arrays.items() if k.startswith("rng/")}
        )
    if filter_arrays:
        obs_filter.set_state(filter_arrays, "the checkpoint")
    if hasattr(learner, "restore_fault_state"):  # learner actors: their restarts go on counting
        learner.restore_fault_state(int(state.get("fault_counters", {}).get("learner_restarts", 0)))
    counters = state["counters"]
    trainer.iteration = int(counters["training_iteration"])
    trainer.time_total_s = float(counters["time_total_s"])
    trainer.restore_epoch = int(counters.get("restore_epoch", 0)) + 1
    trainer.set_algorithm_state(state.get("algorithm_state", {}))
    trainer.set_algorithm_arrays(
        {k.removeprefix("algorithm/"): v for k, v in arrays.items() if k.startswith("algorithm/")}
    )
