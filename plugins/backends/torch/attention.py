"""The catalog attention-memory actor-critic on torch (``model.attention``): GTrXL blocks.

The state layout and the framework-neutral weight names are documented in
:mod:`rlgear.blocks.attention_memory`. Each block follows GTrXL (Parisotto et al. 2019): layer
norm *before* the attention and the MLP, a ReLU on each sub-layer's output, and a GRU-type gate in
place of each residual connection, its update gate biased by ``-b_g`` (``b_g`` = 2) so the block
starts near the identity. Positions are relative: a learned logit bias per head and per distance
back (0..M), since what matters to a memory is how long ago a step was, and the same bias then
serves acting (one step) and learning (sequences).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlgear.blocks.attention_memory import GATE_BIAS_INIT, LAYER_NORM_EPSILON, check_action_space, mlp_dim
from rlgear.plugins.backends.torch.models import ConvEncoder, _dense_stack, _head, orthogonal_
from rlgear.spaces import Discrete, Space

#: Logit of a masked (not allowed) key: its softmax weight is exactly 0 in float32.
MASKED_LOGIT = -1e9


def _linear(in_dim: int, out_dim: int, bias: bool = True) -> nn.Linear:
    linear = nn.Linear(in_dim, out_dim, bias=bias)
    orthogonal_(linear.weight, 1.0)
    if bias:
        nn.init.zeros_(linear.bias)
    return linear


def attention_mask(
    memory_mask: torch.Tensor, resets: torch.Tensor | None, length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which keys each step may attend to, the distance back of each key, and the mask after the steps.

    Keys are the ``M`` memory slots followed by the ``length`` current steps. Step ``t`` sees key
    ``j`` when ``j`` is at most ``M`` steps back and not ahead (causal), holds a step (valid
    memory slot), and belongs to the same episode: ``resets`` ``[N, L]`` (True at a FIRST row)
    start a new one, which the memory and earlier steps are not part of.
    Returns ``allowed`` ``[N, L, M+L]`` (bool), ``distance`` ``[L, M+L]`` (long, clipped to 0..M for
    the position bias) and the memory mask after the last step ``[N, M]``.
    """
    n, memory = memory_mask.shape
    device = memory_mask.device
    back = (memory + torch.arange(length, device=device))[:, None] - torch.arange(
        memory + length, device=device
    )
    window = (back >= 0) & (back <= memory)
    valid = torch.cat([memory_mask > 0.5, torch.ones(n, length, dtype=torch.bool, device=device)], 1)
    if resets is None:
        episode = torch.zeros(n, memory + length, dtype=torch.long, device=device)
    else:
        started = torch.cumsum(resets.long(), 1)
        episode = torch.cat([torch.zeros(n, memory, dtype=torch.long, device=device), started], 1)
    same = episode[:, None, :] == episode[:, memory:, None]
    allowed = window[None] & valid[:, None, :] & same
    new_mask = (valid & (episode == episode[:, -1:]))[:, -memory:].to(memory_mask.dtype)
    return allowed, back.clamp(0, memory), new_mask


class GRUGate(nn.Module):
    """GTrXL's GRU-type gating of a residual: ``g(x, y) = (1 - z) * x + z * h`` with
    ``r = s(W_r y + U_r x)``, ``z = s(W_z y + U_z x - b_g)``, ``h = tanh(W_g y + U_g (r * x))``."""

    def __init__(self, dim: int):
        super().__init__()
        self.input_kernel = _linear(dim, 3 * dim, bias=False)  # W_r, W_z, W_g (on y)
        self.state_kernel = _linear(dim, 2 * dim, bias=False)  # U_r, U_z (on x)
        self.candidate_kernel = _linear(dim, dim, bias=False)  # U_g (on r * x)
        self.bias = nn.Parameter(torch.full((dim,), GATE_BIAS_INIT))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        dim = x.shape[-1]
        wy, ux = self.input_kernel(y), self.state_kernel(x)
        r = torch.sigmoid(wy[..., :dim] + ux[..., :dim])
        z = torch.sigmoid(wy[..., dim : 2 * dim] + ux[..., dim:] - self.bias)
        h = torch.tanh(wy[..., 2 * dim :] + self.candidate_kernel(r * x))
        return x + z * (h - x)


class GatedTransformerBlock(nn.Module):
    """One GTrXL block over ``[N, L, dim]`` steps with that block's memory ``[N, M, dim]``."""

    def __init__(self, dim: int, heads: int, hidden: int, memory: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm_attn = nn.LayerNorm(dim, eps=LAYER_NORM_EPSILON)
        self.query = _linear(dim, dim, bias=False)
        self.key = _linear(dim, dim, bias=False)
        self.value = _linear(dim, dim, bias=False)
        self.output = _linear(dim, dim, bias=False)
        self.distance_bias = nn.Parameter(torch.zeros(heads, memory + 1))
        self.gate_attn = GRUGate(dim)
        self.norm_mlp = nn.LayerNorm(dim, eps=LAYER_NORM_EPSILON)
        self.mlp_0 = _linear(dim, hidden)
        self.mlp_1 = _linear(hidden, dim)
        self.gate_mlp = GRUGate(dim)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, distance: torch.Tensor
    ) -> torch.Tensor:
        n, length, dim = x.shape
        normed = self.norm_attn(torch.cat([memory, x], 1))  # keys and values: memory, then the steps

        def split(t: torch.Tensor) -> torch.Tensor:  # [N, K, dim] -> [N, heads, K, head_dim]
            return t.reshape(n, -1, self.heads, self.head_dim).transpose(1, 2)

        q = split(self.query(normed[:, -length:]))
        k, v = split(self.key(normed)), split(self.value(normed))
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + self.distance_bias[:, distance]
        weights = torch.softmax(logits.masked_fill(~allowed[:, None], MASKED_LOGIT), dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(n, length, dim)
        y = self.gate_attn(x, torch.relu(self.output(attended)))
        hidden = self.mlp_1(torch.relu(self.mlp_0(self.norm_mlp(y))))
        return self.gate_mlp(y, torch.relu(hidden))


class AttentionActorCritic(nn.Module):
    """[conv trunk ->] MLP trunk -> projection -> GTrXL blocks -> policy and value heads.

    ``forward(obs, state, prev_actions, prev_rewards, seq_len, resets)`` as
    :class:`~rlgear.plugins.backends.torch.recurrent.LSTMActorCritic`'s: rows are ``N`` sequences
    of ``seq_len`` steps, sequence-major; ``state`` is ``[memory, mask]`` at each sequence's start
    (:mod:`rlgear.blocks.attention_memory`); the previous action and reward are not read.
    """

    recurrent = True

    def __init__(
        self,
        obs_dim: int,
        num_outputs: int,
        action_space: Space,
        model_config: Any,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        check_action_space(action_space)
        self.encoder = encoder  # registered first: its parameters lead named_parameters(), as on TF
        if encoder is not None:
            obs_dim = encoder.output_dim
        sizes = list(model_config.hidden_sizes)
        ortho = model_config.orthogonal_init
        self.continuous = not isinstance(action_space, Discrete)
        self.dim = int(model_config.attention_dim)
        self.memory = int(model_config.attention_memory)
        self.shared_body = _dense_stack(
            obs_dim, sizes, model_config.activation, math.sqrt(2) if ortho else None
        )
        self.attention_input = _linear(sizes[-1], self.dim)
        self.blocks = nn.ModuleList(
            GatedTransformerBlock(
                self.dim, int(model_config.attention_heads), mlp_dim(model_config), self.memory
            )
            for _ in range(int(model_config.attention_layers))
        )
        head_outputs = num_outputs // 2 if self.continuous else num_outputs
        self.policy_output = _head(self.dim, head_outputs, 0.01 if ortho else None)
        self.value_output = _head(self.dim, 1, 1.0 if ortho else None)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((head_outputs,), float(model_config.init_log_std)))

    def forward(
        self,
        obs: torch.Tensor,
        state: list[torch.Tensor],
        prev_actions: torch.Tensor | None = None,
        prev_rewards: torch.Tensor | None = None,
        seq_len: int = 1,
        resets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        features = self.shared_body(obs if self.encoder is None else self.encoder(obs))
        n = features.shape[0] // seq_len
        x = self.attention_input(features).reshape(n, seq_len, self.dim)
        memory = state[0].reshape(n, len(self.blocks), self.memory, self.dim)
        allowed, distance, new_mask = attention_mask(
            state[1], None if resets is None else resets.reshape(n, seq_len), seq_len
        )
        new_memory = []
        for index, block in enumerate(self.blocks):
            new_memory.append(torch.cat([memory[:, index], x], 1)[:, -self.memory :])
            x = block(x, memory[:, index], allowed, distance)
        outputs = x.reshape(n * seq_len, self.dim)
        logits = self.policy_output(outputs)
        values = self.value_output(outputs).squeeze(-1)
        if self.continuous:
            logits = torch.cat([logits, self.log_std.expand_as(logits)], dim=-1)
        return logits, values, [torch.stack(new_memory, 1).reshape(n, -1), new_mask]

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("shared", "encoder")
        index = 0
        for i, module in enumerate(self.shared_body):
            if isinstance(module, nn.Linear):
                names[f"shared_body.{i}.weight"] = f"shared/hidden_{index}/kernel"
                names[f"shared_body.{i}.bias"] = f"shared/hidden_{index}/bias"
                index += 1
        names["attention_input.weight"] = "attention/input/kernel"
        names["attention_input.bias"] = "attention/input/bias"
        for name, _ in self.blocks.named_parameters():
            names[f"blocks.{name}"] = neutral_block_name(name)
        for head in ("policy", "value"):
            names[f"{head}_output.weight"] = f"{head}/output/kernel"
            names[f"{head}_output.bias"] = f"{head}/output/bias"
        if self.continuous:
            names["log_std"] = "policy/log_std"
        return names


_NEUTRAL_LEAF = {"weight": "kernel", "bias": "bias"}
_NORM_LEAF = {"weight": "scale", "bias": "offset"}


def neutral_block_name(name: str) -> str:
    """``<l>.<module>[.<part>].<leaf>`` (a parameter of ``blocks``) -> ``attention/block_<l>/...``."""
    layer, module, *rest = name.split(".")
    prefix = f"attention/block_{layer}"
    if module in ("query", "key", "value", "output"):
        return f"{prefix}/attn/{module}/kernel"
    if module == "distance_bias":
        return f"{prefix}/attn/distance_bias"
    if module.startswith("norm_"):
        return f"{prefix}/{module}/{_NORM_LEAF[rest[0]]}"
    if module.startswith("gate_"):  # gate_attn.bias, gate_attn.input_kernel.weight
        return f"{prefix}/{module}/{rest[0]}"
    return f"{prefix}/{module}/{_NEUTRAL_LEAF[rest[0]]}"  # mlp_<i>
