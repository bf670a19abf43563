"""SampleBatch: a columnar dict of numpy arrays, the unit of experience.

A SampleBatch is the only thing that crosses process and machine boundaries,
so it holds plain numpy arrays and nothing else. All columns share the leading
dimension (rows). Column names are the RL names users know from RLlib:
``obs``, ``actions``, ``rewards``, ``advantages``, ``value_targets`` ...

Rows are *transitions after postprocessing*: the evaluator collects time-major
``[T+1, B]`` fragments, the algorithm's postprocessing turns them into rows
(dropping the bootstrap row and the LAST rows, whose actions are never trained
on), and from then on a batch is flat.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np


class SampleBatch(dict):
    """Columns of equal length. A ``dict`` subclass so it pickles and prints plainly."""

    # Column names shared by evaluators, postprocessing and losses.
    OBS = "obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    DISCOUNTS = "discounts"
    STEP_TYPES = "step_types"
    PREV_ACTIONS = "prev_actions"
    ENV_IDS = "env_ids"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    NEXT_OBS = "next_obs"  # n-step transitions: the observation whose value bootstraps the target
    #: Dataset transitions (rlgear.offline): the step ended its episode by a true terminal (no bootstrap) ...
    TERMINATEDS = "terminateds"
    #: ... or by a time limit (the episode was cut: bootstrap from ``next_obs``); gymnasium's two flags.
    TRUNCATEDS = "truncateds"
    EPS_ID = "eps_id"  # a unique id per episode (per evaluator)
    T = "t"  # the step's index within its episode
    BATCH_INDEXES = "batch_indexes"  # replay slots a sampled row came from
    WEIGHTS = "weights"  # importance-sampling weights of prioritized replay
    ACTION_MASK = "action_mask"  # bool [n] per row: the actions allowed when this row's action was chosen
    NEXT_ACTION_MASK = "next_action_mask"  # n-step transitions: the mask of next_obs (DQN's target max)
    SEQ_MASK = (
        "seq_mask"  # 1.0 on real rows of padded sequences, 0.0 on padding (see rlgear.sampling.sequences)
    )
    STATE_IN = "state_in_"  # recurrent state before the step, one column per state array: state_in_0, ...

    @staticmethod
    def state_in(index: int) -> str:
        """The column of the ``index``-th recurrent state array (``state_in_0`` is the LSTM's h, ``_1`` its c)."""
        return f"state_in_{index}"

    def __init__(self, columns: Mapping[str, np.ndarray] | None = None, **kwargs: np.ndarray):
        super().__init__()
        merged = dict(columns or {}, **kwargs)
        for key, value in merged.items():
            self[key] = np.asarray(value)
        self._check_lengths()

    def _check_lengths(self) -> None:
        lengths = {key: len(value) for key, value in self.items() if np.ndim(value) > 0}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"SampleBatch columns differ in length: {lengths}")

    def __len__(self) -> int:  # number of rows, not of columns
        for value in self.values():
            return int(value.shape[0]) if np.ndim(value) > 0 else 0
        return 0

    @property
    def count(self) -> int:
        return len(self)

    @property
    def columns(self) -> list[str]:
        return list(self.keys())

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.items())
        return f"SampleBatch({len(self)} rows; {cols})"

    @staticmethod
    def concat(batches: Sequence[SampleBatch]) -> SampleBatch:
        """Concatenate rows; all batches must have the same columns."""
        batches = [b for b in batches if len(b) > 0]
        if not batches:
            return SampleBatch()
        keys = set(batches[0].keys())
        for b in batches[1:]:
            if set(b.keys()) != keys:
                raise ValueError(
                    f"cannot concat batches with different columns: {sorted(keys)} vs {sorted(b)}"
                )
        return SampleBatch({k: np.concatenate([b[k] for b in batches]) for k in batches[0]})

    def slice(self, start: int, end: int) -> SampleBatch:
        return SampleBatch({k: v[start:end] for k, v in self.items()})

    def select(self, rows: np.ndarray) -> SampleBatch:
        """Rows picked by an index array or a boolean mask."""
        return SampleBatch({k: v[rows] for k, v in self.items()})

    def shuffle(self, rng: np.random.Generator) -> SampleBatch:
        """A new batch with the rows in a random order (all columns permuted alike)."""
        return self.select(rng.permutation(len(self)))

    def minibatches(
        self, size: int, rng: np.random.Generator | None = None, drop_last: bool = False
    ) -> Iterator[SampleBatch]:
        """Yield consecutive minibatches of ``size`` rows (shuffled first when ``rng`` is given).

        The last, smaller minibatch is yielded unless ``drop_last`` is set.
        """
        if size <= 0:
            raise ValueError(f"minibatch size must be positive, got {size}")
        order = rng.permutation(len(self)) if rng is not None else np.arange(len(self))
        for start in range(0, len(self), size):
            idx = order[start : start + size]
            if drop_last and len(idx) < size:
                return
            yield self.select(idx)

    def copy(self) -> SampleBatch:
        return SampleBatch({k: v.copy() for k, v in self.items()})


class MultiAgentBatch(dict):
    """``{policy id: SampleBatch}`` of a multi-agent env, with the steps they came from.

    ``env_steps`` counts env steps (``timesteps_total``), ``agent_steps`` the steps of every
    agent (``agent_timesteps_total``): with three agents acting every step, three times as many.
    Like SampleBatch it is a plain dict subclass, so it pickles across processes as it is.
    """

    def __init__(self, batches: Mapping[str, SampleBatch], env_steps: int = 0, agent_steps: int = 0):
        super().__init__(batches)
        self.env_steps = int(env_steps)
        self.agent_steps = int(agent_steps)

    def __reduce__(self):  # keep the counts when pickled (Ray)
        return (MultiAgentBatch, (dict(self), self.env_steps, self.agent_steps))

    def __len__(self) -> int:  # rows over all policies, as SampleBatch counts rows
        return sum(len(batch) for batch in self.values())

    @property
    def policy_batches(self) -> dict[str, SampleBatch]:
        return dict(self.items())

    def __repr__(self) -> str:
        parts = ", ".join(f"{pid}: {len(b)} rows" for pid, b in self.items())
        return f"MultiAgentBatch({parts}; env_steps={self.env_steps}, agent_steps={self.agent_steps})"

    @staticmethod
    def concat(batches: Sequence[MultiAgentBatch]) -> MultiAgentBatch:
        """Each policy's rows concatenated; the step counts summed."""
        ids = list(dict.fromkeys(pid for b in batches for pid in b))
        return MultiAgentBatch(
            {pid: SampleBatch.concat([b[pid] for b in batches if pid in b]) for pid in ids},
            env_steps=sum(b.env_steps for b in batches),
            agent_steps=sum(b.agent_steps for b in batches),
        )


def concat_any(batches: Sequence[SampleBatch | MultiAgentBatch]) -> SampleBatch | MultiAgentBatch:
    """Concatenate SampleBatches, or MultiAgentBatches (what rollout ops pass on, either kind)."""
    if batches and isinstance(batches[0], MultiAgentBatch):
        return MultiAgentBatch.concat(batches)  # type: ignore[arg-type]
    return SampleBatch.concat(batches)  # type: ignore[arg-type]
