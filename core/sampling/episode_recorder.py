"""Whole episodes as the env gave them, for ``offline.output`` (a Minari dataset).

The sampler is the one place every transition of a run passes through with the env's *raw*
observations (the train batches hold preprocessed, filtered ones and no LAST rows): the in-process
rollout worker, remote workers and the external clients of ``rlgear serve`` all step one. So the
recorder sits there, assembles each env slot's episode (FIRST..LAST) and hands finished ones to the
driver with the episode metrics (:meth:`RolloutWorker.pop_metrics`), where
:mod:`rlgear.offline.recorder` writes them: one writer, whatever kind of run.

Cost, on the sampling critical path: each step's arrays are written into preallocated time-major
tables (``[capacity, num_envs, ...]``, no allocation per step), and a finished episode is one slice
of them; the log-probabilities a policy defers (:meth:`rlgear.policy.Policy.finish_fragment`) are
completed once for all the episodes handed over together (:meth:`EpisodeRecorder.pop`). Single-agent envs only: multi-agent recording is refused where the
recorder is started.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.timestep import StepType, TimeStep

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
#: Row columns the recorder never needs (what it needs: the policy's action and its extras).
_SKIP = frozenset(
    {
        SampleBatch.OBS,
        SampleBatch.REWARDS,
        SampleBatch.DISCOUNTS,
        SampleBatch.STEP_TYPES,
        SampleBatch.PREV_ACTIONS,
        SampleBatch.EPS_ID,
        SampleBatch.T,
        SampleBatch.VF_PREDS,
    }
)


def _leaves(nest: Any) -> list[np.ndarray]:
    if isinstance(nest, dict):
        return [leaf for key in nest for leaf in _leaves(nest[key])]
    if isinstance(nest, tuple):
        return [leaf for value in nest for leaf in _leaves(value)]
    return [np.asarray(nest)]


def _rebuild(template: Any, leaves: list[np.ndarray]) -> Any:
    """``template``'s structure with ``leaves`` (consumed in :func:`_leaves` order) at its leaves."""
    if isinstance(template, dict):
        return {key: _rebuild(value, leaves) for key, value in template.items()}
    if isinstance(template, tuple):
        return tuple(_rebuild(value, leaves) for value in template)
    return leaves.pop(0)


class _Table:
    """Named time-major columns ``[capacity, num_envs, ...]``; row ``r`` is absolute step ``base + r``."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.columns: dict[str, np.ndarray] = {}

    def put(self, name: str, row: int, values: np.ndarray) -> None:
        column = self.columns.get(name)
        if column is None:
            column = self.columns[name] = np.zeros((self.capacity, *values.shape), values.dtype)
        column[row] = values

    def keep(self, start: int, stop: int, capacity: int) -> None:
        """Rows ``start:stop`` become rows ``0:stop-start`` of tables of ``capacity`` rows."""
        for name, column in self.columns.items():
            if capacity != self.capacity:
                new = np.zeros((capacity, *column.shape[1:]), column.dtype)
                new[: stop - start] = column[start:stop]
                self.columns[name] = new
            else:
                column[: stop - start] = column[start:stop]
        self.capacity = capacity


class EpisodeRecorder:
    """Assembles the episodes of a single-agent vector env from the sampler's steps.

    Per step the sampler calls :meth:`observe` with the raw TimeStep (before preprocessing) and,
    when it steps the env, :meth:`act` with what the env was given and the recorded row. An
    episode (:meth:`pop`, :func:`unpack_episodes`) holds ``observations`` ``[T+1]`` (a dict/tuple of arrays for
    Dict/Tuple spaces), ``actions`` ``[T]`` (the env's actions: clipped, structured),
    ``rewards`` float32 ``[T]``, ``terminations`` / ``truncations`` bool ``[T]`` (only the last can
    be true) and, when the policy reports one, ``action_logp`` float32 ``[T]`` (the behaviour
    policy's log-probability of its sampled action, before any clipping).

    Args:
        num_envs: env slots.
        finish: functions that complete a dict of ``[T]`` row columns in place, in order (the
            policy's ``finish_fragment``, then the sampler's taken-action merge).
    """

    def __init__(
        self,
        num_envs: int,
        finish: Sequence[Callable[[dict[str, np.ndarray]], None]] = (),
        capacity: int = 512,
    ):
        self.num_envs = num_envs
        self.finish = finish
        self._table = _Table(capacity)
        self._n = 0  # rows used
        self._base = 0  # absolute index of row 0
        self._start = np.full(num_envs, -1, dtype=np.int64)  # absolute index of each slot's FIRST, -1: none
        self._acted = np.zeros(capacity, dtype=bool)  # whether the row's actions were recorded
        self._obs_template: Any = None
        self._action_template: Any = None
        self._row_keys: list[str] = []
        self._obs_columns: list[np.ndarray] | None = None  # bound by _bind after the first step
        self._action_columns: list[np.ndarray] | None = None
        self._row_columns: list[tuple[str, np.ndarray]] = []
        self._reward = self._discount = np.zeros(0)
        self._all_mid = np.full(num_envs, _MID, dtype=np.int32).tobytes()
        #: Finished episodes not yet popped: (slot, first absolute step, end + 1, terminated).
        self._spans: list[tuple[int, int, int, bool]] = []

    def reset(self) -> None:
        """Drop the episodes in progress (the envs were reset: they will not finish)."""
        self._n = 0
        self._base = 0
        self._start[:] = -1
        self._spans.clear()

    def observe(self, ts: TimeStep) -> None:
        """A step of the env as it gave it (``ts.observation`` raw: before preprocessing and filter)."""
        if self._n == self._table.capacity:
            self._make_room()
        row = self._n
        self._n += 1
        if self._obs_columns is None:  # the first step: the tables take the shapes of its arrays
            self._obs_template = ts.observation
            table = self._table
            for k, leaf in enumerate(_leaves(ts.observation)):
                table.put(f"obs{k}", row, leaf)
            table.put("reward", row, np.asarray(ts.reward, dtype=np.float32))
            table.put("discount", row, np.asarray(ts.discount, dtype=np.float32))
            self._bind()
        else:
            if isinstance(ts.observation, np.ndarray):
                self._obs_columns[0][row] = ts.observation
            else:
                for column, leaf in zip(self._obs_columns, _leaves(ts.observation), strict=True):
                    column[row] = leaf
            self._reward[row] = ts.reward
            self._discount[row] = ts.discount
        self._acted[row] = False
        step_types = ts.step_type
        if ts.valid is None and step_types.tobytes() == self._all_mid:
            return  # no episode starts or ends (the common step)
        step_types = np.asarray(step_types)
        index = self._base + row
        if ts.valid is not None and not ts.valid.all():  # no env step there: an aborted episode
            self._start[~ts.valid] = -1
            step_types = np.where(ts.valid, step_types, -1)
        first = step_types == _FIRST
        self._start[first] = index
        for slot in np.flatnonzero((step_types == _LAST) & (self._start >= 0)).tolist():
            self._finish_episode(slot, index)
            self._start[slot] = -1

    def act(self, env_actions: Any, row: dict[str, np.ndarray]) -> None:
        """The step just observed was acted on: the env's actions and the row's columns."""
        r = self._n - 1
        if self._action_columns is None:  # the first action: the tables take its shapes
            self._action_template = env_actions
            self._row_keys = [k for k in row if k not in _SKIP]
            for k, leaf in enumerate(_leaves(env_actions)):
                self._table.put(f"action{k}", r, leaf)
            for key in self._row_keys:
                self._table.put(f"row:{key}", r, np.asarray(row[key]))
            self._bind()
        else:
            if isinstance(env_actions, np.ndarray):
                self._action_columns[0][r] = env_actions
            else:
                for column, leaf in zip(self._action_columns, _leaves(env_actions), strict=True):
                    column[r] = leaf
            for key, column in self._row_columns:
                column[r] = row[key]
        self._acted[r] = True

    def _bind(self) -> None:
        """Direct references to the table's columns (the per-step writes skip every lookup)."""
        columns = self._table.columns
        self._obs_columns = [columns[f"obs{k}"] for k in range(len(_leaves(self._obs_template)))]
        self._reward, self._discount = columns["reward"], columns["discount"]
        if self._action_template is not None:
            self._action_columns = [columns[f"action{k}"] for k in range(len(_leaves(self._action_template)))]
            self._row_columns = [(key, columns[f"row:{key}"]) for key in self._row_keys]

    def pop(self) -> dict[str, Any] | None:
        """The episodes finished since the last call, packed (see :func:`unpack_episodes`), or None.

        All of them are gathered from the tables in one indexing per column and their deferred
        extras completed in one call (a policy's ``finish_fragment`` costs about the same for 20
        rows as for 2000): per-episode work is what made recording cost a third of sampling.
        Packed, they also cross to the driver and the writer as a few large arrays.
        """
        spans, self._spans = self._spans, []
        if not spans:
            return None
        slot, start, stop, terminated = (
            np.array(column, dtype=np.int64) for column in zip(*spans, strict=True)
        )
        start, stop = start - self._base, stop - self._base  # rows of the tables, stop exclusive
        lengths = stop - start - 1  # actions per episode
        obs_rows = _ranges(start, stop - start)
        obs_slots = np.repeat(slot, stop - start)
        act_rows = _ranges(start, lengths)
        act_slots = np.repeat(slot, lengths)
        columns = self._table.columns
        rows = {key: columns[f"row:{key}"][act_rows, act_slots] for key in self._row_keys}
        for complete in self.finish:
            complete(rows)
        obs = [columns[f"obs{k}"][obs_rows, obs_slots] for k in range(len(self._obs_columns or ()))]
        actions = [columns[f"action{k}"][act_rows, act_slots] for k in range(len(self._action_columns or ()))]
        packed = {
            "lengths": lengths,
            "terminated": terminated.astype(bool),
            "observations": _rebuild(self._obs_template, obs),
            "actions": _rebuild(self._action_template, actions),
            "rewards": columns["reward"][act_rows + 1, act_slots],
        }
        logp = rows.get(SampleBatch.ACTION_LOGP)
        if logp is not None:
            packed["action_logp"] = np.asarray(logp, dtype=np.float32)
        return packed

    def _finish_episode(self, slot: int, end: int) -> None:
        start = int(self._start[slot])
        first, last = start - self._base, end - self._base
        if last - first < 1 or not self._acted[first:last].all():
            return  # a step of it was not recorded (an evaluation or a reset in between)
        terminated = bool(self._discount[last, slot] == 0)
        self._spans.append((slot, start, end + 1, terminated))  # gathered by pop()

    def _make_room(self) -> None:
        """The tables are full: forget the rows no running episode needs, and grow if that is not enough."""
        running = self._start[self._start >= 0]
        keep_from = self._base + self._n - 1  # the last step: act() may still come for it
        if running.size:
            keep_from = min(keep_from, int(running.min()))
        if self._spans:  # finished episodes wait for pop() in the tables
            keep_from = min(keep_from, min(span[1] for span in self._spans))
        start = keep_from - self._base
        kept = self._n - start
        capacity = self._table.capacity * 2 if kept > self._table.capacity // 2 else self._table.capacity
        self._table.keep(start, self._n, capacity)
        acted = np.zeros(capacity, dtype=bool)
        acted[:kept] = self._acted[start : self._n]
        self._acted = acted
        self._base, self._n = keep_from, kept
        self._bind()


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without the loop."""
    total = int(lengths.sum())
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total) + offsets


def _split(nest: Any, bounds: np.ndarray) -> list[Any]:
    if isinstance(nest, dict):
        parts = {key: _split(value, bounds) for key, value in nest.items()}
        return [{key: parts[key][i] for key in nest} for i in range(len(bounds) + 1)]
    if isinstance(nest, tuple):
        parts_t = [_split(value, bounds) for value in nest]
        return [tuple(p[i] for p in parts_t) for i in range(len(bounds) + 1)]
    return np.split(nest, bounds)


def unpack_episodes(packed: dict[str, Any]) -> list[dict[str, Any]]:
    """The episodes of :meth:`EpisodeRecorder.pop`'s packed form, one dict each: ``observations``
    ``[T+1]``, ``actions``, ``rewards`` float32, ``terminations``, ``truncations`` bool ``[T]``,
    ``action_logp`` float32 ``[T]`` when recorded."""
    lengths = np.asarray(packed["lengths"])
    ends = np.cumsum(lengths)[:-1]
    observations = _split(packed["observations"], np.cumsum(lengths + 1)[:-1])
    actions = _split(packed["actions"], ends)
    rewards = np.split(np.asarray(packed["rewards"], dtype=np.float32), ends)
    logp = packed.get("action_logp")
    logps = np.split(logp, ends) if logp is not None else [None] * len(lengths)
    episodes = []
    for i, (t, terminated) in enumerate(zip(lengths.tolist(), packed["terminated"].tolist(), strict=True)):
        terminations, truncations = np.zeros(t, dtype=bool), np.zeros(t, dtype=bool)
        (terminations if terminated else truncations)[-1] = True
        episode = {
            "observations": observations[i],
            "actions": actions[i],
            "rewards": rewards[i],
            "terminations": terminations,
            "truncations": truncations,
        }
        if logps[i] is not None:
            episode["action_logp"] = logps[i]
        episodes.append(episode)
    return episodes
