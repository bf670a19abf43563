"""Turning time-major fragments into training rows (framework-free).

An evaluator hands postprocessing a *fragment*: a SampleBatch whose columns
are time-major ``[T+1, B, ...]``. Row ``T`` is the bootstrap row: it is the
first row of the next fragment, so only its value is used here. Rows at LAST
steps carry an action that the env ignored (next-step autoreset), so they are
never trained on either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def clip_rewards(rewards: np.ndarray, clip: bool | float) -> np.ndarray:
    """``training.clip_rewards``: the sign of each reward (``True``) or the rewards clipped to [-clip, clip].

    The sign is Mnih et al. 2015's clipping for Atari (every game's rewards are
    integers, so it is the same as clipping to [-1, 1] there) and what SB3's and
    CleanRL's ``ClipRewardEnv`` do; a number is RLlib's float form of the key.
    """
    if clip is True:
        return np.sign(rewards).astype(np.float32)
    return np.clip(rewards, -float(clip), float(clip)).astype(np.float32)


#: Attributes of a postprocess function that the sampler reads (see rlgear.sampling.sampler).
POSTPROCESS_ATTRIBUTES = ("window_columns", "makes_own_sequences")


class ClippedRewardsPostprocess:
    """The algorithm's ``postprocess`` run on a fragment whose rewards are clipped (``training.clip_rewards``).

    Why here and not in an env wrapper: the rewards the algorithm learns from are
    clipped for every algorithm and every env adapter alike (envpool's pools
    included, which take no gymnasium wrappers), while the episode returns the run
    reports stay the env's own, since the sampler sums them before postprocessing.
    Picklable: remote workers get it as the plain postprocess function.
    """

    def __init__(self, postprocess: Callable[..., SampleBatch], clip: bool | float):
        self.postprocess = postprocess
        self.clip = clip
        for name in POSTPROCESS_ATTRIBUTES:  # what the sampler asks of the function it wraps
            if hasattr(postprocess, name):
                setattr(self, name, getattr(postprocess, name))

    def __call__(self, fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
        out = SampleBatch(fragment)
        out[SampleBatch.REWARDS] = clip_rewards(np.asarray(fragment[SampleBatch.REWARDS]), self.clip)
        return self.postprocess(out, policy, config)


def with_clipped_rewards(postprocess: Callable[..., Any], config: Any) -> Callable[..., Any]:
    """``postprocess`` as is unless ``training.clip_rewards`` is set (true or a number), else wrapped."""
    clip = getattr(config.training, "clip_rewards", None)
    if clip is None or clip is False:
        return postprocess
    return ClippedRewardsPostprocess(postprocess, clip)
