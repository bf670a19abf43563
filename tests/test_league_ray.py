"""League self-play on remote rollout workers (``rlgear.league.remote``): the workers play, the driver's
league records every game once and sends its snapshots to each worker's mirror.

That the league learns is ``tests/test_learning_league.py``'s claim (in process); here the remote
path is held to delivering the same games, snapshots and payoff records. A learning run of that
league on two remote workers (seed 0, 30 iterations) scored 0.84 against random play in the league's
evaluation and 0.86 in 200 games on PettingZoo's env (29 Nov 2026). It was a slow test; it went to
save CI time (50 s), since the remote workers' samples reach the learners as in every remote run
(``tests/test_ray_learning.py``) and the league's own learning is held in process.
"""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from tests.test_league import _raw

pytestmark = pytest.mark.skipif(
    find_spec("pettingzoo") is None, reason="needs the pettingzoo extra: pip install 'rlgear[pettingzoo]'"
)

PLAYERS = ("main_0", "main_exploiter_0", "league_exploiter_0")


def _config():
    return config_mod.resolve(
        _raw(workers={"num_workers": 2, "num_envs_per_worker": 2, "ray": {"worker_start_timeout_s": 600}})
    )


def _mirrors(trainer):
    """Per remote worker: its league mirror's snapshot weights and payoff state."""
    return trainer.workers.foreach_worker(
        lambda w: ({k: dict(v) for k, v in w.league.snapshot_weights.items()}, w.league.payoff.get_state())
    )[1:]


def test_remote_workers_play_the_league_and_the_driver_records_each_game_once(tmp_path, ray_session):
    trainer = registry.load_algorithm("ppo")(_config(), logdir=tmp_path / "run")
    try:
        for iteration in (1, 2):
            result = trainer.train()
            games = sum(result[f"league/{p}/games_this_iter"] for p in PLAYERS)
            # each episode is one player's game, played on a remote worker: recorded exactly once
            assert games == result["episodes_this_iter"] > 0
            assert result["league/num_snapshots"] == 3.0 * iteration  # snapshot_interval 1
        mirrors = _mirrors(trainer)
        assert len(mirrors) == 2
        for weights, payoff in mirrors:
            assert sorted(weights) == sorted(trainer.league.snapshots)  # every snapshot reached it
            for sid, arrays in weights.items():
                for name, value in arrays.items():
                    np.testing.assert_array_equal(value, trainer.league.snapshot_weights[sid][name])
            assert payoff == trainer.league.payoff.get_state()  # the driver's results, not its own
        # each worker reported the snapshots of iteration 1 as held: iteration 2 sent only its own
        assert all(trainer.workers.league_known[w] >= {f"{p}@1" for p in PLAYERS} for w in (1, 2))
        path = trainer.save(tmp_path / "checkpoint")
        saved = sorted(trainer.league.snapshots)
    finally:
        trainer.stop()
    resumed = registry.load_algorithm("ppo")(_config(), logdir=tmp_path / "resumed")
    try:
        resumed.restore(path)  # the fresh workers' mirrors get the restored league before any game
        for weights, _ in _mirrors(resumed):
            assert sorted(weights) == saved
        third = resumed.train()
        assert third["league/num_snapshots"] == 9.0
        assert sum(third[f"league/{p}/games_this_iter"] for p in PLAYERS) == third["episodes_this_iter"] > 0
    finally:
        resumed.stop()
