"""What a trainer does for a ``league`` section (``rlgear.league``): keep what exploiters restart
from, and snapshot and reset the players after each training iteration."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlgear.league import remote


def attach(trainer: Any) -> Any:
    """The league the driver's rollout worker plays (None without a ``league`` section), holding
    copies of the players' starting states: training changes the live arrays in place."""
    league = getattr(trainer.workers.local_worker, "league", None) if trainer.config.league else None
    if league is not None:
        league.initial_states = {
            pid: dataclasses.replace(
                state, arrays={k: np.array(v, copy=True) for k, v in state.arrays.items()}
            )
            for pid, state in trainer.learner.get_state().items()
        }
    return league


def sync(trainer: Any) -> None:
    """The driver's league to the remote workers' mirrors (:mod:`rlgear.league.remote`): its state
    and the snapshots each lacks; after a restore, and after each iteration's snapshots."""
    workers = trainer.workers
    ids = list(workers.remote_worker_ids)
    if trainer.league is not None and ids:
        workers.apply_each(remote.receive, remote.payloads(trainer.league, workers.league_known, ids))


def after_iteration(trainer: Any) -> dict[str, float]:
    """Snapshots of the players that are due, resets of exploiters; the ``league/...`` results."""
    league = trainer.league
    results = league.after_iteration(
        trainer.iteration,
        lambda pid: trainer.learner.get_weights([pid])[pid],
        lambda pid: trainer.learner.set_state({pid: league.initial_states[pid]}),
    )
    sync(trainer)
    return results
