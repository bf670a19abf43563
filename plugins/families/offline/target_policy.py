"""The learner policy as off-policy estimators need it: probabilities of given actions, numpy out.

Off-policy estimates weigh the data's actions by ``pi_e(a|s)`` (importance sampling) and need the
whole distribution ``pi_e(.|s)`` over discrete actions (fitted Q evaluation's ``sum_a pi_e(a|s)
Q(s, a)``). Every backend's policy gives its action distribution's inputs for a batch of model
inputs (``action_distribution_inputs``: logits for Discrete, means then log stds for Box, as
:mod:`rlgear.plugins.backends.torch.distributions` lays them out), and the rest is computed here in
numpy, so the same code serves torch, tf and the numpy twins. What is evaluated is the policy's
stochastic action distribution (as RLlib's estimators do), not the greedy policy of evaluation
episodes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.spaces import Box, Discrete, Space

_LOG_2PI = math.log(2.0 * math.pi)


def discrete_log_probs(logits: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
    """float64 ``log pi(.|s)`` ``[N, n]`` of unnormalised ``logits``; masked actions get ``-inf``."""
    logits = np.asarray(logits, np.float64)
    if action_mask is not None:
        logits = np.where(action_mask, logits, -np.inf)
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def gaussian_logp(dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """float64 ``log pi(a|s)`` ``[N]`` of a diagonal Gaussian with inputs ``[N, 2 * d]`` (means, log stds)."""
    mean, log_std = np.split(np.asarray(dist_inputs, np.float64), 2, axis=-1)
    z = (np.asarray(actions, np.float64).reshape(mean.shape) - mean) / np.exp(log_std)
    return np.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, axis=-1)


class TargetPolicy:
    """``pi_e`` of a learner policy with Discrete or Box actions (other spaces: :meth:`supports`)."""

    def __init__(self, policy: Any, action_space: Space):
        if not self.supports(action_space):
            raise TypeError(f"off-policy estimates need Discrete or Box actions, not {action_space!r}")
        self.policy = policy
        self.discrete = isinstance(action_space, Discrete)

    @staticmethod
    def supports(action_space: Space) -> bool:
        return isinstance(action_space, Discrete | Box)

    def log_probs(self, features: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        """``log pi_e(.|s)`` ``[N, n]`` over all actions (Discrete only)."""
        if not self.discrete:
            raise TypeError("a distribution over all actions needs Discrete actions")
        return discrete_log_probs(self.policy.action_distribution_inputs(features), action_mask)

    def logp(
        self, features: np.ndarray, actions: np.ndarray, action_mask: np.ndarray | None = None
    ) -> np.ndarray:
        """``log pi_e(a_t|s_t)`` ``[N]`` of the given actions."""
        if self.discrete:
            table = self.log_probs(features, action_mask)
            return np.take_along_axis(table, np.asarray(actions, np.int64).reshape(-1, 1), axis=-1)[:, 0]
        return gaussian_logp(self.policy.action_distribution_inputs(features), actions)
