"""Acting with the catalog LSTM actor-critic in numpy, from framework-neutral weights.

Why: as for the MLP (:mod:`rlgear.blocks.inference`), acting on a handful of
observations per step is dominated by a framework's per-op dispatch; one LSTM
step in numpy is a few matmuls. Learning always runs in the framework.

The network (both backends build the same one; names are framework-neutral):
  * ``shared/conv_<i>``: for image observations (or an image-plus-vector layout), the
    conv trunk of :mod:`rlgear.config.conv` (in numpy: :mod:`rlgear.blocks.conv_inference`);
  * ``shared/hidden_<i>``: the MLP trunk (``model.hidden_sizes``, ``model.activation``);
  * the LSTM input: the trunk's output, then the previous action (one-hot for
    Discrete; ``lstm_use_prev_action``), then the previous reward (``lstm_use_prev_reward``);
  * ``lstm/kernel`` ``[in, 4*cell]``, ``lstm/recurrent_kernel`` ``[cell, 4*cell]``,
    ``lstm/bias`` ``[4*cell]``, gates in the order i, f, g, o (torch's and Keras's)::

        i, f, g, o = split(x @ kernel + h @ recurrent_kernel + bias)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')

  * ``policy/output`` and ``value/output`` on ``h'``; ``policy/log_std`` for Box actions.
"""

from __future__ import annotations

import numpy as np

from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.blocks.inference import NumpyActorCritic
from rlgear.config.conv import ConvSpec
from rlgear.errors import ConfigError
from rlgear.spaces import Box, Discrete, Space


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # stable for large |x|, one ufunc more than 1/(1+exp(-x))


def prev_action_features(action_space: Space, prev_actions: np.ndarray) -> np.ndarray:
    """``[B, k]`` float32: one-hot previous actions for Discrete, the raw action for Box."""
    if isinstance(action_space, Discrete):
        actions = np.asarray(prev_actions, dtype=np.int64).reshape(-1)
        out = np.zeros((actions.shape[0], action_space.n), dtype=np.float32)
        out[np.arange(actions.shape[0]), actions] = 1.0
        return out
    actions = np.asarray(prev_actions, dtype=np.float32)
    return actions.reshape(actions.shape[0], -1)


def lstm_input_size(trunk_size: int, action_space: Space, model_config: object) -> int:
    """Width of the LSTM's input: trunk features, then previous action and reward when configured.

    Also where both backends' LSTM models check the action space: they have one Categorical or
    Gaussian head, so MultiDiscrete and Tuple/Dict actions are refused here, by name, instead of
    getting a head of the wrong width (a MultiDiscrete model used to be built as a Gaussian).
    """
    if not isinstance(action_space, Discrete | Box):
        raise ConfigError(
            f"model.lstm: recurrent policies act in Discrete or Box action spaces, the env's is "
            f"{action_space!r} (use a feed-forward model, model.lstm: false)"
        )
    size = trunk_size
    if getattr(model_config, "lstm_use_prev_action", False):
        size += action_space.n if isinstance(action_space, Discrete) else action_space.size
    if getattr(model_config, "lstm_use_prev_reward", False):
        size += 1
    return size


class NumpyLSTMActorCritic(NumpyActorCritic):
    """One step of the catalog LSTM actor-critic: forward, sampling and log-probabilities.

    Sampling (inverse-CDF Categorical, Gaussian) is the MLP twin's, on ``self.rng``.
    """

    def __init__(
        self, action_space: Space, model_config: object, seed: int | None = None, conv: ConvSpec | None = None
    ):
        super().__init__(action_space, 0, model_config.activation, True, seed)
        self.conv = None if conv is None else NumpyConvTrunk(conv)
        self.action_space = action_space
        self.hidden_layers = len(model_config.hidden_sizes)
        self.use_prev_action = bool(model_config.lstm_use_prev_action)
        self.use_prev_reward = bool(model_config.lstm_use_prev_reward)

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Take new weights. The LSTM's input and recurrent kernels and its bias are stacked into
        one ``[in + cell + 1, 4*cell]`` matrix, so the gates are one matmul of ``[x, h, 1]``."""

        def f32(name: str) -> np.ndarray:
            return np.asarray(weights[name], dtype=np.float32)

        self.trunk = [
            (f32(f"shared/hidden_{i}/kernel"), f32(f"shared/hidden_{i}/bias"))
            for i in range(self.hidden_layers)
        ]
        self.gates = np.ascontiguousarray(
            np.vstack([f32("lstm/kernel"), f32("lstm/recurrent_kernel"), f32("lstm/bias")[None, :]])
        )
        self.cell = f32("lstm/recurrent_kernel").shape[0]
        self.head = (
            np.ascontiguousarray(
                np.concatenate([f32("policy/output/kernel"), f32("value/output/kernel")], 1)
            ),
            np.concatenate([f32("policy/output/bias"), f32("value/output/bias")]),
        )
        self.num_head_outputs = f32("policy/output/bias").shape[0]
        self.log_std = None if self.discrete else f32("policy/log_std")
        if self.conv is not None:
            self.conv.load(weights)
        self.version = version

    def forward(  # type: ignore[override]  # the MLP's forward plus the recurrent state
        self,
        obs: np.ndarray,
        state: list[np.ndarray],
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(policy head output, values, [h', c'])`` for flat float32 observations ``[B, F]``."""
        x = obs
        if self.conv is not None:
            x = self.conv.forward(obs, np.empty((obs.shape[0], self.conv.spec.output_dim), np.float32))
        for kernel, bias in self.trunk:
            x = self.activation(x @ kernel + bias, np.empty((x.shape[0], kernel.shape[1]), np.float32))
        h, c = state
        parts = [x]
        if self.use_prev_action:
            parts.append(prev_action_features(self.action_space, prev_actions))
        if self.use_prev_reward:
            parts.append(np.asarray(prev_rewards, np.float32).reshape(-1, 1))
        parts += [h, np.ones((x.shape[0], 1), np.float32)]
        z = np.concatenate(parts, axis=1) @ self.gates
        cell = self.cell
        sig = _sigmoid(z)
        c_new = sig[:, cell : 2 * cell] * c + sig[:, :cell] * np.tanh(z[:, 2 * cell : 3 * cell])
        h_new = sig[:, 3 * cell :] * np.tanh(c_new)
        out = h_new @ self.head[0] + self.head[1]
        return out[:, : self.num_head_outputs], out[:, self.num_head_outputs], [h_new, c_new]

    def act(  # type: ignore[override]
        self,
        obs: np.ndarray,
        state: list[np.ndarray],
        explore: bool,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(actions, action_logp, values, new_state)``, as the framework would give
        (``action_mask`` as in :meth:`NumpyActorCritic.act`)."""
        head, values, new_state = self.forward(obs, state, prev_actions, prev_rewards)
        actions, logp, values = self.sample(head, values, explore, action_mask)
        return actions, logp, values, new_state
