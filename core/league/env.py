"""A two-player env as the league's learning players' env: each player plays its own games, against
opponents the league picks per game, who act inside the env (numpy; policies through the contract).

Why inside the env: the sampler maps agents to policies once, for the whole run, and keeps a
policy's recurrent state and rows per agent slot. League play changes who sits across the board
every game. Seen from one learning player, the opponent is part of the env's dynamics (as in
AlphaStar's actors), so :class:`LeagueEnv` presents a :class:`~rlgear.env.MultiAgentVectorEnv` whose
agents are the learning players (policy id = agent id) and plays the other seat itself. The
sampler, the losses and the metrics then need nothing new.

Layout: with ``P`` learning players and ``n`` slots each, the env has ``P * n`` slots, the inner
env's own; slot ``p * n + i`` is player ``p``'s ``i``-th game, and the other players are inactive
there (so a slot's ``episode_end`` is one game's end, as the sampler expects). At every game start (the reset, or the step after
a slot's episode end) the slot gets a seat for the player (0 or 1, at random: both sides of the
board are learned) and an opponent (:meth:`League.choose_opponent`, or the fixed baseline in
evaluation). Turn-based games work through the inner env's ``active`` masks: on the opponent's
turn the player is inactive in that slot, and the opponent's action is computed here. A finished
game's outcome is the sign of the player's summed reward; it goes to :meth:`League.record`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.errors import ConfigError
from rlgear.league.league import League
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.spaces import Box, Discrete, Space
from rlgear.timestep import StepType, TimeStep

__all__ = ["LeagueEnv", "RandomOpponent"]

_LAST = int(StepType.LAST)


def _select(seat: np.ndarray, first: Any, second: Any, rows: np.ndarray) -> Any:
    """Per row, the value of seat 0 (``first``) or seat 1 (``second``), then ``rows`` of it (nests too)."""
    if isinstance(first, dict):
        return {k: _select(seat, first[k], second[k], rows) for k in first}
    if isinstance(first, tuple | list):
        return type(first)(_select(seat, a, b, rows) for a, b in zip(first, second, strict=True))
    a, b = np.asarray(first), np.asarray(second)
    cond = (seat == 0).reshape((-1,) + (1,) * (a.ndim - 1))
    return np.where(cond, a, b)[rows]


def _only(ts: TimeStep, keep: np.ndarray) -> TimeStep:
    """``ts`` with the rows outside ``keep`` blanked as inactive rows are (zeros, LAST, discount 0)."""

    def blank(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: blank(v) for k, v in value.items()}
        if isinstance(value, tuple | list):
            return type(value)(blank(v) for v in value)
        value = np.asarray(value)
        return np.where(keep.reshape((-1,) + (1,) * (value.ndim - 1)), value, np.zeros_like(value))

    return TimeStep(
        step_type=np.where(keep, ts.step_type, _LAST).astype(ts.step_type.dtype),
        reward=blank(ts.reward),
        discount=blank(ts.discount),
        observation=blank(ts.observation),
        prev_action=blank(ts.prev_action),
        env_id=ts.env_id,
    )


def _seat_step(seat: np.ndarray, steps: list[TimeStep], rows: np.ndarray, env_ids: np.ndarray) -> TimeStep:
    """The TimeStep of the given seat per row (``rows`` of the inner slots), renumbered ``env_ids``."""
    a, b = steps
    return TimeStep(
        step_type=_select(seat, a.step_type, b.step_type, rows),
        reward=_select(seat, a.reward, b.reward, rows),
        discount=_select(seat, a.discount, b.discount, rows),
        observation=_select(seat, a.observation, b.observation, rows),
        prev_action=_select(seat, a.prev_action, b.prev_action, rows),
        env_id=env_ids.astype(np.int32),
    )


class RandomOpponent:
    """The fixed baseline: a uniformly random legal action (the action mask's, where there is one)."""

    def __init__(self, observation_space: Space, action_space: Space, env_name: str, seed: int | None):
        if not isinstance(action_space, Discrete | Box):
            raise ConfigError(
                f"league.baseline: the random player acts in Discrete or Box action spaces, got {action_space!r}"
            )
        self.action_space = action_space
        self.preprocessor = ObservationPreprocessor(observation_space, action_space, env_name)
        self.rng = np.random.default_rng(seed)

    def observe(self, ts: TimeStep) -> TimeStep:
        mask = self.preprocessor.action_mask(ts.observation)
        ts.action_mask = None if mask is None else np.asarray(mask, dtype=bool)
        return ts

    def act(
        self, ts: TimeStep, explore: bool = True, slots: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict]:
        rows = len(ts.step_type)
        space = self.action_space
        if isinstance(space, Box):
            return self.rng.uniform(space.low, space.high, (rows, *space.shape)).astype(np.float32), {}
        mask = ts.action_mask if ts.action_mask is not None else np.ones((rows, space.n), dtype=bool)
        scores = np.where(mask, self.rng.random(mask.shape), -1.0)
        return scores.argmax(axis=1).astype(np.int64), {}

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        return actions


class LeagueEnv(MultiAgentVectorEnv):
    """A two-player :class:`MultiAgentVectorEnv` as the league's learning players' env (module docstring).

    Args:
        inner: the two-player env, with ``len(league.players) * n`` slots (``n`` games per player).
        league: the league whose matchmaking picks opponents and which records the outcomes.
        make_opponent: ``(opponent id) -> acting collector`` (``observe(ts)``, ``act(ts, explore, slots)``
            over the inner env's slots): built by the rollout worker, which knows the policy class.
        baseline: evaluation: every game is against this fixed opponent instead of the league's pick.
        seed: seeds the seat draws.
        report_outcomes: keep finished games for :meth:`pop_outcomes` (a remote worker's, which the
            driver's league records: :mod:`rlgear.league.remote`).
    """

    def __init__(
        self,
        inner: MultiAgentVectorEnv,
        league: League,
        make_opponent: Callable[[str], Any],
        max_cached: int = 16,
        baseline: str | None = None,
        explore_opponents: bool = True,
        seed: int | None = None,
        report_outcomes: bool = False,
    ):
        seats = tuple(inner.possible_agents)
        if len(seats) != 2:
            raise ConfigError(
                f"league: a league plays two-player games; the env has {len(seats)} agents ({', '.join(seats)})"
            )
        for kind, spaces in (("observation", inner.observation_spaces), ("action", inner.action_spaces)):
            if repr(spaces[seats[0]]) != repr(spaces[seats[1]]):
                raise ConfigError(
                    f"league: both players of a league game must have the same {kind} space (each learning "
                    f"player takes either seat); {seats[0]}: {spaces[seats[0]]!r}, {seats[1]}: {spaces[seats[1]]!r}"
                )
        players = list(league.players)
        if inner.num_envs % len(players):
            raise ValueError(
                f"the inner env's {inner.num_envs} slots do not split among {len(players)} players"
            )
        self.inner, self.league, self.seats = inner, league, seats
        self.make_opponent = make_opponent
        self.max_cached = max_cached
        self.baseline = baseline
        self.explore_opponents = explore_opponents
        self.num_envs = inner.num_envs
        self.possible_agents = tuple(players)
        self.observation_spaces = {p: inner.observation_spaces[seats[0]] for p in players}
        self.action_spaces = {p: inner.action_spaces[seats[0]] for p in players}
        self.state_space = None
        self.idle_slots = True  # a player waits out the opponent's turns, its first move included
        total = inner.num_envs
        self._player_index = np.repeat(np.arange(len(players)), total // len(players))
        self._seat = np.zeros(total, dtype=np.int64)  # the learning player's seat per inner slot
        self._opponent = [""] * total
        self._return = np.zeros(total, np.float64)
        self._rng = np.random.default_rng(seed)
        self._opponents: OrderedDict[str, Any] = OrderedDict()
        self._last: MultiAgentTimeStep | None = None
        #: Whether finished games are kept for :meth:`pop_outcomes` besides being recorded: in
        #: evaluation (against the baseline) and on a remote worker (the driver records them).
        self.report_outcomes = report_outcomes or baseline is not None
        #: Finished games not yet handed out by :meth:`pop_outcomes`: ``(player, opponent, outcome)``.
        self.outcomes: list[tuple[str, str, int]] = []

    # --- game assignment ----------------------------------------------------------------
    def _new_games(self, slots: np.ndarray) -> None:
        for slot in slots:
            player = self.possible_agents[self._player_index[slot]]
            self._seat[slot] = int(self._rng.integers(2))
            self._opponent[slot] = self.baseline or self.league.choose_opponent(player)
            self._return[slot] = 0.0

    def _opponent_collector(self, opponent: str) -> Any:
        if opponent in self._opponents:
            self._opponents.move_to_end(opponent)
            return self._opponents[opponent]
        collector = self.make_opponent(opponent)
        self._opponents[opponent] = collector
        in_use = set(self._opponent)
        while len(self._opponents) > self.max_cached:
            stale = next((o for o in self._opponents if o not in in_use), None)
            if stale is None:
                break
            del self._opponents[stale]
        return collector

    # --- the players' view ----------------------------------------------------------------
    def _outer(self, mts: MultiAgentTimeStep) -> MultiAgentTimeStep:
        steps = [mts.steps[s] for s in self.seats]
        seat = self._seat
        active = np.where(
            seat == 0,
            np.asarray(mts.active[self.seats[0]], bool),
            np.asarray(mts.active[self.seats[1]], bool),
        )
        self._return += np.where(active, np.where(seat == 0, steps[0].reward, steps[1].reward), 0.0)
        slots = np.arange(self.num_envs)
        players_step = _seat_step(seat, steps, slots, slots)  # the learning player's seat in every slot
        out_steps, out_active = {}, {}
        for index, player in enumerate(self.possible_agents):
            own = self._player_index == index
            out_steps[player] = _only(players_step, own)
            out_active[player] = active & own
        ended = np.asarray(mts.episode_end, dtype=bool)
        finished = np.flatnonzero(ended)
        for slot in finished:
            player = self.possible_agents[self._player_index[slot]]
            outcome = int(np.sign(self._return[slot]))
            if self.report_outcomes:  # else nobody pops them: the league records them below
                self.outcomes.append((player, self._opponent[slot], outcome))
            if not self.baseline:
                self.league.record(player, self._opponent[slot], outcome)
        self._new_games(finished)  # the slot's next step starts the next game
        self._last = mts
        return MultiAgentTimeStep(out_steps, out_active, ended.copy())

    def _opponent_actions(self, actions: dict[str, np.ndarray]) -> None:
        """Fill the opponents' seats of ``actions`` (inner, per seat) where they are to move."""
        mts = self._last
        steps = [mts.steps[s] for s in self.seats]
        opponent_seat = 1 - self._seat
        active_by_seat = [np.asarray(mts.active[s], dtype=bool) for s in self.seats]
        acting = np.where(opponent_seat == 0, active_by_seat[0], active_by_seat[1])
        slots = np.flatnonzero(acting)
        for opponent in sorted({self._opponent[s] for s in slots}):
            rows = slots[[self._opponent[s] == opponent for s in slots]]
            collector = self._opponent_collector(opponent)
            ts = collector.observe(_seat_step(opponent_seat, steps, rows, rows))
            chosen, _ = collector.act(ts, explore=self.explore_opponents, slots=rows)
            chosen = collector.env_actions(np.asarray(chosen))
            for seat_index, seat in enumerate(self.seats):
                mine = opponent_seat[rows] == seat_index
                actions[seat][rows[mine]] = np.asarray(chosen)[mine]

    # --- MultiAgentVectorEnv --------------------------------------------------------------
    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._new_games(np.arange(self.inner.num_envs))  # games cut by a reset are not outcomes
        return self._outer(self.inner.reset(seed))

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        space = self.action_spaces[self.possible_agents[0]]
        dtype = np.int64 if isinstance(space, Discrete) else np.float32
        inner = {s: np.zeros((self.num_envs, *(space.shape or ())), dtype) for s in self.seats}
        for index, player in enumerate(self.possible_agents):
            if player not in actions:
                continue
            chosen = np.asarray(actions[player])
            own = self._player_index == index
            for seat_index, seat in enumerate(self.seats):
                rows = own & (self._seat == seat_index)
                inner[seat][rows] = chosen[rows]
        self._opponent_actions(inner)
        return self._outer(self.inner.step(inner))

    def pop_outcomes(self) -> list[tuple[str, str, int]]:
        out, self.outcomes = self.outcomes, []
        return out

    def close(self) -> None:
        self.inner.close()

    def get_state(self) -> dict[str, np.ndarray]:
        return self.inner.get_state()

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.inner.set_state(arrays)

    def freeze_statistics(self) -> None:
        self.inner.freeze_statistics()
