"""Cutting rows into padded sequences (``rlgear.sampling.sequences``) against a hand-computed reference."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.sequences import chop_into_sequences, sequence_lengths

L = 3  # max_seq_len


def rows_of(episodes: list[tuple[int, list[int]]]) -> SB:
    """Rows of several episodes ``(eps_id, [t, ...])`` interleaved as time-major postprocessing leaves them
    (step by step across envs), with a state-in that names its row: ``100 * eps_id + t``."""
    streams = [[(eps, t) for t in steps] for eps, steps in episodes]
    order = []
    for i in range(max(len(s) for s in streams)):
        order += [s[i] for s in streams if i < len(s)]
    eps = np.array([e for e, _ in order])
    t = np.array([s for _, s in order])
    code = (100 * eps + t).astype(np.float32)
    return SB(
        {
            SB.EPS_ID: eps,
            SB.T: t,
            SB.OBS: np.stack([code, -code], axis=1),
            SB.state_in(0): np.repeat(code[:, None], 2, axis=1),
            SB.state_in(1): np.repeat(-code[:, None], 2, axis=1),
        }
    )


def test_episodes_of_length_1_L_L_plus_1_and_a_truncated_one_are_cut_padded_and_masked():
    # eps 0 began in an earlier fragment (t 5, 6 here, cut by the fragment's end: truncated);
    # eps 1 has length 1, eps 2 length L, eps 3 length L + 1.
    batch = chop_into_sequences(rows_of([(0, [5, 6]), (1, [0]), (2, [0, 1, 2]), (3, [0, 1, 2, 3])]), L)
    # Hand-computed: sequences by episode then time, each padded to L rows.
    expected_codes = [
        [5, 6, 0],  # eps 0: its two rows, one padding row
        [100, 0, 0],  # eps 1: one row
        [200, 201, 202],  # eps 2: exactly L rows, no padding
        [300, 301, 302],  # eps 3: L rows ...
        [303, 0, 0],  # ... and the one that is left, in a sequence of its own
    ]
    expected_mask = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]]
    assert len(batch) == 5 * L
    np.testing.assert_array_equal(batch[SB.OBS][:, 0].reshape(5, L), expected_codes)
    np.testing.assert_array_equal(batch[SB.OBS][:, 1].reshape(5, L), -np.array(expected_codes))
    np.testing.assert_array_equal(batch[SB.SEQ_MASK].reshape(5, L), expected_mask)
    assert batch[SB.SEQ_MASK].dtype == np.float32
    np.testing.assert_array_equal(sequence_lengths(batch[SB.SEQ_MASK], L), [2, 1, 3, 3, 1])
    # The initial state of each chunk is the actor's state before the chunk's first row.
    np.testing.assert_array_equal(batch[SB.state_in(0)][::L, 0], [5, 100, 200, 300, 303])
    np.testing.assert_array_equal(batch[SB.state_in(1)][::L, 1], [-5, -100, -200, -300, -303])
    # Padding rows are zeros in every column.
    padding = batch[SB.SEQ_MASK] == 0
    for key in (SB.OBS, SB.state_in(0), SB.EPS_ID, SB.T):
        assert not np.any(batch[key][padding]), key
    np.testing.assert_array_equal(batch[SB.EPS_ID][~padding], [0, 0, 1, 2, 2, 2, 3, 3, 3, 3])


def test_a_gap_in_t_starts_a_new_sequence_and_a_sequence_never_spans_two_episodes():
    batch = chop_into_sequences(rows_of([(4, [0, 1, 3]), (5, [0])]), L)
    np.testing.assert_array_equal(
        batch[SB.OBS][:, 0].reshape(-1, L), [[400, 401, 0], [403, 0, 0], [500, 0, 0]]
    )


def test_rows_without_episode_ids_are_refused_with_the_missing_columns_named():
    with pytest.raises(ValueError, match=r"\['eps_id'\]"):
        chop_into_sequences(SB({SB.T: np.arange(3), SB.OBS: np.zeros((3, 2))}), L)


def test_an_empty_batch_gives_an_empty_masked_batch():
    batch = chop_into_sequences(SB({SB.EPS_ID: np.zeros(0, np.int64), SB.T: np.zeros(0, np.int64)}), L)
    assert len(batch) == 0 and SB.SEQ_MASK in batch
