"""Cutting training rows into padded sequences for recurrent policies (framework-free).

A recurrent policy learns on sequences: the learner runs its LSTM from the
state the actor had at a sequence's first row, through the rows in time order.
:func:`chop_into_sequences` turns postprocessed rows (``trainable_rows``: time-major
``[T, B]`` flattened, LAST rows dropped) into sequences of at most ``max_seq_len``
rows that never cross an episode boundary, each zero-padded to ``max_seq_len``.

Layout of the result (what every loss and the minibatch loop rely on):
  * ``num_sequences * max_seq_len`` rows; sequence ``i`` is rows ``i*L .. i*L + L-1``,
    its real rows first, then padding;
  * ``seq_mask`` (float32): 1 on real rows, 0 on padding; every loss term,
    statistic and advantage normalisation weighs rows by it;
  * ``state_in_<k>``: the actor's recurrent state before each row; the learner
    reads it at a sequence's first row only (the initial state of the chunk).

Episode ids are unique per evaluator only, so chop per fragment on the evaluator
(``RolloutWorker.sample_with_count`` does) before batches of several workers are
concatenated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlgear.sample_batch import SampleBatch


def chop_into_sequences(rows: SampleBatch, max_seq_len: int) -> SampleBatch:
    """Padded sequences of at most ``max_seq_len`` rows from ``rows`` of one evaluator.

    Rows are grouped by episode (``eps_id``) in time order (``t``); a run of
    consecutive ``t`` inside an episode is cut into chunks of ``max_seq_len``.
    A gap in ``t`` (which postprocessing never makes) also starts a new chunk.
    """
    if max_seq_len <= 0:
        raise ValueError(f"max_seq_len must be positive, got {max_seq_len}")
    n = len(rows)
    if n == 0:
        return SampleBatch(
            {**{k: v[:0] for k, v in rows.items()}, SampleBatch.SEQ_MASK: np.zeros(0, np.float32)}
        )
    missing = [key for key in (SampleBatch.EPS_ID, SampleBatch.T) if key not in rows]
    if missing:
        raise ValueError(
            f"cutting rows into sequences needs the columns {missing} (episode id, step in episode)"
        )
    eps_id = np.asarray(rows[SampleBatch.EPS_ID])
    t = np.asarray(rows[SampleBatch.T])
    order = np.lexsort((t, eps_id))  # by episode, then by step
    eps_id, t = eps_id[order], t[order]
    index = np.arange(n)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (eps_id[1:] != eps_id[:-1]) | (t[1:] != t[:-1] + 1)
    run_start = np.flatnonzero(new_run)
    position_in_run = index - run_start[np.cumsum(new_run) - 1]
    new_chunk = new_run | (position_in_run % max_seq_len == 0)
    chunk_of_row = np.cumsum(new_chunk) - 1
    chunk_start = np.flatnonzero(new_chunk)
    destination = chunk_of_row * max_seq_len + (index - chunk_start[chunk_of_row])
    num_rows = len(chunk_start) * max_seq_len
    out = {}
    for key, value in rows.items():
        # Padding allows every action: a row of a mask with none allowed would make NaN
        # log-probabilities, and NaN times a zero seq_mask is still NaN.
        fill = np.ones if key == SampleBatch.ACTION_MASK else np.zeros
        padded = fill((num_rows, *value.shape[1:]), dtype=value.dtype)
        padded[destination] = value[order]
        out[key] = padded
    mask = np.zeros(num_rows, dtype=np.float32)
    mask[destination] = 1.0
    out[SampleBatch.SEQ_MASK] = mask
    return SampleBatch(out)


def makes_own_sequences(postprocess: Callable) -> Callable:
    """Mark an algorithm's ``postprocess`` as returning sequences already (IMPALA's ``[B, T+1]``
    fragments): the evaluator then does not cut its rows with :func:`chop_into_sequences`."""
    postprocess.makes_own_sequences = True  # type: ignore[attr-defined]
    return postprocess


def sequence_lengths(seq_mask: np.ndarray, max_seq_len: int) -> np.ndarray:
    """Real rows per sequence, ``[num_sequences]``, from a padded batch's ``seq_mask``."""
    return np.asarray(seq_mask).reshape(-1, max_seq_len).sum(axis=1).astype(np.int64)
