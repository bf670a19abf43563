"""The league: learning players, frozen snapshots, matchmaking and game results (numpy only).

AlphaStar's league (Vinyals et al. 2019, "Grandmaster level in StarCraft II", Methods), as far as a
two-player game run in one process needs it:

* **Players.** Main agents, main exploiters and league exploiters, each a learning policy.
* **Snapshots.** Every ``snapshot_interval`` training iterations (or earlier, once a player has
  won ``snapshot_win_rate`` of at least ``snapshot_min_games`` games since its last one), a copy of
  the player's weights joins the league as a frozen opponent ``<player>@<iteration>``. A main
  exploiter then restarts from its initial weights; a league exploiter does with probability
  ``exploiter_reset_probability``.
* **Matchmaking, per game.** Main agents: ``self_play`` of their games against a current main
  agent, the rest against snapshots by prioritized fictitious self-play (PFSP). Main exploiters: a
  current main agent, or, while they win less than 10% against it, its snapshots by PFSP with
  variance weighting. League exploiters: every snapshot by PFSP. Before any snapshot exists, every
  player plays the current main agents.
* **PFSP.** An opponent ``c`` of player ``p`` is drawn with weight ``f(x)``, ``x`` being ``p``'s
  win rate against ``c`` (draws half, one prior draw): ``(1 - x)^2`` ("squared"), ``1 - x``
  ("linear") or ``x (1 - x)`` ("variance").

Simplifications, stated: AlphaStar's main agents also play "forgotten" snapshots and past main
exploiters in a separate 15% share; here those are among the snapshots PFSP draws from. Snapshot
weights stay in memory and in checkpoints (small nets: a board game's policy is kilobytes to a few
megabytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.config.league import LeagueConfig, kind_of
from rlgear.league.ratings import Elo, Payoff

#: Below this win rate against the current main agents, a main exploiter plays their snapshots.
EXPLOITER_FALLBACK_WIN_RATE = 0.1


def pfsp_weights(win_rates: np.ndarray, weighting: str) -> np.ndarray:
    """Normalized PFSP probabilities from the player's win rates against each candidate; uniform
    when every weight is 0 (a player that beats every candidate still plays them)."""
    x = np.asarray(win_rates, np.float64)
    if weighting == "squared":
        weights = (1.0 - x) ** 2
    elif weighting == "linear":
        weights = 1.0 - x
    elif weighting == "variance":
        weights = x * (1.0 - x)
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r} (squared, linear, variance)")
    total = weights.sum()
    return np.full(len(x), 1.0 / len(x)) if total <= 0 else weights / total


class League:
    """The league's whole state; :class:`~rlgear.league.env.LeagueEnv` plays its games.

    Args:
        config: the run's ``league`` section.
        seed: seeds matchmaking and resets (None: from entropy).
    """

    def __init__(self, config: LeagueConfig, seed: int | None = None):
        self.config = config
        self.players = config.player_ids()
        self.mains = [p for p in self.players if kind_of(p) == "main"]
        self.rng = np.random.default_rng(seed)
        self.payoff = Payoff()
        self.elo = Elo(config.elo_k, anchored=(config.baseline,))
        #: snapshot id -> {"player", "iteration"}; weights are in :attr:`snapshot_weights`.
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.snapshot_weights: dict[str, dict[str, np.ndarray]] = {}
        #: per player: its last snapshot's iteration, and its [wins, draws, losses] since then
        self.last_snapshot = {p: 0 for p in self.players}
        self.since_snapshot = {p: [0, 0, 0] for p in self.players}
        self.resets = {p: 0 for p in self.players}
        self._iteration_games = {p: [0, 0, 0] for p in self.players}
        #: per player, the PolicyState an exploiter restarts from (set by the trainer at setup)
        self.initial_states: dict[str, Any] = {}

    # --- matchmaking ------------------------------------------------------------------
    def snapshots_of(self, kinds: tuple[str, ...] | None = None, player: str | None = None) -> list[str]:
        return [
            sid
            for sid, meta in self.snapshots.items()
            if (kinds is None or kind_of(sid) in kinds) and (player is None or meta["player"] == player)
        ]

    def pfsp(self, player: str, candidates: list[str], weighting: str | None = None) -> str:
        rates = np.array([self.payoff.win_rate(player, c) for c in candidates])
        probs = pfsp_weights(rates, weighting or self.config.pfsp_weighting)
        return candidates[int(self.rng.choice(len(candidates), p=probs))]

    def choose_opponent(self, player: str) -> str:
        """The opponent of ``player``'s next game: a current main agent's id or a snapshot id."""
        kind = kind_of(player)
        current_main = self.mains[int(self.rng.integers(len(self.mains)))]
        everything = list(self.snapshots)
        if kind == "main":
            if not everything or self.rng.random() < self.config.self_play:
                return current_main
            return self.pfsp(player, everything)
        if kind == "main_exploiter":
            beaten = self.payoff.win_rate(player, current_main) >= EXPLOITER_FALLBACK_WIN_RATE
            history = self.snapshots_of(("main",), current_main)
            if (
                beaten
                or not history
                or self.payoff.games(player, current_main) < self.config.snapshot_min_games
            ):
                return current_main
            return self.pfsp(player, history, "variance")
        if not everything:  # a league exploiter before the first snapshot
            return current_main
        return self.pfsp(player, everything)

    # --- results ----------------------------------------------------------------------
    def record(self, player: str, opponent: str, outcome: int) -> None:
        """One finished game of learning player ``player`` (``outcome`` +1 won, 0 draw, -1 lost)."""
        self.payoff.record(player, opponent, outcome)
        self.elo.record(player, opponent, outcome)
        if player in self.since_snapshot:
            index = {1: 0, 0: 1, -1: 2}[outcome]
            self.since_snapshot[player][index] += 1
            self._iteration_games[player][index] += 1

    def evaluation_results(self, outcomes: list[tuple[str, str, int]]) -> dict[str, float]:
        """``league/<player>/win_rate_vs_<baseline>`` (draws half) of evaluation games against the
        fixed baseline; they move the players' Elo (the baseline's is anchored) but not the payoff
        that matchmaking and snapshots read."""
        points: dict[str, list[float]] = {}
        for player, opponent, outcome in outcomes:
            self.elo.record(player, opponent, outcome)
            points.setdefault(player, []).append((outcome + 1) / 2.0)
        out = {f"league/{p}/win_rate_vs_{self.config.baseline}": float(np.mean(v)) for p, v in points.items()}
        out.update({f"league/{p}/elo": self.elo.rating(p) for p in points})
        return out

    # --- snapshots ----------------------------------------------------------------------
    def due(self, player: str, iteration: int) -> bool:
        """Whether ``player`` is snapshotted after training iteration ``iteration``."""
        if iteration - self.last_snapshot[player] >= self.config.snapshot_interval:
            return True
        wins, draws, losses = self.since_snapshot[player]
        games = wins + draws + losses
        return (
            games >= self.config.snapshot_min_games
            and (wins + 0.5 * draws) / games >= self.config.snapshot_win_rate
        )

    def add_snapshot(self, player: str, weights: dict[str, np.ndarray], iteration: int) -> str:
        sid = f"{player}@{iteration}"
        self.snapshots[sid] = {"player": player, "iteration": iteration}
        self.snapshot_weights[sid] = {k: np.array(v, copy=True) for k, v in weights.items()}
        self.elo.ratings[sid] = self.elo.rating(player)
        self.last_snapshot[player] = iteration
        self.since_snapshot[player] = [0, 0, 0]
        return sid

    def after_iteration(
        self,
        iteration: int,
        weights_of: Callable[[str], dict[str, np.ndarray]],
        reset: Callable[[str], None],
    ) -> dict[str, float]:
        """Snapshot the players that are due (resetting exploiters as their kind says); the
        ``league/...`` results of this iteration."""
        for player in self.players:
            if not self.due(player, iteration):
                continue
            self.add_snapshot(player, weights_of(player), iteration)
            kind = kind_of(player)
            if kind == "main_exploiter" or (
                kind == "league_exploiter" and self.rng.random() < self.config.exploiter_reset_probability
            ):
                reset(player)
                self.resets[player] += 1
        out: dict[str, float] = {"league/num_snapshots": float(len(self.snapshots))}
        for player in self.players:
            wins, draws, losses = self._iteration_games[player]
            games = wins + draws + losses
            out[f"league/{player}/elo"] = self.elo.rating(player)
            out[f"league/{player}/games_this_iter"] = float(games)
            if games:
                out[f"league/{player}/win_rate"] = (wins + 0.5 * draws) / games
            out[f"league/{player}/resets"] = float(self.resets[player])
            self._iteration_games[player] = [0, 0, 0]
        return out

    # --- checkpoints ----------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON state and arrays (``<snapshot id>/<weight name>``) for a checkpoint."""
        state = {
            "payoff": self.payoff.get_state(),
            "elo": dict(self.elo.ratings),
            "snapshots": {sid: dict(meta) for sid, meta in self.snapshots.items()},
            "last_snapshot": dict(self.last_snapshot),
            "since_snapshot": {p: list(v) for p, v in self.since_snapshot.items()},
            "resets": dict(self.resets),
            "rng": self.rng.bit_generator.state,
        }
        arrays = {
            f"{sid}/{name}": value
            for sid, weights in self.snapshot_weights.items()
            for name, value in weights.items()
        }
        return state, arrays

    def set_state(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.payoff.set_state(state["payoff"])
        self.elo.ratings = {k: float(v) for k, v in state["elo"].items()}
        self.snapshots = {sid: dict(meta) for sid, meta in state["snapshots"].items()}
        self.snapshot_weights = {sid: {} for sid in self.snapshots}
        for key, value in arrays.items():
            sid, name = key.split("/", 1)
            self.snapshot_weights[sid][name] = value
        self.last_snapshot.update({p: int(v) for p, v in state["last_snapshot"].items()})
        self.since_snapshot.update({p: [int(x) for x in v] for p, v in state["since_snapshot"].items()})
        self.resets.update({p: int(v) for p, v in state["resets"].items()})
        self.rng.bit_generator.state = state["rng"]
