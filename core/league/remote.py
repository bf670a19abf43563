"""League play on remote rollout workers (``workers.num_workers > 0``): one league, many players' games.

The driver's league (the local worker's, :attr:`rlgear.trainer.Trainer.league`) is the only one that
snapshots, resets exploiters and reports. Each remote worker plays its share of the games with a
mirror of it: the mirror picks opponents (PFSP on the payoff it was last sent) and acts with the
snapshots it holds. Two flows keep them one league:

* **games, worker -> driver**: a remote worker's :meth:`~rlgear.sampling.rollout_worker.RolloutWorker.pop_metrics`
  carries its finished games and the snapshot ids it holds (:func:`report`); the driver records
  the games in its league (:func:`absorb`), once each: a worker hands a game out once.
* **league, driver -> workers**: after each training iteration (and after a restore) the driver
  (:func:`rlgear.run.league_play.sync`) sends each remote worker the league's state and the
  weights of the snapshots that worker does not hold yet (:func:`payloads`, :func:`receive`).
  Snapshot weights are sent once per worker, not every iteration; a replaced worker reports an
  empty set and gets them all again.

The mirror keeps its own random stream (seeded per worker), so workers draw different games.
Data only: what carries it (the worker set, Ray) is the caller's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The key of a remote league worker's report in ``pop_metrics``.
LEAGUE_REPORT = "league_report"


def report(worker: Any) -> dict[str, Any]:
    """A remote worker's games since the last call and the snapshots its league mirror holds."""
    return {
        "outcomes": [list(game) for game in worker.env.pop_outcomes()],
        "snapshots": sorted(worker.league.snapshot_weights),
    }


def absorb(league: Any, got: dict[str, Any]) -> set[str]:
    """Record a worker's games in the driver's ``league``; the snapshot ids that worker holds."""
    for player, opponent, outcome in got["outcomes"]:
        league.record(str(player), str(opponent), int(outcome))
    return set(got["snapshots"])


def payloads(
    league: Any, known: dict[int, set[str]], worker_ids: list[int]
) -> dict[int, tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Per remote worker: the league's state (rng excluded) and the snapshot weights it lacks."""
    state, arrays = league.get_state()
    state.pop("rng")
    out = {}
    for worker_id in worker_ids:
        held = known.get(worker_id, set())
        out[worker_id] = (state, {k: v for k, v in arrays.items() if k.split("/", 1)[0] not in held})
    return out


def receive(worker: Any, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """In a remote worker: its mirror takes the driver's league state and the new snapshot weights."""
    league = worker.league
    league.payoff.set_state(state["payoff"])
    league.elo.ratings = {k: float(v) for k, v in state["elo"].items()}
    for key, value in arrays.items():
        sid, name = key.split("/", 1)
        league.snapshot_weights.setdefault(sid, {})[name] = np.array(value, copy=True)
    for sid in [s for s in league.snapshot_weights if s not in state["snapshots"]]:
        del league.snapshot_weights[sid]
    # only the snapshots whose weights it holds are opponents (the rest come with the next sync)
    league.snapshots = {
        sid: dict(meta) for sid, meta in state["snapshots"].items() if sid in league.snapshot_weights
    }
    league.last_snapshot.update({p: int(v) for p, v in state["last_snapshot"].items()})
    league.since_snapshot.update({p: [int(x) for x in v] for p, v in state["since_snapshot"].items()})
    league.resets.update({p: int(v) for p, v in state["resets"].items()})
