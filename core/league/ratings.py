"""Game results of a league: the payoff table (wins, draws, losses per pair) and Elo ratings.

Why hand-written: Elo is four lines of arithmetic, and the payoff table is what matchmaking reads;
a rating library (openskill, trueskill) would add a dependency to core for neither.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

#: Every entity starts here; a snapshot starts at its player's rating when it is taken.
INITIAL_ELO = 1000.0


class Payoff:
    """Wins, draws and losses of ``a`` against ``b`` (and the mirror), per ordered pair of ids."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])

    def record(self, a: str, b: str, outcome: int) -> None:
        """``outcome``: +1 ``a`` won, 0 a draw, -1 ``a`` lost."""
        index = {1: 0, 0: 1, -1: 2}[outcome]
        self.results[(a, b)][index] += 1
        self.results[(b, a)][2 - index] += 1

    def games(self, a: str, b: str) -> int:
        return sum(self.results.get((a, b), (0, 0, 0)))

    def win_rate(self, a: str, b: str) -> float:
        """``a``'s share of points against ``b`` (draws count half), with one prior draw: 0.5 before
        any game, so an untried opponent is neither ignored nor certain."""
        wins, draws, losses = self.results.get((a, b), (0, 0, 0))
        return (wins + 0.5 * draws + 0.5) / (wins + draws + losses + 1)

    def get_state(self) -> list[list[Any]]:
        return [[a, b, *counts] for (a, b), counts in self.results.items()]

    def set_state(self, rows: list[list[Any]]) -> None:
        self.results.clear()
        for a, b, wins, draws, losses in rows:
            self.results[(a, b)] = [int(wins), int(draws), int(losses)]


class Elo:
    """Elo ratings; ``anchored`` ids (the fixed baselines) keep theirs, so ratings have a reference."""

    def __init__(self, k: float, anchored: tuple[str, ...] = ()):
        self.k = k
        self.anchored = set(anchored)
        self.ratings: dict[str, float] = {}

    def rating(self, entity: str) -> float:
        return self.ratings.get(entity, INITIAL_ELO)

    def record(self, a: str, b: str, outcome: int) -> None:
        expected = 1.0 / (1.0 + 10.0 ** ((self.rating(b) - self.rating(a)) / 400.0))
        change = self.k * ((outcome + 1) / 2.0 - expected)
        if a not in self.anchored:
            self.ratings[a] = self.rating(a) + change
        if b not in self.anchored:
            self.ratings[b] = self.rating(b) - change
