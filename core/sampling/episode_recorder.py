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

from collections.abc import Callable
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
    episode's dict (:meth:`pop`) holds ``observations`` ``[T+1]`` (a dict/tuple of arrays for
    Dict/Tuple spaces), ``actions`` ``[T]`` (the env's actions: clipped, structured),
    ``rewards`` float32 ``[T]``, ``terminations`` / ``truncations`` bool ``[T]`` (only the last can
    be true) and, when the policy reports one, ``action_logp`` float32 ``[T]`` (the behaviour
    policy's log-probability of its sampled action, before any clipping).

    Args:
        num_envs: env slots.
        finish: completes a dict of ``[T]`` row columns in place (the policy's
            ``finish_fragment`` plus the sampler's taken-action merge).
    """

    def __init__(self, num_envs: int, finish: Callable[[dict[str, np.ndarray]], None], capacity: int = 512):
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
        self._all_mid = np.full(num_envs, _MID, dtype=np.int32).tobytes()
        self._done: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Drop the episodes in progress (the envs were reset: they will not finish)."""
        self._n = 0
        self._base = 0
        self._start[:] = -1

    def observe(self, ts: TimeStep) -> None:
        """A step of the env as it gave it (``ts.observation`` raw: before preprocessing and filter)."""
        if self._n == self._table.capacity:
            self._make_room()
        row = self._n
        self._n += 1
        table = self._table
        if self._obs_template is None:
            self._obs_template = ts.observation
        for k, leaf in enumerate(_leaves(ts.observation)):
            table.put(f"obs{k}", row, leaf)
        table.put("reward", row, np.asarray(ts.reward, dtype=np.float32))
        table.put("discount", row, np.asarray(ts.discount, dtype=np.float32))
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
        table = self._table
        if self._action_template is None:
            self._action_template = env_actions
            self._row_keys = [k for k in row if k not in _SKIP]
        for k, leaf in enumerate(_leaves(env_actions)):
            table.put(f"action{k}", r, leaf)
        for key in self._row_keys:
            table.put(f"row:{key}", r, np.asarray(row[key]))
        self._acted[r] = True

    def pop(self) -> list[dict[str, Any]]:
        """The episodes finished since the last call, their deferred extras completed in one call
        (a policy's ``finish_fragment`` costs about the same for 20 rows as for 2000)."""
        done, self._done = self._done, []
        if not done:
            return done
        parts = [episode.pop("_rows") for episode in done]
        rows = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
        self.finish(rows)
        logp = rows.get(SampleBatch.ACTION_LOGP)
        if logp is not None:
            ends = np.cumsum([len(e["rewards"]) for e in done])[:-1]
            for episode, part in zip(done, np.split(np.asarray(logp, dtype=np.float32), ends), strict=True):
                episode["action_logp"] = part
        return done

    def _finish_episode(self, slot: int, end: int) -> None:
        start, stop = self._start[slot] - self._base, end - self._base + 1
        if stop - start < 2 or not self._acted[start : stop - 1].all():
            return  # a step of it was not recorded (an evaluation or a reset in between)
        columns = self._table.columns
        acted = slice(start, stop - 1)
        obs = [columns[f"obs{k}"][start:stop, slot].copy() for k in range(len(_leaves(self._obs_template)))]
        actions = [
            columns[f"action{k}"][acted, slot].copy() for k in range(len(_leaves(self._action_template)))
        ]
        t = stop - 1 - start
        terminations = np.zeros(t, dtype=bool)
        truncations = np.zeros(t, dtype=bool)
        (terminations if columns["discount"][stop - 1, slot] == 0 else truncations)[-1] = True
        episode = {
            "observations": _rebuild(self._obs_template, obs),
            "actions": _rebuild(self._action_template, actions),
            "rewards": columns["reward"][start + 1 : stop, slot].copy(),
            "terminations": terminations,
            "truncations": truncations,
            "_rows": {key: columns[f"row:{key}"][acted, slot].copy() for key in self._row_keys},
        }
        self._done.append(episode)

    def _make_room(self) -> None:
        """The tables are full: forget the rows no running episode needs, and grow if that is not enough."""
        running = self._start[self._start >= 0]
        keep_from = self._base + self._n - 1  # the last step: act() may still come for it
        if running.size:
            keep_from = min(keep_from, int(running.min()))
        start = keep_from - self._base
        kept = self._n - start
        capacity = self._table.capacity * 2 if kept > self._table.capacity // 2 else self._table.capacity
        self._table.keep(start, self._n, capacity)
        acted = np.zeros(capacity, dtype=bool)
        acted[:kept] = self._acted[start : self._n]
        self._acted = acted
        self._base, self._n = keep_from, kept
