"""The relational module on torch (``model.relational``): self-attention over entities, max-pooled.

Zambaldi et al. 2018, with layer normalization placed as in the later Transformer literature
(pre-LN, Xiong et al. 2020): ``x = x + MHDPA(LN(x))``, then ``x = x + MLP(LN(x))``. It is an
encoder in :class:`~rlgear.plugins.backends.torch.models.ActorCriticMLP`'s slot: its
``[B, relational_dim]`` output feeds the ``hidden_sizes`` MLP and the heads. Entities, masking and
the neutral weight names are fixed in :mod:`rlgear.blocks.relational`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlgear.blocks.relational import (
    LAYER_NORM_EPSILON,
    cell_coordinates,
    entity_layout,
    mlp_dim,
    num_weight_blocks,
)
from rlgear.plugins.backends.torch.models import ConvEncoder, _head
from rlgear.spaces import Space

#: Attention logits of absent keys: large enough that exp() is 0 in float32, finite so that a set
#: with no entity present gives uniform weights rather than NaN (its pooled output is zeroed anyway).
MASKED_LOGIT = -1e9


class RelationalBlock(nn.Module):
    """One pre-LN transformer block over entities: masked multi-head attention, then a ReLU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int, gain: float | None):
        super().__init__()
        self.heads = heads
        self.norm_attention = nn.LayerNorm(dim, eps=LAYER_NORM_EPSILON)
        self.query = _head(dim, dim, gain)
        self.key = _head(dim, dim, gain)
        self.value = _head(dim, dim, gain)
        self.output = _head(dim, dim, gain)
        self.norm_mlp = nn.LayerNorm(dim, eps=LAYER_NORM_EPSILON)
        self.mlp_0 = _head(dim, hidden, gain)
        self.mlp_1 = _head(hidden, dim, gain)

    def forward(self, x: torch.Tensor, present: torch.Tensor | None) -> torch.Tensor:
        """``x`` ``[B, N, D]``; ``present`` ``[B, N]`` bool (None: every entity present)."""
        batch, n, dim = x.shape
        head_dim = dim // self.heads
        h = self.norm_attention(x)

        def split(t: torch.Tensor) -> torch.Tensor:  # [B, N, D] -> [B, heads, N, head_dim]
            return t.reshape(batch, n, self.heads, head_dim).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        logits = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # [B, heads, N queries, N keys]
        if present is not None:
            logits = logits.masked_fill(~present[:, None, None, :], MASKED_LOGIT)
        attended = (torch.softmax(logits, dim=-1) @ v).transpose(1, 2).reshape(batch, n, dim)
        x = x + self.output(attended)
        return x + self.mlp_1(torch.relu(self.mlp_0(self.norm_mlp(x))))


class RelationalEncoder(nn.Module):
    """Flat observations -> entities -> projection -> blocks -> max over present entities ``[B, dim]``."""

    def __init__(self, observation_space: Space, model_config: Any):
        super().__init__()
        layout = entity_layout(observation_space, model_config)
        ortho = bool(model_config.orthogonal_init)
        gain = 1.0 if ortho else None
        dim = int(model_config.relational_dim)
        self.num_entities, self.features = layout.num_entities, layout.features
        self.conv = None if layout.conv is None else ConvEncoder(layout.conv, ortho)
        if layout.conv is not None:
            height, width, _ = layout.conv.output_shape
            self.register_buffer(
                "coordinates", torch.from_numpy(cell_coordinates(height, width)), persistent=False
            )
        self.input = _head(layout.features, dim, gain)
        self.blocks = nn.ModuleList(
            RelationalBlock(dim, int(model_config.relational_heads), mlp_dim(model_config), gain)
            for _ in range(num_weight_blocks(model_config))
        )
        self.repeats = int(model_config.relational_blocks)
        self.output_dim = dim

    def entities(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``([B, N, F] entities, [B, N] present or None)`` of flat observations."""
        if self.conv is None:
            entities = obs.reshape(obs.shape[0], self.num_entities, self.features)
            return entities, self.present_entities(entities)
        cells = self.conv.feature_map(obs)
        cells = cells.reshape(cells.shape[0], self.num_entities, -1)
        coordinates = self.coordinates.to(cells.dtype).expand(cells.shape[0], -1, -1)
        return torch.cat([cells, coordinates], dim=-1), None

    @staticmethod
    def present_entities(entities: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` bool: the rows that are not all zero (absent entities are zero rows)."""
        return entities.ne(0).any(dim=-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        entities, present = self.entities(obs)
        x = self.input(entities)
        for i in range(self.repeats):
            x = self.blocks[0 if len(self.blocks) == 1 else i](x, present)
        if present is None:
            return x.amax(dim=1)
        pooled = x.masked_fill(~present[..., None], -math.inf).amax(dim=1)
        return torch.where(present.any(dim=1, keepdim=True), pooled, torch.zeros_like(pooled))

    def weight_names(self, prefix: str, attribute: str) -> dict[str, str]:
        """``{torch parameter name: neutral name}``, the module being held as ``attribute``."""
        names = {} if self.conv is None else self.conv.weight_names(prefix, f"{attribute}.conv")
        names[f"{attribute}.input.weight"] = "relational/input/kernel"
        names[f"{attribute}.input.bias"] = "relational/input/bias"
        for i in range(len(self.blocks)):
            ours, theirs = f"{attribute}.blocks.{i}", f"relational/block_{i}"
            for norm in ("norm_attention", "norm_mlp"):
                names[f"{ours}.{norm}.weight"] = f"{theirs}/{norm}/scale"
                names[f"{ours}.{norm}.bias"] = f"{theirs}/{norm}/offset"
            for layer in ("query", "key", "value", "output"):
                names[f"{ours}.{layer}.weight"] = f"{theirs}/attention/{layer}/kernel"
                names[f"{ours}.{layer}.bias"] = f"{theirs}/attention/{layer}/bias"
            for layer in ("mlp_0", "mlp_1"):
                names[f"{ours}.{layer}.weight"] = f"{theirs}/{layer}/kernel"
                names[f"{ours}.{layer}.bias"] = f"{theirs}/{layer}/bias"
        return names
