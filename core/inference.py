"""Acting with the catalog MLP in numpy, from framework-neutral weights.

Why: acting is a batch of a few observations through a 64x64 network, where a
deep-learning framework spends most of its time in per-op dispatch, not in
arithmetic (in a profile of the torch evaluator, the forward pass cost more
than stepping 8 CartPoles). The same forward in numpy is several times faster, so
backends use this twin for ``compute_actions`` when the model is the built-in
actor-critic MLP, refreshing it from ``get_weights()`` after every update.
Learning always runs in the framework. Turn it off with
``model.numpy_inference: false``.

Weight names and layouts are the framework-neutral ones (see
``ActorCriticMLP``): ``policy/hidden_<i>/kernel`` ``[in, out]`` etc.
"""

from __future__ import annotations

import math

import numpy as np

from rlgear.spaces import Box, Discrete, Space

_LOG_2PI = math.log(2.0 * math.pi)


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "elu": _elu,
    "silu": _silu,
}


class NumpyActorCritic:
    """Forward pass, sampling and log-probabilities of the catalog actor-critic MLP."""

    def __init__(
        self,
        action_space: Space,
        hidden_layers: int,
        activation: str,
        shared: bool,
        seed: int | None = None,
    ):
        if not isinstance(action_space, Discrete | Box):
            raise TypeError(f"unsupported action space {action_space!r}")
        self.discrete = isinstance(action_space, Discrete)
        self.hidden_layers = hidden_layers
        self.activation = ACTIVATIONS[activation]
        self.shared = shared
        self.rng = np.random.default_rng(seed)
        self.layers: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.version = -1

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        def dense(prefix: str) -> tuple[np.ndarray, np.ndarray]:
            return (
                np.ascontiguousarray(weights[f"{prefix}/kernel"], dtype=np.float32),
                np.ascontiguousarray(weights[f"{prefix}/bias"], dtype=np.float32),
            )

        bodies = ["shared"] if self.shared else ["policy", "value"]
        self.layers = {b: [dense(f"{b}/hidden_{i}") for i in range(self.hidden_layers)] for b in bodies}
        self.policy_head = dense("policy/output")
        self.value_head = dense("value/output")
        self.log_std = None if self.discrete else np.asarray(weights["policy/log_std"], dtype=np.float32)
        self.version = version

    def _body(self, name: str, x: np.ndarray) -> np.ndarray:
        for kernel, bias in self.layers[name]:
            x = self.activation(x @ kernel + bias)
        return x

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(policy head output, values)`` for flat float32 observations ``[B, F]``."""
        if self.shared:
            hidden = self._body("shared", obs)
            policy_hidden = value_hidden = hidden
        else:
            policy_hidden, value_hidden = self._body("policy", obs), self._body("value", obs)
        head = policy_hidden @ self.policy_head[0] + self.policy_head[1]
        values = (value_hidden @ self.value_head[0] + self.value_head[1])[:, 0]
        return head, values

    def act(self, obs: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, action_logp, values)``, as the framework's distributions would give."""
        head, values = self.forward(obs)
        if self.discrete:
            shifted = head - head.max(axis=-1, keepdims=True)
            exp = np.exp(shifted)
            total = exp.sum(axis=-1, keepdims=True)
            rows = np.arange(head.shape[0])
            if explore:  # inverse-CDF sampling: one uniform per row
                cdf = np.cumsum(exp, axis=-1)
                u = self.rng.random(head.shape[0], dtype=np.float32)[:, None] * total
                actions = np.minimum((cdf < u).sum(axis=-1), head.shape[1] - 1)
            else:
                actions = np.argmax(head, axis=-1)
            logp = shifted[rows, actions] - np.log(total[:, 0])
            return actions.astype(np.int64), logp.astype(np.float32), values
        std = np.exp(self.log_std)
        if explore:
            noise = self.rng.standard_normal(head.shape, dtype=np.float32)
            actions = head + std * noise
        else:
            noise = np.zeros_like(head)
            actions = head
        logp = (-0.5 * noise * noise - self.log_std - 0.5 * _LOG_2PI).sum(axis=-1)
        return actions.astype(np.float32), logp.astype(np.float32), values

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        head, _ = self.forward(obs)
        if self.discrete:
            return head
        return np.concatenate([head, np.broadcast_to(self.log_std, head.shape)], axis=-1)
