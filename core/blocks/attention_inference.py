"""Acting with the catalog attention-memory actor-critic (``model.attention``) in numpy.

Why: one acting step of the GTrXL blocks is a few small matmuls per layer, and through torch or TF
each of its ~40 ops pays the framework's dispatch: 2.0 ms (torch) and 1.3 ms (TF) per call for one
env, against a fraction of that here (figures in docs/recurrent.md, ``bench/attention_acting.py``).
Learning always runs in the framework. The network, the state layout and the weight names are
documented in :mod:`rlgear.blocks.attention_memory`; this is the one-step case of the backends'
models: the step attends to itself and to every valid memory slot (all are within ``M`` steps),
and the memory shifts by one.
"""

from __future__ import annotations

import numpy as np

from rlgear.blocks.attention_memory import LAYER_NORM_EPSILON
from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.blocks.inference import NumpyActorCritic
from rlgear.config.conv import ConvSpec
from rlgear.spaces import Space

MASKED_LOGIT = np.float32(-1e9)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def _layer_norm(x: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return (
        centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + LAYER_NORM_EPSILON) * scale + offset
    )


class _Block:
    """One block's weights and its one-step forward pass."""

    def __init__(self, weights: dict[str, np.ndarray], prefix: str, heads: int):
        def f32(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[f"{prefix}/{name}"], dtype=np.float32)

        self.heads = heads
        self.norm_attn = (f32("norm_attn/scale"), f32("norm_attn/offset"))
        self.query, self.key, self.value = (f32(f"attn/{part}/kernel") for part in ("query", "key", "value"))
        self.output = f32("attn/output/kernel")
        self.distance_bias = np.ascontiguousarray(f32("attn/distance_bias")[:, ::-1])  # slot order
        self.gates = [self._gate(f32, name) for name in ("gate_attn", "gate_mlp")]
        self.norm_mlp = (f32("norm_mlp/scale"), f32("norm_mlp/offset"))
        self.mlp = [(f32(f"mlp_{i}/kernel"), f32(f"mlp_{i}/bias")) for i in range(2)]

    @staticmethod
    def _gate(f32, name: str) -> tuple[np.ndarray, ...]:
        return (f32(f"{name}/input_kernel"), f32(f"{name}/state_kernel"), f32(f"{name}/candidate_kernel"),
                f32(f"{name}/bias"))  # fmt: skip

    @staticmethod
    def _apply_gate(gate: tuple[np.ndarray, ...], x: np.ndarray, y: np.ndarray) -> np.ndarray:
        input_kernel, state_kernel, candidate_kernel, bias = gate
        d = x.shape[-1]
        wy, ux = y @ input_kernel, x @ state_kernel
        r = _sigmoid(wy[:, :d] + ux[:, :d])
        z = _sigmoid(wy[:, d : 2 * d] + ux[:, d:] - bias)
        h = np.tanh(wy[:, 2 * d :] + (r * x) @ candidate_kernel)
        return x + z * (h - x)

    def __call__(self, x: np.ndarray, memory: np.ndarray, blocked: np.ndarray) -> np.ndarray:
        """``x`` ``[B, D]`` (this step), ``memory`` ``[B, M, D]``, ``blocked`` ``[B, 1, M+1]`` (True: masked)."""
        n, dim = x.shape
        heads, head_dim = self.heads, dim // self.heads
        keys = memory.shape[1] + 1
        normed = _layer_norm(np.concatenate([memory, x[:, None]], axis=1), *self.norm_attn)
        # Keys and values as stacked [M+1, D] @ [D, D] products, one per env: numpy runs them one by
        # one, each below OpenBLAS's threading threshold. One [B*(M+1), D] product is above it, and
        # OpenBLAS's threads on a busy machine took 31 ms for 8 envs where one thread takes under 1.
        q = (normed[:, -1] @ self.query).reshape(n, heads, 1, head_dim)
        k = (normed @ self.key).reshape(n, keys, heads, head_dim).transpose(0, 2, 3, 1)  # [B, H, hd, M+1]
        v = (normed @ self.value).reshape(n, keys, heads, head_dim).transpose(0, 2, 1, 3)  # [B, H, M+1, hd]
        logits = (q @ k)[:, :, 0] * np.float32(1.0 / np.sqrt(head_dim)) + self.distance_bias
        logits = np.where(blocked, MASKED_LOGIT, logits)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights[:, :, None, :] @ v).reshape(n, dim)
        y = self._apply_gate(self.gates[0], x, np.maximum(attended @ self.output, 0.0))
        (k0, b0), (k1, b1) = self.mlp
        hidden = np.maximum(_layer_norm(y, *self.norm_mlp) @ k0 + b0, 0.0) @ k1 + b1
        return self._apply_gate(self.gates[1], y, np.maximum(hidden, 0.0))


class NumpyAttentionActorCritic(NumpyActorCritic):
    """One step of the catalog attention-memory actor-critic: forward, sampling, log-probabilities.

    Sampling (inverse-CDF Categorical, Gaussian) is the MLP twin's, on ``self.rng``.
    """

    def __init__(
        self, action_space: Space, model_config: object, seed: int | None = None, conv: ConvSpec | None = None
    ):
        super().__init__(action_space, 0, model_config.activation, True, seed)
        self.conv = None if conv is None else NumpyConvTrunk(conv)
        self.hidden_layers = len(model_config.hidden_sizes)
        self.num_layers = int(model_config.attention_layers)
        self.heads = int(model_config.attention_heads)
        self.memory = int(model_config.attention_memory)
        self.dim = int(model_config.attention_dim)

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        def f32(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[name], dtype=np.float32)

        self.trunk = [
            (f32(f"shared/hidden_{i}/kernel"), f32(f"shared/hidden_{i}/bias"))
            for i in range(self.hidden_layers)
        ]
        self.projection = (f32("attention/input/kernel"), f32("attention/input/bias"))
        self.blocks = [_Block(weights, f"attention/block_{i}", self.heads) for i in range(self.num_layers)]
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
        """``(policy head output, values, [memory', mask'])`` for flat float32 observations ``[B, F]``;
        the previous action and reward are not read (the LSTM twin's signature, so callers share it)."""
        n = obs.shape[0]
        x = obs
        if self.conv is not None:
            x = self.conv.forward(obs, np.empty((n, self.conv.spec.output_dim), np.float32))
        for kernel, bias in self.trunk:
            x = self.activation(x @ kernel + bias, np.empty((n, kernel.shape[1]), np.float32))
        x = x @ self.projection[0] + self.projection[1]
        memory = np.asarray(state[0], np.float32).reshape(n, self.num_layers, self.memory, self.dim)
        mask = np.asarray(state[1], np.float32)
        blocked = np.concatenate([mask < 0.5, np.zeros((n, 1), bool)], axis=1)[:, None, :]
        new_memory = np.empty_like(memory)
        new_memory[:, :, :-1] = memory[:, :, 1:]
        for index, block in enumerate(self.blocks):
            new_memory[:, index, -1] = x
            x = block(x, memory[:, index], blocked)
        new_mask = np.concatenate([mask[:, 1:], np.ones((n, 1), np.float32)], axis=1)
        out = x @ self.head[0] + self.head[1]
        return (
            out[:, : self.num_head_outputs],
            out[:, self.num_head_outputs],
            [new_memory.reshape(n, -1), new_mask],
        )

    def act(  # type: ignore[override]
        self,
        obs: np.ndarray,
        state: list[np.ndarray],
        explore: bool,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(actions, action_logp, values, new_state)``, as the framework would give; the previous
        action and reward are not read (``model.attention`` refuses ``lstm_use_prev_*``)."""
        head, values, new_state = self.forward(obs, state)  # (prev_actions, prev_rewards: unused)
        actions, logp, values = self.sample(head, values, explore, action_mask)
        return actions, logp, values, new_state
