"""A float64 numpy reference of the attention-memory actor-critic (``model.attention``, GTrXL).

Written from the documented contract (:mod:`rlgear.blocks.attention_memory`), one step at a time:
each layer keeps a list of ``(time, block input)`` entries of the current episode; a step attends
to the entries at most ``M`` steps back and to itself, with the head's distance bias, then the
GRU-gated residuals of Parisotto et al. 2019:

    y  = g_attn(x, relu(MHA(LN(x), LN([memory; x]))))
    x' = g_mlp(y, relu(MLP(LN(y))))
    g(x, y) = (1 - z) x + z h,  r = s(W_r y + U_r x),  z = s(W_z y + U_z x - b_g),
                                h = tanh(W_g y + U_g (r x))

The backends build masks over whole sequences instead; this loop shares none of that code.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tests.numpy_reference import dense, mlp_body

EPSILON = 1e-5


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def layer_norm(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + EPSILON) * w[f"{prefix}/scale"] + w[f"{prefix}/offset"]


def gru_gate(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = x.shape[-1]
    wy, ux = y @ w[f"{prefix}/input_kernel"], x @ w[f"{prefix}/state_kernel"]
    r = sigmoid(wy[:d] + ux[:d])
    z = sigmoid(wy[d : 2 * d] + ux[d:] - w[f"{prefix}/bias"])
    h = np.tanh(wy[2 * d :] + (r * x) @ w[f"{prefix}/candidate_kernel"])
    return (1.0 - z) * x + z * h


def update_gate(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gate's ``z`` (how much of the sub-layer replaces the residual)."""
    d = x.shape[-1]
    return sigmoid(
        (y @ w[f"{prefix}/input_kernel"])[d : 2 * d]
        + (x @ w[f"{prefix}/state_kernel"])[d:]
        - w[f"{prefix}/bias"]
    )


def block_step(
    w: Mapping[str, np.ndarray], layer: int, x: np.ndarray, earlier: list[tuple[int, np.ndarray]], heads: int
) -> np.ndarray:
    """Block ``layer`` on one step's input ``x`` ``[D]``; ``earlier`` holds ``(steps back, input)``."""
    p = f"attention/block_{layer}"
    context = np.stack([value for _, value in earlier] + [x])
    distance = np.array([back for back, _ in earlier] + [0])
    normed = layer_norm(w, f"{p}/norm_attn", context)
    q = normed[-1] @ w[f"{p}/attn/query/kernel"]
    k = normed @ w[f"{p}/attn/key/kernel"]
    v = normed @ w[f"{p}/attn/value/kernel"]
    head_dim = x.shape[0] // heads
    attended = []
    for h in range(heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        logits = k[:, cols] @ q[cols] / np.sqrt(head_dim) + w[f"{p}/attn/distance_bias"][h, distance]
        weights = np.exp(logits - logits.max())
        attended.append((weights / weights.sum()) @ v[:, cols])
    y = gru_gate(
        w, f"{p}/gate_attn", x, np.maximum(np.concatenate(attended) @ w[f"{p}/attn/output/kernel"], 0)
    )
    hidden = dense(w, f"{p}/mlp_1", np.maximum(dense(w, f"{p}/mlp_0", layer_norm(w, f"{p}/norm_mlp", y)), 0))
    return gru_gate(w, f"{p}/gate_mlp", y, np.maximum(hidden, 0))


def attention_actor_critic(
    weights: Mapping[str, np.ndarray],
    obs: np.ndarray,
    memory: np.ndarray,
    mask: np.ndarray,
    seq_len: int,
    heads: int,
    activation: str = "tanh",
    resets: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(dist_inputs [N*L, k], values [N*L], memory [N, layers*M*D], mask [N, M])`` after the steps.

    Rows are ``N`` sequences of ``seq_len`` steps; sequence ``i`` starts from ``memory[i]`` (flat
    ``[layers, M, D]``, slot ``j`` is ``M - j`` steps before the first row) and ``mask[i]``;
    ``resets`` ``[N, L]`` empties the memory before the steps where it is True. In the returned
    memory, slots the mask marks empty are zeros.
    """
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    layers = sum(1 for name in w if name.endswith("/norm_attn/scale"))
    dim = w["attention/input/bias"].shape[0]
    slots = mask.shape[1]
    x_all = dense(w, "attention/input", mlp_body(w, "shared", np.asarray(obs, np.float64), activation))
    n = x_all.shape[0] // seq_len
    memory = np.asarray(memory, np.float64).reshape(n, layers, slots, dim)
    outputs = np.zeros_like(x_all)
    new_memory = np.zeros((n, layers, slots, dim))
    new_mask = np.zeros((n, slots))
    for i in range(n):
        history = [
            [(j - slots, memory[i, layer, j]) for j in range(slots) if mask[i, j] > 0.5]
            for layer in range(layers)
        ]
        for t in range(seq_len):
            if resets is not None and resets[i, t]:
                history = [[] for _ in range(layers)]
            x = x_all[i * seq_len + t]
            for layer in range(layers):
                earlier = [(t - time, value) for time, value in history[layer] if t - time <= slots]
                history[layer].append((t, x))
                x = block_step(w, layer, x, earlier, heads)
            outputs[i * seq_len + t] = x
        for layer in range(layers):
            for time, value in history[layer]:
                slot = time - (seq_len - 1) + slots - 1
                if slot >= 0:
                    new_memory[i, layer, slot] = value
                    new_mask[i, slot] = 1.0
    dist_inputs = dense(w, "policy/output", outputs)
    if "policy/log_std" in w:
        dist_inputs = np.concatenate(
            [dist_inputs, np.broadcast_to(w["policy/log_std"], dist_inputs.shape)], -1
        )
    return dist_inputs, dense(w, "value/output", outputs)[:, 0], new_memory.reshape(n, -1), new_mask
