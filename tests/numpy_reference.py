"""Independent numpy references for the loss tests: networks, distributions, gradients.

Written from the model catalog's documented contract (framework-neutral weight
names, kernels ``[in, out]``), not from either backend's code, in float64, so a
bug that both backends share still shows. No backend may serve as another's
reference (issue 12): the tests compare each backend with these functions.

How a test uses it:
  1. build a policy on a backend with :func:`make_policy` and give it weights
     drawn from a seed (:func:`random_weights`);
  2. take one plain-SGD step on a fixed batch with :func:`sgd_step`, which
     returns the learner's statistics and the gradient the step implied,
     ``(before - after) / lr`` (with ``grad_clip: null``, or scaled back by the
     clip factor);
  3. compute the same loss and statistics with a numpy function of the
     weights, and its gradient by central finite differences
     (:func:`finite_difference_gradient`), and compare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.spaces import Box, Discrete

Weights = dict[str, np.ndarray]

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}

CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
CARTPOLE_ACT = Discrete(2)
PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
PENDULUM_ACT = Box(np.array([-2.0]), np.array([2.0]))


# ----------------------------------------------------------------------------- building policies


def resolve(
    tmp_path: Any,
    algorithm: str,
    training: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    env: str = "CartPole-v1",
    backend: str = "torch",
) -> Any:
    """A resolved run config of ``algorithm`` with small hidden layers (fast finite differences)."""
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 3,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2},
        "training": dict(training or {}),
        "model": {"hidden_sizes": [8, 6], **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer_cls = registry.load_algorithm(algorithm)
    return config_mod.resolve(raw, training_class=trainer_cls.config_class)


def make_policy(config: Any, backend: str, observation_space: Any, action_space: Any) -> Any:
    """``config.algorithm``'s policy on ``backend``, built directly (no trainer, no envs)."""
    trainer_cls = registry.load_algorithm(config.algorithm)
    return trainer_cls.policy_class(backend)(observation_space, action_space, config)


def random_weights(template: Mapping[str, np.ndarray], seed: int = 1, gain: float = 1.0) -> Weights:
    """Weights of ``template``'s names and shapes drawn from ``seed`` alone.

    Not derived from the policy's initial weights: those depend on the
    framework's global RNG, i.e. on which tests ran before. Kernels ``[in, out]``
    are ``N(0, gain^2 / in)``; biases ``N(0, 0.1^2)``; ``log_std`` ``N(-0.3, 0.3^2)``.
    """
    rng = np.random.default_rng(seed)
    out: Weights = {}
    for name in sorted(template):
        shape = np.shape(template[name])
        if name.endswith("kernel"):
            value = rng.normal(size=shape) * gain / np.sqrt(shape[0])
        elif name.endswith("log_std"):
            value = -0.3 + 0.3 * rng.normal(size=shape)
        else:
            value = 0.1 * rng.normal(size=shape)
        out[name] = value.astype(np.float32)
    return out


def sgd_step(policy: Any, batch: Any) -> tuple[dict[str, float], Weights]:
    """One ``learn_on_batch`` with plain SGD; returns its stats and the applied update per weight.

    The update is ``before - after`` (= ``lr * clipped gradient``): the caller
    divides by the learning rate it expects, so a wrong rate or a wrong clip
    shows as a wrong gradient.
    """
    assert policy.config.training.optimizer == "sgd", "the implied gradient needs plain SGD"
    before = policy.get_weights()
    stats = policy.learn_on_batch(batch)
    after = policy.get_weights()
    return stats, {name: before[name].astype(np.float64) - after[name] for name in before}


# ----------------------------------------------------------------------------- networks


def dense(weights: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    return x @ np.asarray(weights[f"{prefix}/kernel"], np.float64) + np.asarray(
        weights[f"{prefix}/bias"], np.float64
    )


def mlp_body(weights: Mapping[str, np.ndarray], scope: str, x: np.ndarray, activation: str) -> np.ndarray:
    """The hidden layers ``{scope}/hidden_0``, ``hidden_1`` ... in order, each followed by ``activation``."""
    index = 0
    while f"{scope}/hidden_{index}/kernel" in weights:
        x = ACTIVATIONS[activation](dense(weights, f"{scope}/hidden_{index}", x))
        index += 1
    return x


def actor_critic(
    weights: Mapping[str, np.ndarray], obs: np.ndarray, activation: str = "tanh"
) -> tuple[np.ndarray, np.ndarray]:
    """The catalog actor-critic MLP: ``(dist_inputs [B, k], values [B])``.

    Separate ``policy/`` and ``value/`` bodies, or one ``shared/`` body
    (``vf_share_layers``); for continuous actions ``dist_inputs`` is the means
    followed by the state-independent ``policy/log_std``.
    """
    obs = np.asarray(obs, np.float64)
    if "shared/hidden_0/kernel" in weights:
        policy_features = value_features = mlp_body(weights, "shared", obs, activation)
    else:
        policy_features = mlp_body(weights, "policy", obs, activation)
        value_features = mlp_body(weights, "value", obs, activation)
    dist_inputs = dense(weights, "policy/output", policy_features)
    if "policy/log_std" in weights:
        log_std = np.broadcast_to(np.asarray(weights["policy/log_std"], np.float64), dist_inputs.shape)
        dist_inputs = np.concatenate([dist_inputs, log_std], axis=-1)
    values = dense(weights, "value/output", value_features)[:, 0]
    return dist_inputs, values


def lstm_actor_critic(
    weights: Mapping[str, np.ndarray],
    obs: np.ndarray,
    initial_h: np.ndarray,
    initial_c: np.ndarray,
    seq_len: int,
    activation: str = "tanh",
    extra_inputs: np.ndarray | None = None,
    resets: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The catalog LSTM actor-critic over sequences: ``(dist_inputs [N*L, k], values [N*L])``.

    Rows are ``N`` sequences of ``seq_len`` steps one after the other; sequence ``i``
    starts from ``initial_h[i]``, ``initial_c[i]``; ``resets`` ``[N, L]`` zeroes the
    state before the steps where it is True. Written from the documented
    contract (``rlgear.blocks.lstm_inference``): the ``shared/`` MLP, then
    ``[features, extra_inputs]`` into an LSTM with gates i, f, g, o::

        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')

    then ``policy/output`` and ``value/output`` on ``h'``.
    """
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    features = mlp_body(w, "shared", np.asarray(obs, np.float64), activation)
    if extra_inputs is not None:
        features = np.concatenate([features, np.asarray(extra_inputs, np.float64)], axis=1)
    n = features.shape[0] // seq_len
    cell = w["lstm/recurrent_kernel"].shape[0]
    h, c = np.asarray(initial_h, np.float64), np.asarray(initial_c, np.float64)
    sequences = features.reshape(n, seq_len, -1)
    outputs = np.zeros((n, seq_len, cell))

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    for t in range(seq_len):
        if resets is not None:
            h = np.where(resets[:, t, None], 0.0, h)
            c = np.where(resets[:, t, None], 0.0, c)
        z = sequences[:, t] @ w["lstm/kernel"] + h @ w["lstm/recurrent_kernel"] + w["lstm/bias"]
        i, f, g, o = (z[:, k * cell : (k + 1) * cell] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs[:, t] = h
    flat = outputs.reshape(n * seq_len, cell)
    dist_inputs = dense(w, "policy/output", flat)
    if "policy/log_std" in w:
        dist_inputs = np.concatenate(
            [dist_inputs, np.broadcast_to(w["policy/log_std"], dist_inputs.shape)], axis=-1
        )
    return dist_inputs, dense(w, "value/output", flat)[:, 0]


# ----------------------------------------------------------------------------- distributions


def categorical_log_probs(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def masked_categorical_log_probs(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Log-probabilities of the Categorical restricted to the allowed actions (``mask`` True);
    disallowed actions get -inf (probability 0)."""
    mask = np.asarray(mask, bool)
    allowed = np.where(mask, logits, -np.inf)
    shifted = allowed - allowed.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def categorical_entropy(log_probs: np.ndarray) -> np.ndarray:
    """``-sum p log p`` over the actions with p > 0."""
    p = np.exp(log_probs)
    return -np.where(p > 0, p * np.where(p > 0, log_probs, 0.0), 0.0).sum(axis=-1)


def logp_and_entropy(
    dist_inputs: np.ndarray, actions: np.ndarray, continuous: bool, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log-probability of ``actions`` and entropy, per row, of a Categorical (restricted to the
    actions ``mask`` allows, when given) or a diagonal Gaussian."""
    if not continuous:
        if mask is None:
            log_probs = categorical_log_probs(dist_inputs)
        else:
            log_probs = masked_categorical_log_probs(dist_inputs, np.asarray(mask).reshape(dist_inputs.shape))
        logp = np.take_along_axis(log_probs, np.asarray(actions, np.int64)[:, None], axis=-1)[:, 0]
        entropy = categorical_entropy(log_probs)
        return logp, entropy
    mean, log_std = np.split(dist_inputs, 2, axis=-1)
    z = (np.asarray(actions, np.float64) - mean) / np.exp(log_std)
    logp = (-0.5 * z**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(axis=-1)
    entropy = (log_std + 0.5 * (1.0 + np.log(2.0 * np.pi))).sum(axis=-1)
    return logp, entropy


def kl_divergence(p_inputs: np.ndarray, q_inputs: np.ndarray, continuous: bool) -> np.ndarray:
    """``KL(p || q)`` per row of two Categoricals (logits) or two diagonal Gaussians (means, log-stds)."""
    if not continuous:
        log_p, log_q = categorical_log_probs(p_inputs), categorical_log_probs(q_inputs)
        return (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)
    mean_p, log_std_p = np.split(p_inputs, 2, axis=-1)
    mean_q, log_std_q = np.split(q_inputs, 2, axis=-1)
    var_p, var_q = np.exp(2.0 * log_std_p), np.exp(2.0 * log_std_q)
    return (log_std_q - log_std_p + (var_p + (mean_p - mean_q) ** 2) / (2.0 * var_q) - 0.5).sum(axis=-1)


def normalized(x: np.ndarray) -> np.ndarray:
    """Mean 0, std 1 with the unbiased (n - 1) std and 1e-8 added to it, as the backends document."""
    return (x - x.mean()) / (x.std(ddof=1) + 1e-8)


# ----------------------------------------------------------------------------- gradients


def finite_difference_gradient(
    loss: Callable[[Weights], float], weights: Mapping[str, np.ndarray], eps: float = 1e-6
) -> Weights:
    """d loss / d weight for every element, by central differences in float64."""
    point = {name: np.array(value, dtype=np.float64) for name, value in weights.items()}
    grads: Weights = {}
    for name, value in point.items():
        grad = np.zeros_like(value)
        flat, grad_flat = value.reshape(-1), grad.reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            up = loss(point)
            flat[i] = original - eps
            down = loss(point)
            flat[i] = original
            grad_flat[i] = (up - down) / (2.0 * eps)
        grads[name] = grad
    return grads


def global_norm(grads: Mapping[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(float(np.sum(np.square(g))) for g in grads.values())))


def assert_update_is_sgd_on(
    update: Mapping[str, np.ndarray],
    reference_grads: Mapping[str, np.ndarray],
    lr: float,
    grad_clip: float | None = None,
    rtol: float = 2e-3,
    atol: float = 2e-6,
) -> None:
    """The applied update equals ``lr * clip(reference gradient)`` for every weight.

    Tolerances: the update is a float32 difference of weights of order 1, so
    its absolute error is about 1e-7 / lr; ``atol`` is in gradient units.
    """
    scale = 1.0
    if grad_clip is not None:
        scale = min(1.0, grad_clip / (global_norm(reference_grads) + 1e-6))
    assert set(update) == set(reference_grads), (sorted(update), sorted(reference_grads))
    for name, expected in reference_grads.items():
        np.testing.assert_allclose(
            np.asarray(update[name]) / lr,
            scale * expected,
            rtol=rtol,
            atol=atol,
            err_msg=f"gradient of {name}",
        )
