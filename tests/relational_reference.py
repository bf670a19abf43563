"""A float64 numpy reference of the relational actor-critic (``model.relational``).

Written from the documented contract (:mod:`rlgear.blocks.relational`), one observation and one
head at a time, sharing no code with the backends (which batch and mask whole tensors):

    entities e_i: the rows of a [N, F] observation (all-zero rows absent), or the conv trunk's
                  cells [C channels, x, y] with x, y in [-1, 1]
    x_i = e_i W_in + b_in
    per block:  x = x + MHDPA(LN(x)) over present keys,  x = x + W_1 relu(W_0 LN(x))
    pooled = max over present i of x_i (zeros if none)  ->  the catalog MLP heads
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tests.numpy_reference import dense, mlp_body

EPSILON = 1e-5


def layer_norm(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + EPSILON) * w[f"{prefix}/scale"] + w[f"{prefix}/offset"]


def conv_cells(w: Mapping[str, np.ndarray], image: np.ndarray, strides: list[int]) -> np.ndarray:
    """``[H, W, C]`` float64 image -> ``[H' * W', C' + 2]`` cells (ReLU conv, no padding) with (x, y)."""
    x = image
    for i, stride in enumerate(strides):
        kernel, bias = w[f"shared/conv_{i}/kernel"], w[f"shared/conv_{i}/bias"]  # [kh, kw, in, out]
        k = kernel.shape[0]
        out_h, out_w = (x.shape[0] - k) // stride + 1, (x.shape[1] - k) // stride + 1
        out = np.zeros((out_h, out_w, kernel.shape[3]))
        for r in range(out_h):
            for c in range(out_w):
                patch = x[r * stride : r * stride + k, c * stride : c * stride + k]
                out[r, c] = np.einsum("hwi,hwio->o", patch, kernel) + bias
        x = np.maximum(out, 0.0)
    h, wd, _ = x.shape
    rows = []
    for r in range(h):
        for c in range(wd):
            cx = -1.0 + 2.0 * c / (wd - 1) if wd > 1 else 0.0
            cy = -1.0 + 2.0 * r / (h - 1) if h > 1 else 0.0
            rows.append(np.concatenate([x[r, c], [cx, cy]]))
    return np.array(rows)


def attention(w: Mapping[str, np.ndarray], p: str, h: np.ndarray, present: np.ndarray, heads: int):
    """Multi-head dot-product attention of every entity over the present ones (``h`` is LN(x))."""
    q, k, v = (dense(w, f"{p}/attention/{name}", h) for name in ("query", "key", "value"))
    dim = h.shape[-1]
    size = dim // heads
    out = np.zeros_like(h)
    keys = np.flatnonzero(present)
    for head in range(heads):
        cols = slice(head * size, (head + 1) * size)
        for i in range(h.shape[0]):
            logits = np.array([q[i, cols] @ k[j, cols] for j in keys]) / np.sqrt(size)
            weights = np.exp(logits - logits.max())
            weights /= weights.sum()
            out[i, cols] = sum(a * v[j, cols] for a, j in zip(weights, keys, strict=True))
    return dense(w, f"{p}/attention/output", out)


def relational_features(
    w: Mapping[str, np.ndarray],
    obs_row: np.ndarray,
    heads: int,
    blocks: int,
    entity_shape: tuple[int, int] | None = None,
    image: tuple[tuple[int, int, int], list[int], float] | None = None,
    pool: str = "max",
) -> np.ndarray:
    """The encoder's ``[relational_dim]`` output for one flat observation row.

    ``entity_shape`` ``(N, F)`` for entity observations, or ``image`` ``(shape, strides, scale)``;
    ``pool`` other than ``max`` is the planted bug of the tests (a mean over present entities).
    """
    if image is not None:
        shape, strides, scale = image
        entities = conv_cells(w, obs_row.reshape(shape) * scale, strides)
        present = np.ones(len(entities), dtype=bool)
    else:
        entities = obs_row.reshape(entity_shape)
        present = np.any(entities != 0.0, axis=-1)
    if not present.any():
        return np.zeros(w["relational/input/bias"].shape)
    x = dense(w, "relational/input", entities)
    shared = "relational/block_1/norm_mlp/scale" not in w
    for block in range(blocks):
        p = f"relational/block_{0 if shared else block}"
        x = x + attention(w, p, layer_norm(w, f"{p}/norm_attention", x), present, heads)
        hidden = np.maximum(dense(w, f"{p}/mlp_0", layer_norm(w, f"{p}/norm_mlp", x)), 0.0)
        x = x + dense(w, f"{p}/mlp_1", hidden)
    if pool == "max":
        return x[present].max(axis=0)
    return x[present].mean(axis=0)


def relational_actor_critic(
    weights: Mapping[str, np.ndarray], obs: np.ndarray, activation: str = "tanh", **layout
) -> tuple[np.ndarray, np.ndarray]:
    """``(dist_inputs [B, k], values [B])``: the encoder, then the catalog MLP (separate bodies)."""
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    features = np.stack([relational_features(w, row, **layout) for row in np.asarray(obs, np.float64)])
    dist_inputs = dense(w, "policy/output", mlp_body(w, "policy", features, activation))
    if "policy/log_std" in w:
        dist_inputs = np.concatenate(
            [dist_inputs, np.broadcast_to(w["policy/log_std"], dist_inputs.shape)], 1
        )
    values = dense(w, "value/output", mlp_body(w, "value", features, activation))[:, 0]
    return dist_inputs, values
