"""The rows of a learner batch in a seeded random order, padded sequences kept whole.

Every gradient-based learner shuffles its batch before it steps: the backends' one-pass
``learn_on_batch`` (one step on the whole batch) and the on-policy SGD family's epochs
(:mod:`rlgear.plugins.families.onpolicy`) draw the order here, from the policy's own
``rng``, so a seeded run makes the same draws on every backend.
"""

from __future__ import annotations

import numpy as np


def shuffled_rows(rng: np.random.Generator, num_rows: int, rows_per_sequence: int = 1) -> np.ndarray:
    """Row indices ``[num_rows // rows_per_sequence * rows_per_sequence]`` (int64) in a random order.

    With ``rows_per_sequence > 1`` the batch is a run of padded sequences of that many rows
    each (a recurrent policy's ``max_seq_len``): the sequences are shuffled, one
    ``rng.permutation`` draw over them, and each keeps its rows together and in order, so a
    slice of ``k * rows_per_sequence`` rows holds ``k`` whole sequences.
    """
    order = rng.permutation(num_rows // rows_per_sequence)
    if rows_per_sequence == 1:
        return order
    return (order[:, None] * rows_per_sequence + np.arange(rows_per_sequence)).reshape(-1)
