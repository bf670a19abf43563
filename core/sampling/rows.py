"""Recorded rows: one policy's stream of rows between fragment cuts, and invalid-row handling.

A :class:`PolicyStream` holds a policy's recorded rows time-major ``[T, S]`` (one column per slot)
with their ``active`` and ``valid`` masks until the sampler cuts a fragment or takes whole
episodes from it. :func:`drop_invalid_rows` turns the rows of an aborted episode (an external
client dropped mid-episode) into rows that no postprocessing trains on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.sampling.agents import AgentSlots
from rlgear.sampling.collector import PolicyCollector
from rlgear.timestep import StepType, TimeStep

_FIRST, _LAST = int(StepType.FIRST), int(StepType.LAST)
#: The column recording, per row, the behaviour log-probability of an action the env reports as
#: taken already (NaN where the policy acted); merged into ``action_logp`` once the policy filled it.
TAKEN_LOGP = "_taken_action_logp"


class PolicyStream:
    """One policy's recording: the rows of the current fragment and the row carried per slot.

    Rows go into buffers ``[capacity, S, ...]`` allocated once per fragment (a column that shows up
    later, e.g. when no slot was active yet, starts as zeros), like the single-agent loop always did.
    """

    def __init__(self, collector: PolicyCollector, slots: AgentSlots):
        self.collector = collector
        self.slots = slots
        self.buffers: dict[str, np.ndarray] = {}
        self.active = np.zeros((0, slots.num_slots), dtype=bool)
        self.valid: np.ndarray | None = None  # TimeStep.valid per row, once an invalid row showed up
        self.all_active = True  # every row recorded in this fragment had every slot active
        self.n = 0  # rows recorded in this fragment
        self.carry: dict[str, np.ndarray] = {}
        self.has_carry = np.zeros(slots.num_slots, dtype=bool)
        self.t = np.zeros(slots.num_slots, dtype=np.int64)  # each agent's step index in its episode
        self.ts: TimeStep | None = None
        self.ts_active: np.ndarray | None = None
        self.state: np.ndarray | None = None  # the env's global state per slot now, when it gives one
        #: complete_episodes: per slot, the rows of its agent's episode so far
        self.partial: list[list[dict[str, np.ndarray]]] = [[] for _ in range(slots.num_slots)]

    def start_fragment(self, capacity: int) -> None:
        self.buffers = {}
        self.capacity = capacity
        if self.active.shape[0] != capacity:
            self.active = np.zeros((capacity, self.slots.num_slots), dtype=bool)
        self.valid = None
        self.all_active = True
        self.n = 0

    def add(self, row: dict[str, Any], active: np.ndarray | None, valid: np.ndarray | None) -> None:
        """Records a step's row; ``active`` None: every slot is active (a single-agent env)."""
        t = self.n
        buffers = self.buffers
        try:
            for key, value in row.items():
                buffers[key][t] = value
        except KeyError:  # the fragment's first row, or a column that shows up later
            for key, value in row.items():
                if key not in buffers:
                    value = np.asarray(value)
                    buffers[key] = np.zeros((self.capacity, *value.shape), dtype=value.dtype)
                buffers[key][t] = value
        if active is None:
            self.active[t] = True
        else:
            self.active[t] = active
            if self.all_active and not active.all():
                self.all_active = False
        if valid is not None and (self.valid is not None or not valid.all()):
            if self.valid is None:
                self.valid = np.ones((self.capacity, self.slots.num_slots), dtype=bool)
            self.valid[t] = valid
        self.n = t + 1

    def clear(self) -> None:
        self.buffers, self.n, self.valid, self.all_active = {}, 0, None, True
        self.partial = [[] for _ in range(self.slots.num_slots)]
        self.carry = {}
        self.has_carry[:] = False
        self.t[:] = 0
        self.collector.reset_state()


def drop_invalid_rows(fragment: dict[str, np.ndarray], valid: np.ndarray) -> int:
    """Turn invalid rows, and the rows of episodes they abort, into LAST rows; return env steps dropped.

    ``valid`` is ``[T+1, B]`` (``TimeStep.valid`` per row). An invalid row right
    after a valid non-LAST row means the episode running in that env was
    aborted (an external client dropped): its rows in this fragment, back to its
    FIRST, must not be trained on. Marking them LAST is enough for every
    postprocessing (LAST rows are never trained on, and no value crosses a LAST).
    Rows of that episode in earlier fragments were bootstrapped like a
    truncation; ``batch_mode: complete_episodes`` keeps even those out.
    """
    steps = fragment[SampleBatch.STEP_TYPES]
    dropped = 0
    for t, b in zip(*np.nonzero(~valid[1:] & valid[:-1]), strict=True):
        k = int(t)  # the row before the invalid row t+1
        while k >= 0 and valid[k, b] and steps[k, b] != _LAST:
            valid[k, b] = False
            dropped += int(steps[k, b] != _FIRST)
            if steps[k, b] == _FIRST:
                break
            k -= 1
    steps[~valid] = _LAST
    fragment[SampleBatch.REWARDS][~valid] = 0.0
    return dropped


def _empty_like(table: dict[str, np.ndarray]) -> SampleBatch:
    return SampleBatch({key: values[:0, 0] for key, values in table.items()})


def _with_taken(
    ts: TimeStep, actions: np.ndarray, extras: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The actions to record where the env reports some as taken already (``ts.taken``), and the
    :data:`TAKEN_LOGP` column (NaN where the policy's own action stands). Value predictions stay the
    policy's: postprocessing (GAE) bootstraps from the learner's values, whoever acted."""
    logp = np.full(len(ts.step_type), np.nan, dtype=np.float32)
    taken = ts.taken
    if taken is not None and np.count_nonzero(taken.rows):
        rows = taken.rows
        actions = np.array(actions, copy=True)
        actions[rows] = np.asarray(taken.actions)[rows].astype(actions.dtype, copy=False)
        logp[rows] = taken.action_logp[rows]
    return actions, {**extras, TAKEN_LOGP: logp}


def _merge_taken_logp(columns: dict[str, np.ndarray]) -> None:
    """``action_logp`` of the taken rows becomes the one their actor reported (the behaviour policy's,
    which importance ratios need), once the policy has filled the column for its own rows."""
    taken = columns.pop(TAKEN_LOGP, None)
    if taken is None or SampleBatch.ACTION_LOGP not in columns:
        return
    where = ~np.isnan(taken)
    if np.count_nonzero(where):
        own = columns[SampleBatch.ACTION_LOGP]
        columns[SampleBatch.ACTION_LOGP] = np.where(where, taken, own).astype(own.dtype, copy=False)
