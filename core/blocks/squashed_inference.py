"""Acting with the off-policy continuous actors (SAC, TD3, DDPG) in numpy, from framework-neutral weights.

Why: as for :mod:`rlgear.blocks.inference`, acting is a handful of observations
through a small MLP, where a framework's per-op dispatch costs more than the
arithmetic. SAC, TD3 and DDPG act once per env step, so the twin matters most here.

The actor is ``policy/hidden_<i>`` (kernels ``[in, out]``) then ``policy/output``.
Its output is squashed by tanh into ``[-1, 1]``; the policy rescales that to the
Box bounds. With ``gaussian`` (SAC) the output is the means then the log standard
deviations of a Gaussian over the pre-tanh action (Haarnoja et al. 2018, appendix C):
exploring samples it, greedy acting takes ``tanh(mean)``. Without (TD3, DDPG) the
output is the deterministic pre-tanh action; exploration noise is the caller's.
"""

from __future__ import annotations

import numpy as np

from rlgear.blocks.inference import ACTIVATIONS, _with_bias_row
from rlgear.spaces import Box, Space

#: SAC's log-std clip (as Stable-Baselines3 and Haarnoja et al.'s code): keeps exp(log_std) finite.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def box_action_count(policy_name: str, action_space: Space) -> int:
    """The size of a bounded one-dimensional Box (the continuous actors' action space); raises otherwise."""
    if not isinstance(action_space, Box) or not action_space.bounded or len(action_space.shape) != 1:
        raise TypeError(
            f"{policy_name} needs a bounded one-dimensional Box action space, got {action_space!r}"
        )
    return action_space.size


def action_bounds(action_space: Space) -> tuple[np.ndarray, np.ndarray]:
    """A Box's bounds as float32 (empty for a Discrete space: its actions are indices, never rescaled)."""
    if not isinstance(action_space, Box):
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    return action_space.low.astype(np.float32), action_space.high.astype(np.float32)


class NumpyTanhActor:
    """Forward pass and (SAC) sampling of the tanh-squashed actor MLP."""

    def __init__(self, hidden_layers: int, activation: str, gaussian: bool, seed: int | None = None):
        self.hidden_layers = hidden_layers
        self.activation = ACTIVATIONS[activation]
        self.gaussian = gaussian
        self.rng = np.random.default_rng(seed)
        self.version = -1
        self._kernels: list[np.ndarray] = []  # hidden layers then output, each with its bias as last row
        self._inputs: list[np.ndarray] = []  # per layer, [B, in + 1] with a last column of ones

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Take new weights (only the ``policy/`` ones are read)."""
        names = [f"policy/hidden_{i}" for i in range(self.hidden_layers)] + ["policy/output"]
        self._kernels = [_with_bias_row(weights[f"{n}/kernel"], weights[f"{n}/bias"]) for n in names]
        self._inputs = []
        self.version = version

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """The output layer (pre-tanh actions, or means then log stds) for flat observations ``[B, F]``."""
        if not self._inputs or self._inputs[0].shape[0] != obs.shape[0]:
            self._inputs = [np.ones((obs.shape[0], k.shape[0]), dtype=np.float32) for k in self._kernels]
        inputs = self._inputs
        inputs[0][:, :-1] = obs
        for kernel, x, following in zip(self._kernels, inputs, inputs[1:], strict=False):
            self.activation(x @ kernel, following[:, :-1])
        return inputs[-1] @ self._kernels[-1]

    def last_hidden(self) -> np.ndarray:
        """``[B, F]``: the last hidden layer's activations of the latest :meth:`forward` (gSDE's features)."""
        return self._inputs[-1][:, :-1]

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions in ``[-1, 1]``, ``[B, A]`` float32: tanh of a Gaussian sample (SAC exploring), else tanh
        of the mean (or of the deterministic output)."""
        out = self.forward(obs)
        if not self.gaussian:
            return np.tanh(out)
        num_actions = out.shape[1] // 2
        mean = out[:, :num_actions]
        if not explore:
            return np.tanh(mean)
        log_std = np.clip(out[:, num_actions:], LOG_STD_MIN, LOG_STD_MAX)
        noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        return np.tanh(mean + np.exp(log_std) * noise)
