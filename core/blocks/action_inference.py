"""Actions from a network's distribution inputs, in numpy, for every action space the catalog acts in.

Why: the framework-free runtime (:mod:`rlgear.inference`) must choose actions as the
backends' distributions do (Categorical, DiagGaussian, MultiCategorical and the
Product of Tuple/Dict actions), without importing a framework. The layouts are the
backends' own:

* Discrete: logits ``[B, n]``; greedy is their argmax, disallowed actions (``mask``
  False) never chosen; sampling is Gumbel-max.
* Box: means then log standard deviations ``[B, 2 * size]``; greedy is the mean.
* MultiDiscrete: the parts' logits side by side ``[B, sum(nvec)]`` (the mask too);
  actions int64 ``[B, k]``.
* Tuple/Dict: the parts' inputs side by side, in layout order
  (:func:`rlgear.spaces.action_parts`); actions are flat float32 rows
  (:func:`rlgear.spaces.flatten_action`'s layout).
"""

from __future__ import annotations

import numpy as np

from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple, action_parts

_TINY = float(np.finfo(np.float32).tiny)


def required_inputs(space: Space) -> int:
    """Width of the distribution inputs for actions of ``space``."""
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, Box):
        return 2 * space.size
    if isinstance(space, MultiDiscrete):
        return sum(space.nvec)
    if isinstance(space, Tuple | Dict):
        return sum(required_inputs(part) for part in action_parts(space))
    raise TypeError(f"no action distribution for {space!r}")


def _categorical(
    logits: np.ndarray, mask: np.ndarray | None, explore: bool, rng: np.random.Generator
) -> np.ndarray:
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    if explore:  # Gumbel-max: argmax(logits + Gumbel noise) is a Categorical sample
        uniform = np.maximum(rng.random(logits.shape, dtype=np.float32), _TINY)
        logits = logits - np.log(-np.log(uniform))
    return np.argmax(logits, axis=-1).astype(np.int64)


def choose_actions(
    space: Space,
    inputs: np.ndarray,
    explore: bool,
    rng: np.random.Generator,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Actions ``[B, ...]`` for distribution inputs ``[B, required_inputs(space)]``: greedy (the argmax,
    the mean) unless ``explore``; ``mask`` (bool, Discrete and MultiDiscrete only) as the inputs."""
    if isinstance(space, Discrete):
        return _categorical(inputs, mask, explore, rng)
    if isinstance(space, MultiDiscrete):
        bounds = np.cumsum(space.nvec)[:-1]
        logits = np.split(inputs, bounds, axis=-1)
        masks = np.split(mask, bounds, axis=-1) if mask is not None else [None] * len(logits)
        return np.stack(
            [_categorical(x, m, explore, rng) for x, m in zip(logits, masks, strict=True)], axis=-1
        )
    if mask is not None:
        raise ValueError(f"an action mask needs Discrete or MultiDiscrete actions, not {space!r}")
    if isinstance(space, Box):
        mean, log_std = np.split(inputs, 2, axis=-1)
        if explore:
            mean = mean + np.exp(log_std) * rng.standard_normal(mean.shape, dtype=np.float32)
        return mean.astype(np.float32)
    if isinstance(space, Tuple | Dict):
        parts = action_parts(space)
        bounds = np.cumsum([required_inputs(part) for part in parts])[:-1]
        columns = [
            choose_actions(part, x, explore, rng).reshape(inputs.shape[0], -1).astype(np.float32)
            for part, x in zip(parts, np.split(inputs, bounds, axis=-1), strict=True)
        ]
        return np.concatenate(columns, axis=-1)
    raise TypeError(f"no action distribution for {space!r}")
