"""Turning time-major fragments into training rows (framework-free).

An evaluator hands postprocessing a *fragment*: a SampleBatch whose columns
are time-major ``[T+1, B, ...]``. Row ``T`` is the bootstrap row: it is the
first row of the next fragment, so only its value is used here. Rows at LAST
steps carry an action that the env ignored (next-step autoreset), so they are
never trained on either.
"""

from __future__ import annotations

import numpy as np

from rlgear import value_ops
from rlgear.sample_batch import SampleBatch
from rlgear.timestep import StepType


def trainable_rows(fragment: SampleBatch) -> SampleBatch:
    """Flat rows of the steps whose actions are trained on.

    Drops the bootstrap row and the LAST rows; flattens ``[T, B]`` in
    time-major order.
    """
    steps = fragment[SampleBatch.STEP_TYPES]
    body = steps.shape[0] - 1
    mask = steps[:body] != StepType.LAST
    return SampleBatch({key: value[:body][mask] for key, value in fragment.items()})


def add_gae(fragment: SampleBatch, gamma: float, gae_lambda: float) -> SampleBatch:
    """Add ``advantages`` and ``value_targets`` (GAE, from ``vf_preds``) to a fragment.

    The bootstrap row gets zeros in the new columns (it is not trained on;
    :func:`trainable_rows` drops it).
    """
    values = fragment[SampleBatch.VF_PREDS]
    advantages = value_ops.generalized_advantage_estimation(
        rewards=fragment[SampleBatch.REWARDS],
        values=values,
        step_types=fragment[SampleBatch.STEP_TYPES],
        discounts=fragment[SampleBatch.DISCOUNTS] * gamma,
        td_lambda=gae_lambda,
    ).astype(np.float32)
    pad = np.zeros_like(advantages[:1])
    out = SampleBatch(fragment)
    out[SampleBatch.ADVANTAGES] = np.concatenate([advantages, pad])
    out[SampleBatch.VALUE_TARGETS] = np.concatenate([advantages + values[:-1], pad]).astype(np.float32)
    return out


def add_discounted_returns(
    fragment: SampleBatch, gamma: float, values: np.ndarray | None = None
) -> SampleBatch:
    """Add ``value_targets`` (bootstrapped discounted returns) and ``advantages`` (returns - values).

    ``values`` defaults to the fragment's ``vf_preds``; pass zeros for plain
    Monte-Carlo returns of whole episodes. The bootstrap row gets zeros (it is
    not trained on; :func:`trainable_rows` drops it).
    """
    if values is None:
        values = fragment[SampleBatch.VF_PREDS]
    returns = value_ops.discounted_return(
        rewards=fragment[SampleBatch.REWARDS],
        values=values,
        step_types=fragment[SampleBatch.STEP_TYPES],
        discounts=fragment[SampleBatch.DISCOUNTS] * gamma,
    ).astype(np.float32)
    pad = np.zeros_like(returns[:1])
    out = SampleBatch(fragment)
    out[SampleBatch.VALUE_TARGETS] = np.concatenate([returns, pad])
    out[SampleBatch.ADVANTAGES] = np.concatenate([returns - values[:-1], pad]).astype(np.float32)
    return out
