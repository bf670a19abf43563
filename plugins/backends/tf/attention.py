"""The catalog attention-memory actor-critic on TensorFlow (``model.attention``), the torch twin.

Same blocks, state layout and neutral weight names as
:mod:`rlgear.plugins.backends.torch.attention` (documented in :mod:`rlgear.blocks.attention_memory`),
so a torch checkpoint acts identically here. Variables hold the neutral layout as is (kernels
``[in, out]``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.blocks.attention_memory import GATE_BIAS_INIT, LAYER_NORM_EPSILON, check_action_space, mlp_dim
from rlgear.plugins.backends.tf.models import ConvEncoder, Dense, DenseStack, orthogonal
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Discrete, Space

#: Logit of a masked (not allowed) key: its softmax weight is exactly 0 in float32.
MASKED_LOGIT = -1e9

Named = list[tuple[str, tf.Variable]]


def _kernel(rng: np.random.Generator, in_dim: int, out_dim: int, name: str) -> tf.Variable:
    return tf.Variable(orthogonal(rng, in_dim, out_dim, 1.0), name=name)


def attention_mask(
    memory_mask: tf.Tensor, resets: tf.Tensor | None, length: int
) -> tuple[tf.Tensor, np.ndarray, tf.Tensor]:
    """As the torch ``attention_mask``: ``allowed`` ``[N, L, M+L]``, ``distance`` ``[L, M+L]`` (numpy:
    it depends on the static sizes only) and the memory mask after the last step ``[N, M]``."""
    memory = int(memory_mask.shape[1])
    back = (memory + np.arange(length))[:, None] - np.arange(memory + length)[None, :]
    window = tf.constant((back >= 0) & (back <= memory))
    n = tf.shape(memory_mask)[0]
    valid = tf.concat([memory_mask > 0.5, tf.ones([n, length], tf.bool)], axis=1)
    if resets is None:
        episode = tf.zeros([n, memory + length], tf.int32)
    else:
        started = tf.cumsum(tf.cast(resets, tf.int32), axis=1)
        episode = tf.concat([tf.zeros([n, memory], tf.int32), started], axis=1)
    same = tf.equal(episode[:, None, :], episode[:, memory:, None])
    allowed = window[None] & valid[:, None, :] & same
    new_mask = tf.cast((valid & tf.equal(episode, episode[:, -1:]))[:, -memory:], memory_mask.dtype)
    return allowed, np.clip(back, 0, memory), new_mask


class LayerNorm(tf.Module):
    """Layer normalisation over the last axis, ``scale`` and ``offset`` (torch's ``nn.LayerNorm``)."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = tf.Variable(np.ones(dim, np.float32), name="scale")
        self.offset = tf.Variable(np.zeros(dim, np.float32), name="offset")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * self.scale + self.offset

    def named(self, prefix: str) -> Named:
        return [(f"{prefix}/scale", self.scale), (f"{prefix}/offset", self.offset)]


class GRUGate(tf.Module):
    """GTrXL's GRU-type gating of a residual (the torch ``GRUGate``'s formula and names)."""

    def __init__(self, dim: int, rng: np.random.Generator):
        super().__init__()
        self.input_kernel = _kernel(rng, dim, 3 * dim, "input_kernel")  # W_r, W_z, W_g (on y)
        self.state_kernel = _kernel(rng, dim, 2 * dim, "state_kernel")  # U_r, U_z (on x)
        self.candidate_kernel = _kernel(rng, dim, dim, "candidate_kernel")  # U_g (on r * x)
        self.bias = tf.Variable(np.full(dim, GATE_BIAS_INIT, np.float32), name="bias")

    def __call__(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        dim = x.shape[-1]
        wy, ux = tf.matmul(y, self.input_kernel), tf.matmul(x, self.state_kernel)
        r = tf.sigmoid(wy[..., :dim] + ux[..., :dim])
        z = tf.sigmoid(wy[..., dim : 2 * dim] + ux[..., dim:] - self.bias)
        h = tf.tanh(wy[..., 2 * dim :] + tf.matmul(r * x, self.candidate_kernel))
        return x + z * (h - x)

    def named(self, prefix: str) -> Named:
        return [
            (f"{prefix}/input_kernel", self.input_kernel),
            (f"{prefix}/state_kernel", self.state_kernel),
            (f"{prefix}/candidate_kernel", self.candidate_kernel),
            (f"{prefix}/bias", self.bias),
        ]


class GatedTransformerBlock(tf.Module):
    """One GTrXL block over ``[N, L, dim]`` steps with that block's memory ``[N, M, dim]``."""

    def __init__(self, dim: int, heads: int, hidden: int, memory: int, rng: np.random.Generator):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm_attn = LayerNorm(dim)
        self.query = _kernel(rng, dim, dim, "query")
        self.key = _kernel(rng, dim, dim, "key")
        self.value = _kernel(rng, dim, dim, "value")
        self.output = _kernel(rng, dim, dim, "output")
        self.distance_bias = tf.Variable(np.zeros((heads, memory + 1), np.float32), name="distance_bias")
        self.gate_attn = GRUGate(dim, rng)
        self.norm_mlp = LayerNorm(dim)
        self.mlp_0 = Dense(dim, hidden, 1.0, rng)
        self.mlp_1 = Dense(hidden, dim, 1.0, rng)
        self.gate_mlp = GRUGate(dim, rng)

    def __call__(
        self, x: tf.Tensor, memory: tf.Tensor, allowed: tf.Tensor, distance: np.ndarray
    ) -> tf.Tensor:
        length, dim = x.shape[1], x.shape[2]
        normed = self.norm_attn(tf.concat([memory, x], axis=1))  # keys and values: memory, then the steps
        n = tf.shape(x)[0]

        def split(t: tf.Tensor) -> tf.Tensor:  # [N, K, dim] -> [N, heads, K, head_dim]
            return tf.transpose(tf.reshape(t, [n, -1, self.heads, self.head_dim]), [0, 2, 1, 3])

        q = split(tf.einsum("nkd,de->nke", normed[:, -length:], self.query))
        k = split(tf.einsum("nkd,de->nke", normed, self.key))
        v = split(tf.einsum("nkd,de->nke", normed, self.value))
        logits = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.head_dim)
        logits += tf.gather(self.distance_bias, distance, axis=1)  # [heads, L, M+L]
        weights = tf.nn.softmax(tf.where(allowed[:, None], logits, MASKED_LOGIT), axis=-1)
        attended = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]), [n, length, dim])
        y = self.gate_attn(x, tf.nn.relu(tf.einsum("nkd,de->nke", attended, self.output)))
        hidden = self.mlp_1(tf.nn.relu(self.mlp_0(self.norm_mlp(y))))
        return self.gate_mlp(y, tf.nn.relu(hidden))

    def named(self, prefix: str) -> Named:
        """In the order of the torch block's ``named_parameters()``."""
        out = self.norm_attn.named(f"{prefix}/norm_attn")
        out += [
            (f"{prefix}/attn/{part}/kernel", getattr(self, part))
            for part in ("query", "key", "value", "output")
        ]
        out += [(f"{prefix}/attn/distance_bias", self.distance_bias)]
        out += self.gate_attn.named(f"{prefix}/gate_attn") + self.norm_mlp.named(f"{prefix}/norm_mlp")
        out += self.mlp_0.named(f"{prefix}/mlp_0") + self.mlp_1.named(f"{prefix}/mlp_1")
        return out + self.gate_mlp.named(f"{prefix}/gate_mlp")


class AttentionActorCritic(tf.Module):
    """[conv trunk ->] MLP trunk -> projection -> GTrXL blocks -> policy and value heads; the torch
    ``AttentionActorCritic``'s twin (same call, same state ``[memory, mask]``)."""

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
        check_action_space(action_space)
        self.encoder = encoder
        if encoder is not None:
            obs_dim = encoder.output_dim
        sizes = list(model_config.hidden_sizes)
        ortho = model_config.orthogonal_init
        self.continuous = not isinstance(action_space, Discrete)
        self.dim = int(model_config.attention_dim)
        self.memory = int(model_config.attention_memory)
        self.shared_body = DenseStack(
            obs_dim, sizes, model_config.activation, math.sqrt(2) if ortho else None, rng
        )
        self.attention_input = Dense(sizes[-1], self.dim, 1.0, rng)
        self.blocks = [
            GatedTransformerBlock(
                self.dim, int(model_config.attention_heads), mlp_dim(model_config), self.memory, rng
            )
            for _ in range(int(model_config.attention_layers))
        ]
        head_outputs = num_outputs // 2 if self.continuous else num_outputs
        self.policy_output = Dense(self.dim, head_outputs, 0.01 if ortho else None, rng)
        self.value_output = Dense(self.dim, 1, 1.0 if ortho else None, rng)
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
        features = self.shared_body(obs if self.encoder is None else self.encoder(obs))
        x = tf.reshape(self.attention_input(features), [-1, seq_len, self.dim])
        n = tf.shape(x)[0]
        memory = tf.reshape(state[0], [n, len(self.blocks), self.memory, self.dim])
        allowed, distance, new_mask = attention_mask(
            state[1], None if resets is None else tf.reshape(resets, [-1, seq_len]), seq_len
        )
        new_memory = []
        for index, block in enumerate(self.blocks):
            new_memory.append(tf.concat([memory[:, index], x], axis=1)[:, -self.memory :])
            x = block(x, memory[:, index], allowed, distance)
        outputs = tf.reshape(x, [-1, self.dim])
        logits = self.policy_output(outputs)
        values = self.value_output(outputs)[:, 0]
        if self.continuous:
            logits = tf.concat([logits, tf.broadcast_to(self.log_std, tf.shape(logits))], axis=-1)
        return logits, values, [tf.reshape(tf.stack(new_memory, axis=1), [n, -1]), new_mask]

    def named_variables(self) -> Named:
        """Neutral names in the order of the torch model's ``named_parameters()``."""
        out = [("policy/log_std", self.log_std)] if self.continuous else []
        if self.encoder is not None:
            out += self.encoder.named("shared")
        out += self.shared_body.named("shared") + self.attention_input.named("attention/input")
        for index, block in enumerate(self.blocks):
            out += block.named(f"attention/block_{index}")
        out += self.policy_output.named("policy/output") + self.value_output.named("value/output")
        return out
