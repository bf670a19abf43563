"""Replay buffers and n-step transitions for off-policy algorithms (DQN, SAC, ...), in numpy.

Three pieces, each usable alone:

* :class:`ReplayBuffer` - a ring buffer of transition rows, sampled uniformly
  (Lin 1992; Mnih et al. 2015). Columns are allocated from the first batch
  added, so it stores whatever columns the algorithm's postprocessing emits.
* :class:`PrioritizedReplayBuffer` - proportional prioritized replay
  (Schaul et al. 2016, arXiv:1511.05952) over a vectorised :class:`SumTree`.
* :func:`n_step_transitions` - turns a time-major ``[T+1, B]`` fragment into
  flat ``(obs, actions, rewards, next_obs, discounts)`` rows with n-step
  returns, following the same step-type rules as :mod:`rlgear.value_ops`.

A stored row is one transition, so ``capacity`` counts transitions (env steps
whose action is trained on), not episodes or fragments. Buffers checkpoint as
``(arrays, meta)``: arrays for safetensors, a JSON-able ``meta`` dict, the
pair the trainer already writes (:mod:`rlgear.run.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.timestep import StepType

#: Column added by :func:`n_step_transitions`: the observation the target bootstraps from.
NEXT_OBS = SampleBatch.NEXT_OBS
NEXT_ACTION_MASK = SampleBatch.NEXT_ACTION_MASK
#: Column added by ``sample()``: the buffer slot of each sampled row (for ``update_priorities``).
BATCH_INDEXES = SampleBatch.BATCH_INDEXES
#: Column added by :meth:`PrioritizedReplayBuffer.sample`: importance-sampling weights.
WEIGHTS = SampleBatch.WEIGHTS

_STATE_FORMAT = 1


class ReplayBuffer:
    """A ring buffer of transition rows with uniform sampling (with replacement).

    Rows are written in order into slots ``0, 1, ..., capacity - 1, 0, 1, ...``;
    once full, each new row overwrites the oldest one. Adding one batch of ``n``
    rows leaves the buffer exactly as adding its rows one by one would.

    Args:
        capacity: the number of transition rows kept.
        seed: seed of the buffer's own random generator (sampling only), so a
            run is reproducible and a checkpoint continues the same sequence.
    """

    def __init__(self, capacity: int, seed: int | None = None):
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"replay buffer capacity must be a positive integer, got {capacity!r}")
        self._capacity = int(capacity)
        self._rng = np.random.default_rng(seed)
        # Column name -> [capacity, *row_shape]; allocated by the first add().
        self._storage: dict[str, np.ndarray] | None = None
        self._next_index = 0  # the slot the next row goes to
        self._size = 0  # filled slots are always 0 .. size - 1
        self._num_added = 0  # rows ever added (including overwritten ones)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def num_added(self) -> int:
        """Rows added since the buffer was created (overwritten ones included)."""
        return self._num_added

    def __len__(self) -> int:
        return self._size

    @property
    def columns(self) -> dict[str, np.dtype]:
        """The stored columns and their dtypes (empty before the first :meth:`add` fixes them)."""
        return {} if self._storage is None else {key: value.dtype for key, value in self._storage.items()}

    def __repr__(self) -> str:
        columns = sorted(self._storage) if self._storage is not None else []
        return f"{type(self).__name__}({self._size}/{self._capacity} rows; columns {columns})"

    # --- adding -----------------------------------------------------------------------
    def add(self, batch: SampleBatch) -> np.ndarray:
        """Store the rows of ``batch``; return the slots written (int64, one per stored row).

        The first batch fixes the columns, their dtypes and row shapes. A batch
        with more rows than ``capacity`` stores only its newest ``capacity`` rows.

        Raises:
            ValueError: the batch's columns or a column's row shape differ from
                what the buffer holds, or a dtype would be cast lossily
                (e.g. float rows into an integer column).
        """
        num_rows = len(batch)
        if num_rows == 0:
            return np.zeros(0, dtype=np.int64)
        if self._storage is None:
            # Column -> [capacity, *row_shape], dtype of the first batch.
            self._storage = {
                key: np.zeros((self._capacity, *np.shape(value)[1:]), dtype=np.asarray(value).dtype)
                for key, value in batch.items()
            }
        self._check_columns(batch)
        # Row i goes to slot (next_index + i) % capacity; of a batch larger than the
        # buffer only the last `capacity` rows survive, so only those are written.
        first_kept = max(0, num_rows - self._capacity)
        slots = (self._next_index + np.arange(first_kept, num_rows)) % self._capacity
        for key, column in self._storage.items():
            column[slots] = batch[key][first_kept:]
        self._next_index = (self._next_index + num_rows) % self._capacity
        self._size = min(self._size + num_rows, self._capacity)
        self._num_added += num_rows
        return slots.astype(np.int64)

    def _check_columns(self, batch: Mapping[str, np.ndarray]) -> None:
        assert self._storage is not None
        if set(batch) != set(self._storage):
            missing = sorted(set(self._storage) - set(batch))
            extra = sorted(set(batch) - set(self._storage))
            raise ValueError(
                "replay buffer: the batch's columns differ from the stored ones "
                f"(missing: {missing}, unexpected: {extra}); every batch added to one buffer "
                "must come from the same postprocessing"
            )
        for key, column in self._storage.items():
            value = np.asarray(batch[key])
            if value.shape[1:] != column.shape[1:]:
                raise ValueError(
                    f"replay buffer: column '{key}' has rows of shape {value.shape[1:]}, "
                    f"the buffer stores rows of shape {column.shape[1:]}"
                )
            if not np.can_cast(value.dtype, column.dtype, casting="same_kind"):
                raise ValueError(
                    f"replay buffer: column '{key}' has dtype {value.dtype}, the buffer stores "
                    f"{column.dtype} (fixed by the first batch) and would lose information"
                )

    # --- sampling ---------------------------------------------------------------------
    def _check_can_sample(self, num_items: int) -> None:
        if self._size == 0:
            raise ValueError(
                f"cannot sample from an empty {type(self).__name__}: add() rows first "
                "(off-policy trainers wait for `learning_starts` steps before sampling)"
            )
        if int(num_items) != num_items or num_items < 1:
            raise ValueError(f"num_items must be a positive integer, got {num_items!r}")

    def _rows(self, slots: np.ndarray) -> SampleBatch:
        """The rows at ``slots`` (copies) plus the ``batch_indexes`` column."""
        assert self._storage is not None
        rows = SampleBatch({key: column[slots] for key, column in self._storage.items()})
        rows[BATCH_INDEXES] = slots.astype(np.int64)
        return rows

    def sample(self, num_items: int) -> SampleBatch:
        """``num_items`` rows drawn uniformly with replacement, plus ``batch_indexes`` (int64 slots)."""
        self._check_can_sample(num_items)
        slots = self._rng.integers(0, self._size, size=int(num_items))
        return self._rows(slots)

    # --- checkpoints ------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, meta)``: the filled rows (``columns/<name>``) and JSON-able bookkeeping.

        Only the ``len(self)`` filled rows are saved, so a checkpoint of a
        partly filled buffer stays small. ``meta`` includes the sampling RNG
        state, so a restored buffer draws the same samples as the original.
        """
        arrays: dict[str, np.ndarray] = {}
        columns: dict[str, dict[str, Any]] | None = None
        if self._storage is not None:
            columns = {}
            for key, column in self._storage.items():
                arrays[f"columns/{key}"] = np.ascontiguousarray(column[: self._size])
                columns[key] = {"dtype": column.dtype.str, "shape": list(column.shape[1:])}
        meta = {
            "format": _STATE_FORMAT,
            "type": type(self).__name__,
            "capacity": self._capacity,
            "size": self._size,
            "next_index": self._next_index,
            "num_added": self._num_added,
            "columns": columns,
            "rng": _rng_state_to_json(self._rng),
        }
        return arrays, meta

    def set_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (the buffer's capacity must be the same).

        Everything is checked before anything changes, so a failed restore
        leaves the buffer as it was.
        """
        if meta.get("format") != _STATE_FORMAT:
            raise ValueError(f"replay buffer state of unknown format {meta.get('format')!r}")
        if int(meta["capacity"]) != self._capacity:
            raise ValueError(
                f"replay buffer state has capacity {meta['capacity']}, this buffer {self._capacity}; "
                "restore with the capacity the checkpoint was written with"
            )
        size = int(meta["size"])
        storage: dict[str, np.ndarray] | None = None
        if meta["columns"] is not None:
            storage = {}
            for key, spec in meta["columns"].items():
                if f"columns/{key}" not in arrays:
                    raise ValueError(f"replay buffer state: the arrays lack column '{key}'")
                data = np.asarray(arrays[f"columns/{key}"])
                if data.shape != (size, *spec["shape"]):
                    raise ValueError(
                        f"replay buffer state: column '{key}' has shape {data.shape}, "
                        f"expected {(size, *spec['shape'])}"
                    )
                storage[key] = np.zeros((self._capacity, *spec["shape"]), dtype=np.dtype(spec["dtype"]))
                storage[key][:size] = data
        rng = np.random.default_rng()
        rng.bit_generator.state = _rng_state_from_json(meta["rng"])
        self._storage = storage
        self._size = size
        self._next_index = int(meta["next_index"])
        self._num_added = int(meta["num_added"])
        self._rng = rng


class SumTree:
    """Sums and minima over a fixed number of non-negative leaf values, in flat numpy arrays.

    A complete binary tree stored heap-style: node 1 is the root, node ``i``
    has children ``2i`` and ``2i + 1``, and the leaves are nodes
    ``size .. 2 * size - 1`` where ``size`` is ``capacity`` rounded up to a
    power of two (so every leaf sits at the same depth and one level is
    updated per vectorised step). Unused leaves hold 0 in the sum tree and
    +inf in the min tree, so they are never sampled and never the minimum.

    Updates and prefix-sum searches take arrays of indexes and run in
    ``O(log capacity)`` numpy operations, whatever the number of indexes.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self._depth = (self.capacity - 1).bit_length()  # levels below the root
        self._leaf_start = 1 << self._depth  # capacity rounded up to a power of two
        self._sum = np.zeros(2 * self._leaf_start, dtype=np.float64)
        self._min = np.full(2 * self._leaf_start, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """The smallest leaf set so far (+inf when none is)."""
        return float(self._min[1])

    def __getitem__(self, indexes: np.ndarray | int) -> np.ndarray:
        return self._sum[self._leaf_start + np.asarray(indexes)]

    def update(self, indexes: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indexes`` to ``values`` (>= 0); when an index repeats, its last value wins."""
        indexes = np.asarray(indexes, dtype=np.int64).reshape(-1)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), indexes.shape)
        if indexes.size == 0:
            return
        if indexes.min() < 0 or indexes.max() >= self.capacity:
            raise IndexError(f"SumTree index out of range [0, {self.capacity}): {indexes}")
        indexes, values = _last_value_per_index(indexes, values)
        nodes = indexes + self._leaf_start
        self._sum[nodes] = values
        self._min[nodes] = values
        for _ in range(self._depth):  # all nodes share one level: walk up level by level
            nodes = np.unique(nodes // 2)
            self._sum[nodes] = self._sum[2 * nodes] + self._sum[2 * nodes + 1]
            self._min[nodes] = np.minimum(self._min[2 * nodes], self._min[2 * nodes + 1])

    def find_prefixsum_index(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each ``u``, the smallest leaf ``i`` with ``sum(leaves[: i + 1]) > u``.

        ``u`` should lie in ``[0, total)``. Leaves worth 0 are never returned
        while the total is positive: the descent only turns into a subtree with
        a positive sum, which also absorbs float rounding at the right edge.
        """
        u = np.array(prefix_sums, dtype=np.float64).reshape(-1)
        nodes = np.ones(u.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = self._sum[2 * nodes]
            go_right = (u >= left) & (self._sum[2 * nodes + 1] > 0)
            u = np.where(go_right, u - left, u)
            nodes = 2 * nodes + go_right
        return nodes - self._leaf_start


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, arXiv:1511.05952, Algorithm 1).

    Row ``i`` is sampled with probability ``P(i) = p_i**alpha / sum_k p_k**alpha``.
    A new row gets the largest priority recorded so far (1.0 before any
    update), so every transition is replayed at least once soon after it
    arrives, as in the paper, RLlib and Dopamine. The learner then calls
    :meth:`update_priorities` with ``|TD error|`` for the rows it sampled.

    The bias this sampling introduces is corrected by importance-sampling
    weights ``w_i = (N * P(i))**-beta / max_k (N * P(k))**-beta`` where ``N`` is
    ``len(self)`` and the max runs over the whole buffer (the paper's
    normalisation, which keeps ``w <= 1`` and so only ever scales updates
    down). ``beta`` is usually annealed to 1 over training; pass it per call.

    Args:
        capacity: the number of transition rows kept.
        alpha: how much prioritisation is used (0 = uniform).
        beta: default importance-sampling exponent (0 = no correction, 1 = full).
        eps: added to every priority so a row with zero TD error can still be drawn.
        seed: seed of the sampling generator.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int | None = None,
    ):
        super().__init__(capacity, seed)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self._tree = SumTree(self._capacity)  # leaves: priority**alpha
        self._priorities = np.zeros(self._capacity, dtype=np.float64)  # raw, eps included
        self._max_priority = 1.0

    @property
    def max_priority(self) -> float:
        """The largest priority recorded so far: what a newly added row gets."""
        return self._max_priority

    def priorities(self) -> np.ndarray:
        """The priorities (``eps`` included, before ``alpha``) of the filled slots, a copy."""
        return self._priorities[: self._size].copy()

    def add(self, batch: SampleBatch) -> np.ndarray:
        slots = super().add(batch)
        self._set_priorities(slots, np.full(slots.shape, self._max_priority))
        return slots

    def _set_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots, priorities = _last_value_per_index(slots, priorities)
        self._priorities[slots] = priorities
        self._tree.update(slots, priorities**self.alpha)

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of slots ``indexes`` (usually ``|TD error|`` of a sampled batch).

        ``eps`` is added to each priority. When an index repeats (a row drawn
        twice in one batch) its last priority wins. A slot overwritten since it
        was sampled gets the priority meant for its previous row; that is rare
        with a large buffer and harmless, as in RLlib and Dopamine.

        Raises:
            ValueError: the arrays differ in length, an index is not a filled
                slot, or a priority plus ``eps`` is not finite and positive.
        """
        indexes = np.asarray(indexes).reshape(-1)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1) + self.eps
        if indexes.shape != priorities.shape:
            raise ValueError(f"update_priorities: {indexes.size} indexes but {priorities.size} priorities")
        if indexes.size == 0:
            return
        if not np.issubdtype(indexes.dtype, np.integer):
            raise ValueError(f"update_priorities: indexes must be integers, got dtype {indexes.dtype}")
        if indexes.min() < 0 or indexes.max() >= self._size:
            bad = indexes[(indexes < 0) | (indexes >= self._size)]
            raise ValueError(
                f"update_priorities: indexes {bad[:5].tolist()} are not filled slots "
                f"(the buffer holds {self._size}); pass the batch's `{BATCH_INDEXES}` column"
            )
        invalid = ~np.isfinite(priorities) | (priorities <= 0)
        if invalid.any():
            raise ValueError(
                "update_priorities: priorities must be finite and > 0 (after adding eps="
                f"{self.eps}), got {(priorities[invalid] - self.eps)[:5].tolist()}; "
                "use |TD error| and check the loss for NaN"
            )
        slots, priorities = _last_value_per_index(indexes.astype(np.int64), priorities)
        self._set_priorities(slots, priorities)
        # The max of the priorities that landed: one overwritten in the same call does not count.
        self._max_priority = max(self._max_priority, float(priorities.max()))

    def sample(self, num_items: int, beta: float | None = None) -> SampleBatch:
        """``num_items`` rows drawn in proportion to ``priority**alpha``, plus ``batch_indexes`` and ``weights``.

        Sampling is stratified: the total priority mass is cut into
        ``num_items`` equal segments and one row is drawn from each (Schaul et
        al. 2016, Appendix B.2.1; RLlib does the same). That lowers the variance
        of a batch's composition; rows come out ordered by slot.

        Args:
            beta: importance-sampling exponent for this call (default: ``self.beta``).
        Returns:
            the rows, ``batch_indexes`` (int64 slots) and ``weights`` (float32,
            ``<= 1``, 1 for the lowest-priority row in the buffer).
        """
        self._check_can_sample(num_items)
        beta = self.beta if beta is None else float(beta)
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        num_items = int(num_items)
        total = self._tree.total
        segment = total / num_items
        prefix_sums = (np.arange(num_items) + self._rng.random(num_items)) * segment
        slots = self._tree.find_prefixsum_index(np.minimum(prefix_sums, np.nextafter(total, 0)))
        # (N P(i))**-beta / max_k (N P(k))**-beta: the max weight belongs to the
        # smallest priority, so N and the total cancel: (p_i / p_min)**(-alpha * beta)
        # with p**alpha read from the trees. Computed in float64, then cast.
        weights = (self._tree[slots] / self._tree.min) ** -beta
        rows = self._rows(slots)
        rows[WEIGHTS] = weights.astype(np.float32)
        return rows

    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """As :meth:`ReplayBuffer.get_state`, plus ``priorities`` (raw, ``eps`` included) and ``max_priority``."""
        arrays, meta = super().get_state()
        arrays["priorities"] = self._priorities[: self._size].copy()
        meta["max_priority"] = self._max_priority
        meta["alpha"] = self.alpha
        return arrays, meta

    def set_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore what :meth:`get_state` returned; the trees are rebuilt with this buffer's ``alpha``."""
        if "priorities" not in arrays:
            raise ValueError(
                f"replay buffer state of a {meta.get('type')} has no priorities; "
                "it cannot restore a PrioritizedReplayBuffer"
            )
        priorities = np.asarray(arrays["priorities"], dtype=np.float64)
        if priorities.shape != (int(meta["size"]),):
            raise ValueError(
                f"replay buffer state: priorities have shape {priorities.shape}, expected ({meta['size']},)"
            )
        super().set_state(arrays, meta)
        self._tree = SumTree(self._capacity)
        self._priorities = np.zeros(self._capacity, dtype=np.float64)
        self._set_priorities(np.arange(self._size), priorities)
        self._max_priority = float(meta["max_priority"])


def _last_value_per_index(indexes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique ``indexes`` and, for each, its last value in ``values``.

    NumPy does not promise which of repeated fancy-index assignments lands, so
    "last write wins" is made explicit: ``np.unique`` of the reversed array
    returns the first occurrence there, i.e. the last one here.
    """
    unique, first_in_reversed = np.unique(indexes[::-1], return_index=True)
    return unique, np.asarray(values)[::-1][first_in_reversed]


def _rng_state_to_json(rng: np.random.Generator) -> dict[str, Any]:
    # PCG64's state holds 128-bit ints; strings keep them exact in any JSON reader.
    state = rng.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": {k: str(v) for k, v in state["state"].items()},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def _rng_state_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    if data["bit_generator"] != "PCG64":
        raise ValueError(f"replay buffer state: unsupported bit generator {data['bit_generator']!r}")
    return {
        "bit_generator": data["bit_generator"],
        "state": {k: int(v) for k, v in data["state"].items()},
        "has_uint32": int(data["has_uint32"]),
        "uinteger": int(data["uinteger"]),
    }


# --- n-step transitions -------------------------------------------------------------------
def n_step_transitions(fragment: SampleBatch, n_step: int, gamma: float) -> SampleBatch:
    """Flat n-step transition rows from a time-major ``[T+1, B]`` fragment.

    One row per ``(t, b)`` with ``t < T`` whose step is not LAST (the action at a
    LAST step was ignored by the env; row ``T`` is the bootstrap row and the
    next fragment's row 0), in time-major order like
    :func:`rlgear.sampling.postprocessing.trainable_rows`. For such a row, with
    ``k = min(n_step, steps to the episode's LAST, T - t)`` (so a transition
    never runs past an episode's end or the fragment's end):

    * ``rewards = r[t+1] + gamma r[t+2] + ... + gamma**(k-1) r[t+k]``
      (ALF layout: ``r[t+1]`` is the reward for the action at ``t``);
    * ``next_obs = obs[t+k]`` (and ``next_action_mask = action_mask[t+k]`` when the fragment has masks);
    * ``discounts = gamma**k * d[t+k]`` with ``d`` the env discount: 0 when step
      ``t+k`` is a terminated LAST, 1 for a truncated LAST (the time limit is
      not part of the MDP, so the target bootstraps), a MID step or the
      bootstrap row. The TD target is ``rewards + discounts * Q(next_obs)``.

    Every other column (``obs``, ``actions``, ``step_types``, ``eps_id``,
    ``t``, ...) is carried from row ``t``. ``n_step=1`` gives the one-step
    transition ``(obs[t], a[t], r[t+1], obs[t+1], gamma d[t+1])``; with
    ``n_step >= T``, ``rewards + discounts * V(next_obs)`` equals
    :func:`rlgear.value_ops.discounted_return`.

    Args:
        fragment: columns ``[T+1, B, ...]`` including ``obs``, ``rewards``,
            ``discounts`` (raw env discounts 0/1, *not* multiplied by gamma)
            and ``step_types``.
        n_step: the number of rewards summed (at most).
        gamma: the discount factor.
    Returns:
        a flat SampleBatch of ``N`` rows, ``N`` = number of non-LAST steps among
        the first ``T`` rows.
    """
    if int(n_step) != n_step or n_step < 1:
        raise ValueError(f"n_step must be a positive integer, got {n_step!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    required = (SampleBatch.OBS, SampleBatch.REWARDS, SampleBatch.DISCOUNTS, SampleBatch.STEP_TYPES)
    missing = [key for key in required if key not in fragment]
    if missing:
        raise ValueError(f"n_step_transitions: the fragment lacks columns {missing} (has {sorted(fragment)})")
    step_types = np.asarray(fragment[SampleBatch.STEP_TYPES])
    if step_types.ndim != 2 or step_types.shape[0] < 2:
        raise ValueError(
            "n_step_transitions: expected a time-major [T+1, B] fragment with T >= 1, "
            f"got step_types of shape {step_types.shape}"
        )
    rewards = np.asarray(fragment[SampleBatch.REWARDS])
    env_discounts = np.asarray(fragment[SampleBatch.DISCOUNTS])
    num_steps = step_types.shape[0] - 1  # T: row T only supplies next_obs
    is_last = step_types == StepType.LAST  # [T+1, B]

    # Forward over i = 1..n_step for all rows t < T at once, all [T, B]:
    # running[t, b] says the transition from (t, b) may still take step t+i,
    # i.e. no LAST among t+1 .. t+i-1 and t+i <= T.
    returns = np.zeros(step_types[:num_steps].shape, dtype=np.float64)
    horizon = np.zeros(returns.shape, dtype=np.int64)  # k, the steps actually taken
    running = ~is_last[:num_steps]  # LAST rows are dropped below; nothing to sum for them
    time = np.arange(num_steps)[:, None]
    for i in range(1, int(n_step) + 1):
        running = running & (time + i <= num_steps)
        if not running.any():
            break
        target = np.minimum(time + i, num_steps)  # [T, 1], clipped where `running` is False anyway
        reward_i = np.take_along_axis(rewards, np.broadcast_to(target, returns.shape), axis=0)
        returns += np.where(running, gamma ** (i - 1) * reward_i, 0.0)
        horizon = np.where(running, i, horizon)
        running = running & ~np.take_along_axis(is_last, np.broadcast_to(target, returns.shape), axis=0)

    keep = ~is_last[:num_steps]  # [T, B]
    rows_t, rows_b = np.nonzero(keep)  # time-major order, as boolean-mask indexing gives
    k = horizon[rows_t, rows_b]
    next_t = rows_t + k
    out = SampleBatch({key: np.asarray(value)[:num_steps][keep] for key, value in fragment.items()})
    # [N] each; next_obs [N, *obs_shape].
    out[SampleBatch.REWARDS] = returns[rows_t, rows_b].astype(np.result_type(rewards.dtype, np.float32))
    out[NEXT_OBS] = np.asarray(fragment[SampleBatch.OBS])[next_t, rows_b]
    if SampleBatch.ACTION_MASK in fragment:  # the target's max over next_obs honours its mask
        out[NEXT_ACTION_MASK] = np.asarray(fragment[SampleBatch.ACTION_MASK])[next_t, rows_b]
    out[SampleBatch.DISCOUNTS] = (gamma ** k.astype(np.float64) * env_discounts[next_t, rows_b]).astype(
        np.result_type(env_discounts.dtype, np.float32)
    )
    return out
