"""The ``league`` section: league self-play for two-player games (docs/multi-agent.md, "League").

A run with the section trains a league (Vinyals et al. 2019, AlphaStar): learning players of three
kinds, each a policy of its own, play a two-player env against opponents the league picks per game:
frozen snapshots of earlier players, the current main agents, or a fixed baseline. The section names
the players; the run's policies are derived from it (``main_0``, ``main_exploiter_0``,
``league_exploiter_0`` ...), so a config with a league has no ``multiagent`` section.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlgear.config.schema import doc
from rlgear.errors import ConfigError

#: The player kinds, in the order their policies are listed.
PLAYER_KINDS = ("main", "main_exploiter", "league_exploiter")


@dataclass
class LeagueConfig:
    """League self-play for two-player games: players, snapshots, matchmaking, ratings."""

    main_agents: int = doc(
        "Main agents: they play the current main agents (self-play) and every snapshot of the league "
        "(prioritized fictitious self-play), and are never reset. At least 1.",
        1,
    )
    main_exploiters: int = doc(
        "Main exploiters: they play the current main agents (their snapshots, by PFSP with variance "
        "weighting, while they win under 10% of games against the current ones) and restart from "
        "their initial weights after each snapshot.",
        1,
    )
    league_exploiters: int = doc(
        "League exploiters: they play every snapshot by PFSP and restart from their initial weights "
        "after a snapshot with probability exploiter_reset_probability.",
        1,
    )
    snapshot_interval: int = doc(
        "Training iterations after which a learning player's weights join the league as a frozen "
        "snapshot (AlphaStar's time budget per snapshot).",
        10,
    )
    snapshot_win_rate: float = doc(
        "A player is snapshotted earlier when it has won at least this share of its games since its "
        "last snapshot (draws count half), over at least snapshot_min_games games (AlphaStar: 0.7).",
        0.7,
    )
    snapshot_min_games: int = doc("Games a player plays before snapshot_win_rate is looked at.", 100)
    self_play: float = doc(
        "Share of a main agent's games against the current main agents (AlphaStar: 0.35); the others "
        "are against snapshots, chosen by PFSP.",
        0.35,
    )
    pfsp_weighting: Literal["squared", "linear", "variance"] = doc(
        "Prioritized fictitious self-play: how an opponent's weight follows the player's win rate x "
        "against it: (1 - x)^2 (hardest first, AlphaStar's default), 1 - x, or x (1 - x) (opponents of "
        "the player's level).",
        "squared",
    )
    exploiter_reset_probability: float = doc(
        "Probability that a league exploiter restarts from its initial weights after a snapshot.", 0.25
    )
    baseline: Literal["random"] = doc(
        "The fixed opponent of evaluation games (training.evaluation_interval): every learning "
        "player's greedy policy against it gives league/<player>/win_rate_vs_<baseline>.",
        "random",
    )
    opponent_explore: bool = doc("Opponents sample from their policies (true) or act greedily (false).", True)
    elo_k: float = doc("Elo's K factor: the most a rating moves after one game.", 16.0)
    max_cached_opponents: int = doc(
        "Snapshot policies kept built in a rollout worker at once (the least recently used beyond this "
        "are rebuilt from their weights when picked again).",
        16,
    )

    def player_ids(self) -> list[str]:
        """The learning players (= policy ids), kind by kind: ``main_0, ..., main_exploiter_0, ...``."""
        counts = (self.main_agents, self.main_exploiters, self.league_exploiters)
        return [f"{kind}_{i}" for kind, count in zip(PLAYER_KINDS, counts, strict=True) for i in range(count)]


def kind_of(player_id: str) -> str:
    """``main``, ``main_exploiter`` or ``league_exploiter`` of a player (or snapshot) id."""
    base = player_id.split("@", 1)[0]
    return base.rsplit("_", 1)[0]


def check_league_support(config: Any, algorithm_class: type) -> None:
    """A league only with an algorithm whose capabilities say it plays in one (``rlgear plugins``)."""
    if config.league is not None and not algorithm_class.capabilities().get("league", False):
        name = getattr(algorithm_class, "name", algorithm_class.__name__)
        raise config.fail(
            "league",
            f"algorithm '{name}' does not play in a league (each learning player must be a policy of its "
            "own that acts for one agent; the 'league' column of rlgear plugins lists those that do, e.g. ppo)",
        )


def check_league(config: Any, fail: Callable[[str, str], ConfigError]) -> None:
    """Ranges, and what a league run can't combine with (named by key), when the config is read."""
    league = config.league
    if league is None:
        return
    if league.main_agents < 1:
        raise fail("league.main_agents", f"expected at least 1 main agent, got {league.main_agents}")
    for key in ("main_exploiters", "league_exploiters"):
        if getattr(league, key) < 0:
            raise fail(f"league.{key}", f"expected a non-negative count, got {getattr(league, key)}")
    for key in ("snapshot_interval", "snapshot_min_games", "max_cached_opponents"):
        if getattr(league, key) < 1:
            raise fail(f"league.{key}", f"expected a positive integer, got {getattr(league, key)}")
    for key in ("snapshot_win_rate", "self_play", "exploiter_reset_probability"):
        value = getattr(league, key)
        if not 0.0 <= value <= 1.0:
            raise fail(f"league.{key}", f"expected a probability in [0, 1], got {value}")
    if league.elo_k <= 0:
        raise fail("league.elo_k", f"expected a positive number, got {league.elo_k}")
    if config.multiagent is not None:
        raise fail(
            "multiagent",
            "a league names its own policies (one per learning player: "
            f"{', '.join(league.player_ids())}); remove the multiagent section",
        )
    if config.learners.num_learners > 0:
        raise fail(
            "learners.num_learners",
            "league self-play needs the learner in the driver (its opponents act with the learning "
            f"policies); expected 0, got {config.learners.num_learners}",
        )
    if config.model.observation_filter != "none":
        raise fail(
            "model.observation_filter",
            "a league's snapshots act without the learning players' filter statistics; board games "
            f"need none: expected none, got {config.model.observation_filter!r}",
        )
    if config.offline.output is not None:
        raise fail("offline.output", "recording a league's games is not supported")
