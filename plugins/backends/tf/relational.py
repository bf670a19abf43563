"""The relational module on TF (``model.relational``): the torch module's twin, same neutral names.

Self-attention over entities with pre-LN blocks, then a max over present entities (Zambaldi et al.
2018; see :mod:`rlgear.plugins.backends.torch.relational` and, for entities, masking and names,
:mod:`rlgear.blocks.relational`). Variables are listed in the torch module's parameter order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.blocks.relational import cell_coordinates, entity_layout, mlp_dim, num_weight_blocks
from rlgear.plugins.backends.tf.attention import LayerNorm
from rlgear.plugins.backends.tf.models import ConvEncoder, Dense
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Space

Named = list[tuple[str, tf.Variable]]

#: Attention logits of absent keys (finite: a set with no entity present stays NaN-free).
MASKED_LOGIT = -1e9


class RelationalBlock(tf.Module):
    """One pre-LN transformer block over entities: masked multi-head attention, then a ReLU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int, gain: float | None, rng: np.random.Generator):
        super().__init__()
        self.heads = heads
        self.norm_attention = LayerNorm(dim)
        self.query = Dense(dim, dim, gain, rng)
        self.key = Dense(dim, dim, gain, rng)
        self.value = Dense(dim, dim, gain, rng)
        self.output = Dense(dim, dim, gain, rng)
        self.norm_mlp = LayerNorm(dim)
        self.mlp_0 = Dense(dim, hidden, gain, rng)
        self.mlp_1 = Dense(hidden, dim, gain, rng)

    def __call__(self, x: tf.Tensor, present: tf.Tensor | None) -> tf.Tensor:
        """``x`` ``[B, N, D]``; ``present`` ``[B, N]`` bool (None: every entity present)."""
        shape = tf.shape(x)
        dim = x.shape[-1]
        head_dim = dim // self.heads
        h = self.norm_attention(x)

        def split(t: tf.Tensor) -> tf.Tensor:  # [B, N, D] -> [B, heads, N, head_dim]
            return tf.transpose(tf.reshape(t, [shape[0], shape[1], self.heads, head_dim]), [0, 2, 1, 3])

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        logits = tf.matmul(q, k, transpose_b=True) / math.sqrt(head_dim)
        if present is not None:
            logits = tf.where(present[:, None, None, :], logits, MASKED_LOGIT)
        attended = tf.transpose(tf.matmul(tf.nn.softmax(logits, axis=-1), v), [0, 2, 1, 3])
        x = x + self.output(tf.reshape(attended, shape))
        return x + self.mlp_1(tf.nn.relu(self.mlp_0(self.norm_mlp(x))))

    def named(self, prefix: str) -> Named:
        out = self.norm_attention.named(f"{prefix}/norm_attention")
        for layer in ("query", "key", "value", "output"):
            out += getattr(self, layer).named(f"{prefix}/attention/{layer}")
        out += self.norm_mlp.named(f"{prefix}/norm_mlp")
        return out + self.mlp_0.named(f"{prefix}/mlp_0") + self.mlp_1.named(f"{prefix}/mlp_1")


class RelationalEncoder(tf.Module):
    """Flat observations -> entities -> projection -> blocks -> max over present entities ``[B, dim]``."""

    def __init__(self, observation_space: Space, model_config: Any, rng: np.random.Generator):
        super().__init__()
        layout = entity_layout(observation_space, model_config)
        ortho = bool(model_config.orthogonal_init)
        gain = 1.0 if ortho else None
        dim = int(model_config.relational_dim)
        self.num_entities, self.features = layout.num_entities, layout.features
        self.conv = None if layout.conv is None else ConvEncoder(layout.conv, ortho, rng)
        if layout.conv is not None:
            height, width, _ = layout.conv.output_shape
            self.coordinates = tf.constant(cell_coordinates(height, width))
        self.input = Dense(layout.features, dim, gain, rng)
        self.blocks = [
            RelationalBlock(dim, int(model_config.relational_heads), mlp_dim(model_config), gain, rng)
            for _ in range(num_weight_blocks(model_config))
        ]
        self.repeats = int(model_config.relational_blocks)
        self.output_dim = dim

    @staticmethod
    def present_entities(entities: tf.Tensor) -> tf.Tensor:
        """``[B, N]`` bool: the rows that are not all zero (absent entities are zero rows)."""
        return tf.reduce_any(tf.not_equal(entities, 0.0), axis=-1)

    def entities(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
        """``([B, N, F] entities, [B, N] present or None)`` of flat observations."""
        if self.conv is None:
            entities = tf.reshape(obs, [-1, self.num_entities, self.features])
            return entities, self.present_entities(entities)
        cells = self.conv.feature_map(obs)
        cells = tf.reshape(cells, [tf.shape(cells)[0], self.num_entities, cells.shape[-1]])
        coordinates = tf.broadcast_to(self.coordinates, [tf.shape(cells)[0], self.num_entities, 2])
        return tf.concat([cells, coordinates], axis=-1), None

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        entities, present = self.entities(obs)
        x = self.input(entities)
        for i in range(self.repeats):
            x = self.blocks[0 if len(self.blocks) == 1 else i](x, present)
        if present is None:
            return tf.reduce_max(x, axis=1)
        pooled = tf.reduce_max(tf.where(present[..., None], x, -math.inf), axis=1)
        return tf.where(tf.reduce_any(present, axis=1, keepdims=True), pooled, tf.zeros_like(pooled))

    def named(self, prefix: str) -> Named:
        out = [] if self.conv is None else self.conv.named(prefix)
        out += self.input.named("relational/input")
        for i, block in enumerate(self.blocks):
            out += block.named(f"relational/block_{i}")
        return out
