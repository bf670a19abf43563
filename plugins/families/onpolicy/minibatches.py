"""The minibatch schedule of on-policy SGD: which rows each gradient step of a learner batch takes.

Framework-free: row indices as numpy int64 arrays, drawn from the policy's own
``np.random.Generator`` (``policy.rng``, saved in its checkpoints), one
``rng.permutation`` per epoch, so a seeded run takes the same minibatches on every backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rlgear.blocks.minibatch_rows import shuffled_rows


@dataclass(frozen=True)
class SGDSchedule:
    """``num_epochs`` passes over a batch, each in a fresh random order, ``minibatch_size`` rows a step.

    ``minibatch_size=None`` is the whole batch in one step per epoch (PG, A2C: one step on the
    batch; IMPALA: one step per pass). The last minibatch of an epoch holds the rows left over.
    """

    num_epochs: int = 1
    minibatch_size: int | None = None

    def __post_init__(self) -> None:
        if self.num_epochs < 1:
            raise ValueError(f"num_epochs must be 1 or more, got {self.num_epochs}")
        if self.minibatch_size is not None and self.minibatch_size < 1:
            raise ValueError(
                f"minibatch_size must be 1 or more (or None: the whole batch), got {self.minibatch_size}"
            )

    def minibatches(
        self, rng: np.random.Generator, num_rows: int, rows_per_sequence: int = 1
    ) -> Iterator[np.ndarray]:
        """The row indices of each gradient step, epoch after epoch; each epoch's order is drawn
        when its first minibatch is asked for.

        With ``rows_per_sequence > 1`` (a recurrent policy's batch of padded sequences,
        ``max_seq_len`` rows each) whole sequences are shuffled and a minibatch holds
        ``round(minibatch_size / rows_per_sequence)`` of them (at least one).
        """
        size = self.minibatch_size or num_rows
        sequences = max(1, round(size / rows_per_sequence)) if rows_per_sequence > 1 else size
        step = max(1, sequences * rows_per_sequence)
        for _ in range(self.num_epochs):
            rows = shuffled_rows(rng, num_rows, rows_per_sequence)
            for start in range(0, len(rows), step):
                yield rows[start : start + step]
