"""The catalog LSTM actor-critic on TensorFlow (``model.lstm``), the torch catalog's twin.

Network and framework-neutral names as documented in
:mod:`rlgear.blocks.lstm_inference`: ``shared/conv_<i>`` (images), ``shared/hidden_<i>``, ``lstm/kernel``
``[in, 4*cell]``, ``lstm/recurrent_kernel`` ``[cell, 4*cell]``, ``lstm/bias``
``[4*cell]`` (gates i, f, g, o, as torch and Keras order them), ``policy/output``,
``value/output`` (``policy/log_std`` for Box actions). The layer holds its own variables
(ours to name, in the neutral layout) and runs TF's fused ``BlockLSTM`` op over the whole
sequence; sequences with state resets inside (IMPALA's fixed-length sequences, reset at
FIRST rows) run a written-out loop of the same cell, where a reset is one multiply.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.blocks.lstm_inference import lstm_input_size
from rlgear.plugins.backends.tf.models import ConvEncoder, Dense, DenseStack, orthogonal
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Discrete, Space


class LSTMLayer(tf.Module):
    """One LSTM layer with ``[in, 4*cell]`` kernels (the neutral layout as is)."""

    def __init__(self, input_size: int, cell_size: int, rng: np.random.Generator):
        super().__init__()
        self.cell_size = cell_size
        recurrent = np.concatenate([orthogonal(rng, cell_size, cell_size, 1.0) for _ in range(4)], axis=1)
        bias = np.zeros(4 * cell_size, np.float32)
        bias[cell_size : 2 * cell_size] = 1.0  # forget-gate bias 1 (Jozefowicz et al. 2015), as on torch
        self.kernel = tf.Variable(orthogonal(rng, input_size, 4 * cell_size, 1.0), name="kernel")
        self.recurrent_kernel = tf.Variable(recurrent, name="recurrent_kernel")
        self.bias = tf.Variable(bias, name="bias")

    def __call__(
        self, inputs: tf.Tensor, state: tuple[tf.Tensor, tf.Tensor], resets: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """``inputs`` ``[N, L, in]`` (L static), ``state`` ``([N, cell], [N, cell])``, ``resets`` ``[N, L]``
        (True: zero the state before that step). Returns outputs ``[N, L, cell]`` and the last state."""
        h, c = state
        # Learning (sequences) runs the fused op; acting (one step) the loop: XLA, which compiles the
        # acting function, has no kernel for BlockLSTM, and one step has no loop to fuse.
        if resets is None and inputs.shape[1] > 1:
            return self._fused(inputs, h, c)
        cell = self.cell_size
        projected = tf.einsum("nli,ig->nlg", inputs, self.kernel) + self.bias
        outputs = []
        for t in range(inputs.shape[1]):
            if resets is not None:
                keep = 1.0 - tf.cast(resets[:, t], h.dtype)[:, None]
                h, c = h * keep, c * keep
            z = projected[:, t] + tf.matmul(h, self.recurrent_kernel)
            gates = tf.sigmoid(z)
            c = gates[:, cell : 2 * cell] * c + gates[:, :cell] * tf.tanh(z[:, 2 * cell : 3 * cell])
            h = gates[:, 3 * cell :] * tf.tanh(c)
            outputs.append(h)
        return tf.stack(outputs, axis=1), (h, c)

    def _fused(
        self, inputs: tf.Tensor, h: tf.Tensor, c: tf.Tensor
    ) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """The loop's math in one ``BlockLSTM`` op (and one ``BlockLSTMGrad`` in the backward pass).

        Why: the loop is about ten graph ops per step, each paying TF's per-op dispatch at the
        learner's small sizes; the fused op computed the same outputs and gradients (to float32
        rounding) in about two thirds of the time (8 sequences of 32 steps, 64 units, one
        thread). ``BlockLSTM`` orders the gates i, c (our g), f, o, so the columns are permuted
        in; ``forget_bias`` 0 and ``cell_clip`` -1 (no clipping) leave the plain cell. Not
        ``BlockLSTMV2`` (gates i, f, c, o, as ours): TF registers the V1 gradient for it, which
        reads the gates in the V1 order, and its weight gradients came out wrong.
        """
        cell = self.cell_size
        i, f, g, o = (slice(k * cell, (k + 1) * cell) for k in range(4))
        weights = tf.concat([self.kernel, self.recurrent_kernel], axis=0)  # [x, h] @ w, one matmul
        weights = tf.concat([weights[:, i], weights[:, g], weights[:, f], weights[:, o]], axis=1)
        bias = tf.concat([self.bias[i], self.bias[g], self.bias[f], self.bias[o]], axis=0)
        no_peephole = tf.zeros([cell], inputs.dtype)
        out = tf.raw_ops.BlockLSTM(
            seq_len_max=tf.constant(inputs.shape[1], tf.int64),
            x=tf.transpose(inputs, [1, 0, 2]),  # time-major
            cs_prev=c,
            h_prev=h,
            w=weights,
            wci=no_peephole,
            wcf=no_peephole,
            wco=no_peephole,
            b=bias,
            forget_bias=0.0,
            cell_clip=-1.0,
            use_peephole=False,
        )
        return tf.transpose(out.h, [1, 0, 2]), (out.h[-1], out.cs[-1])

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        return [
            (f"{prefix}/kernel", self.kernel),
            (f"{prefix}/recurrent_kernel", self.recurrent_kernel),
            (f"{prefix}/bias", self.bias),
        ]


class LSTMActorCritic(tf.Module):
    """[conv trunk ->] MLP trunk (shared) -> LSTM -> policy and value heads; the torch
    ``LSTMActorCritic``'s twin.

    ``__call__(obs, state, prev_actions, prev_rewards, seq_len, resets)``: rows are
    ``N`` sequences of ``seq_len`` steps, sequence-major; returns ``(dist_inputs, values, [h, c])``.
    """

    recurrent = True

    def __init__(
        self,
        obs_dim: int,
        num_outputs: int,
        action_space: Space,
        model_config: Any,
        rng: np.random.Generator,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        self.encoder = encoder
        if encoder is not None:
            obs_dim = encoder.output_dim
        sizes = list(model_config.hidden_sizes)
        ortho = model_config.orthogonal_init
        self.action_space = action_space
        self.continuous = not isinstance(action_space, Discrete)
        self.use_prev_action = bool(model_config.lstm_use_prev_action)
        self.use_prev_reward = bool(model_config.lstm_use_prev_reward)
        self.cell_size = int(model_config.lstm_cell_size)
        self.shared_body = DenseStack(
            obs_dim, sizes, model_config.activation, math.sqrt(2) if ortho else None, rng
        )
        trunk = sizes[-1] if sizes else obs_dim
        self.input_size = lstm_input_size(trunk, action_space, model_config)
        self.lstm = LSTMLayer(self.input_size, self.cell_size, rng)
        head_outputs = num_outputs // 2 if self.continuous else num_outputs
        self.policy_output = Dense(self.cell_size, head_outputs, 0.01 if ortho else None, rng)
        self.value_output = Dense(self.cell_size, 1, 1.0 if ortho else None, rng)
        if self.continuous:
            self.log_std = tf.Variable(
                np.full(head_outputs, float(model_config.init_log_std), dtype=np.float32), name="log_std"
            )

    def __call__(
        self,
        obs: tf.Tensor,
        state: list[tf.Tensor],
        prev_actions: tf.Tensor | None = None,
        prev_rewards: tf.Tensor | None = None,
        seq_len: int = 1,
        resets: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        parts = [self.shared_body(obs if self.encoder is None else self.encoder(obs))]
        if self.use_prev_action:
            if self.continuous:
                parts.append(tf.reshape(tf.cast(prev_actions, obs.dtype), [-1, self.action_space.size]))
            else:
                indices = tf.cast(tf.reshape(prev_actions, [-1]), tf.int32)
                parts.append(tf.one_hot(indices, self.action_space.n, dtype=obs.dtype))
        if self.use_prev_reward:
            parts.append(tf.reshape(tf.cast(prev_rewards, obs.dtype), [-1, 1]))
        features = tf.concat(parts, axis=-1) if len(parts) > 1 else parts[0]
        outputs, (h, c) = self.lstm(
            tf.reshape(features, [-1, seq_len, self.input_size]),
            (state[0], state[1]),
            None if resets is None else tf.reshape(resets, [-1, seq_len]),
        )
        outputs = tf.reshape(outputs, [-1, self.cell_size])
        logits = self.policy_output(outputs)
        values = self.value_output(outputs)[:, 0]
        if self.continuous:
            logits = tf.concat([logits, tf.broadcast_to(self.log_std, tf.shape(logits))], axis=-1)
        return logits, values, [h, c]

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        """Neutral names in the order of the torch model's ``named_parameters()``."""
        out = [("policy/log_std", self.log_std)] if self.continuous else []
        if self.encoder is not None:
            out += self.encoder.named("shared")
        out += self.shared_body.named("shared") + self.lstm.named("lstm")
        out += self.policy_output.named("policy/output") + self.value_output.named("value/output")
        return out
