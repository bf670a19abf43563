"""The sampling side of an exploration plugin: the algorithm's postprocessing, wrapped.

On the evaluator (so remote workers do it too), for a time-major ``[T+1, B]`` fragment:

1. the raw intrinsic reward of each transition ``t < T`` is
   ``module.intrinsic_rewards(obs[t], actions[t], obs[t+1])``, 0 on LAST rows (their action was
   ignored by the env; ``obs[t+1]`` is the next episode's first observation);
2. the running non-episodic discounted intrinsic return ``R[t] = intrinsic_gamma * R[t-1] + r[t]``
   (from 0 at each fragment's first row; Burda et al. 2018's reward forward filter) goes in a
   column, for the learner's running std of it, and the rewards used are ``r / module.reward_scale()``;
3. *reward mode*: ``rewards[t+1] += intrinsic_coeff * r[t] / scale`` (ALF layout: ``rewards[t+1]``
   is the reward of the action at ``t``), then the algorithm's postprocessing;
   *value mode*: intrinsic advantages by GAE over the module's intrinsic values with
   ``intrinsic_gamma``, NON-episodic (returns flow through episode ends, Burda sec. 2.3; the LAST
   row's fake transition into the next episode is skipped), then the algorithm's postprocessing,
   then ``advantages = extrinsic_coeff * A_ext + intrinsic_coeff * A_int``.

Extra columns ride on the fragment, so the algorithm's postprocessing (which carries every other
column from row ``t``: :func:`~rlgear.sampling.postprocessing.trainable_rows`,
:func:`~rlgear.blocks.replay_buffers.n_step_transitions`) hands them to the learner, which trains
the module on them and drops them (:meth:`rlgear.learner.Learner.learn_exploration`). The env's
rewards reach the episode metrics before any of this, so episode returns stay extrinsic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear import exploration as xp
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import POSTPROCESS_ATTRIBUTES
from rlgear.timestep import StepType

Postprocess = Callable[[SampleBatch, Any, Any], SampleBatch]


def _flat(array: np.ndarray) -> np.ndarray:
    return array.reshape(array.shape[0] * array.shape[1], *array.shape[2:])


def forward_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``R[t] = gamma * R[t-1] + rewards[t]`` down the time axis of ``[T, B]``, from 0 (no episode resets)."""
    out = np.zeros(rewards.shape, np.float64)
    running = np.zeros(rewards.shape[1:], np.float64)
    for t in range(rewards.shape[0]):
        running = gamma * running + rewards[t]
        out[t] = running
    return out


def nonepisodic_gae(
    rewards: np.ndarray, values: np.ndarray, step_types: np.ndarray, gamma: float, gae_lambda: float
) -> np.ndarray:
    """Intrinsic GAE advantages ``[T, B]`` of a ``[T+1, B]`` fragment, through episode ends.

    ``rewards[t]`` is the intrinsic reward of the transition from row ``t`` (``[T, B]``; 0 on LAST
    rows), ``values`` ``[T+1, B]``. A LAST row is skipped: the row before it bootstraps from the
    value of the next episode's first row (``t + 2``), one discount apart, as if the episode went
    on; a LAST bootstrap row (row ``T``) gives its own value. LAST rows get 0 (never trained on).
    """
    num_steps = rewards.shape[0]
    is_last = np.asarray(step_types) == StepType.LAST
    advantages = np.zeros(values.shape, np.float64)  # row T: 0 (the bootstrap)
    columns = np.arange(values.shape[1])
    for t in range(num_steps - 1, -1, -1):
        nxt = np.full(values.shape[1], t + 1)
        if t + 1 < num_steps:
            nxt = np.where(is_last[t + 1], t + 2, nxt)
        next_values = values[nxt, columns]
        delta = rewards[t] + gamma * next_values - values[t]
        advantages[t] = np.where(is_last[t], 0.0, delta + gamma * gae_lambda * advantages[nxt, columns])
    return advantages[:num_steps]


class ExplorationPostprocess:
    """The algorithm's ``postprocess`` with an exploration plugin's intrinsic rewards (picklable:
    remote workers get it as the plain postprocess function they would get otherwise)."""

    def __init__(self, postprocess: Postprocess, mode: str):
        if mode not in (xp.REWARD_MODE, xp.VALUE_MODE):
            raise ValueError(
                f"exploration mode must be '{xp.REWARD_MODE}' or '{xp.VALUE_MODE}', got {mode!r}"
            )
        self.postprocess = postprocess
        self.mode = mode
        for name in POSTPROCESS_ATTRIBUTES:  # what the sampler asks of the function it wraps
            if hasattr(postprocess, name):
                setattr(self, name, getattr(postprocess, name))

    def __call__(self, fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
        module = policy.exploration_module
        options = config.exploration
        steps = np.asarray(fragment[SampleBatch.STEP_TYPES])
        num_steps, num_envs = steps.shape[0] - 1, steps.shape[1]
        obs, actions = fragment[SampleBatch.OBS], fragment[SampleBatch.ACTIONS]
        raw = module.intrinsic_rewards(_flat(obs[:-1]), _flat(actions[:-1]), _flat(obs[1:]))
        raw = np.where(
            steps[:-1] == StepType.LAST, 0.0, np.asarray(raw, np.float64).reshape(num_steps, num_envs)
        )
        scaled = raw / module.reward_scale()
        pad = np.zeros((1, num_envs), np.float32)
        out = SampleBatch(fragment)
        out[xp.NEXT_OBS] = np.concatenate([obs[1:], obs[-1:]])
        out[xp.INTRINSIC_REWARDS] = np.concatenate([raw.astype(np.float32), pad])
        returns = forward_returns(raw, options.intrinsic_gamma).astype(np.float32)
        out[xp.INTRINSIC_RETURNS] = np.concatenate([returns, pad])
        if self.mode == xp.REWARD_MODE:
            rewards = np.array(fragment[SampleBatch.REWARDS], dtype=np.float32)
            rewards[1:] += (options.intrinsic_coeff * scaled).astype(np.float32)
            out[SampleBatch.REWARDS] = rewards
            return self.postprocess(out, policy, config)
        values = np.asarray(module.intrinsic_values(_flat(obs)), np.float64).reshape(num_steps + 1, num_envs)
        advantages = nonepisodic_gae(
            scaled, values, steps, options.intrinsic_gamma, options.intrinsic_gae_lambda
        )
        out[xp.INTRINSIC_ADVANTAGES] = np.concatenate([advantages.astype(np.float32), pad])
        out[xp.INTRINSIC_VALUE_TARGETS] = np.concatenate([(advantages + values[:-1]).astype(np.float32), pad])
        rows = self.postprocess(out, policy, config)
        intrinsic = rows.pop(xp.INTRINSIC_ADVANTAGES)
        rows[SampleBatch.ADVANTAGES] = (
            options.extrinsic_coeff * rows[SampleBatch.ADVANTAGES] + options.intrinsic_coeff * intrinsic
        ).astype(np.float32)
        return rows


def wrap_postprocess(postprocess: Postprocess, config: Any, algorithm: str) -> Postprocess:
    """``postprocess`` as is without an exploration plugin, else wrapped in the plugin's mode."""
    name = config.exploration.name
    if name is None:
        return postprocess
    return ExplorationPostprocess(postprocess, xp.exploration_plugin(name).mode(algorithm))
