"""Fitted Q evaluation (Le, Voloshin & Yue 2019, Algorithm 3): the target policy's Q from a dataset.

FQE repeats a supervised regression a fixed number of times (``iterations``): with the model of
the previous iteration held fixed, regress ``Q(s_t, a_t)`` on

    y_t = r_t + gamma * (1 - done_t) * sum_a pi_e(a | s_{t+1}) Q_prev(s_{t+1}, a)

over the dataset's transitions (``Q_0 = 0``), then estimates the policy's value as the mean over
the episodes' start states of ``V(s_0) = sum_a pi_e(a | s_0) Q(s_0, a)``. After ``K`` iterations the
values hold at most ``K`` steps of rewards, so ``iterations`` should reach the effective horizon
``1 / (1 - gamma)``. ``done_t`` is the end of the recorded episode (terminated or truncated, as
RLlib's ``FQETorchModel`` takes ``dones``), so that FQE estimates the same return as the
importance-sampling estimators: the return of episodes that end where the data's end.

Discrete actions only (``Q`` has one output per action, and ``V`` is an exact sum over them), as
RLlib's. Two models, numpy only, picked by ``hidden_sizes``:

- ``[]``: linear in the features (plus a bias), one weight vector per action, each regression solved
  exactly by ridge least squares; exact for tabular (one-hot) features;
- ``[h, ...]``: a ReLU MLP, each regression ``sgd_steps`` Adam steps on minibatches of the mean
  squared error at the data's actions; the output layer starts at 0, so ``Q_0 = 0`` here too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

#: Ridge term of the linear model's least squares (keeps the system solvable for unseen features).
RIDGE = 1e-6


class LinearQ:
    """``Q(s, a) = [phi(s), 1] . w_a``; each fit is an exact least-squares solution per action."""

    def __init__(self, num_features: int, num_actions: int):
        self.weights = np.zeros((num_features + 1, num_actions))

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return _with_bias(features) @ self.weights

    def rows_per_fit(self, available: int) -> int:
        """Every row: the least squares solution is exact on all of them."""
        return available

    def fit(
        self, features: np.ndarray, actions: np.ndarray, targets: np.ndarray, rng: np.random.Generator
    ) -> float:
        inputs = _with_bias(features)
        eye = RIDGE * np.eye(inputs.shape[1])
        for action in range(self.weights.shape[1]):
            rows = actions == action
            if not np.any(rows):
                self.weights[:, action] = 0.0
                continue
            x = inputs[rows]
            self.weights[:, action] = np.linalg.solve(x.T @ x + eye, x.T @ targets[rows])
        return _mse(self(features), actions, targets)


class MLPQ:
    """A ReLU MLP ``features -> [num_actions]`` trained by Adam on the squared error at the data's actions
    (float32: each iteration's targets take a pass over every transition)."""

    def __init__(
        self,
        num_features: int,
        num_actions: int,
        hidden_sizes: Sequence[int],
        rng: np.random.Generator,
        sgd_steps: int = 20,
        batch_size: int = 256,
        lr: float = 1e-3,
    ):
        sizes = [num_features, *hidden_sizes, num_actions]
        self.params: list[np.ndarray] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            weights = rng.normal(0.0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32)
            self.params += [weights, np.zeros(fan_out, np.float32)]
        self.params[-2][:] = 0.0  # Q_0 = 0, as the linear model's
        self.sgd_steps, self.batch_size, self.lr = sgd_steps, batch_size, lr
        self._m = [np.zeros_like(p) for p in self.params]
        self._v = [np.zeros_like(p) for p in self.params]
        self._t = 0

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return self._forward(features)[-1]

    def _forward(self, features: np.ndarray) -> list[np.ndarray]:
        outputs = [np.asarray(features, np.float32)]
        layers = len(self.params) // 2
        for i in range(layers):
            z = outputs[-1] @ self.params[2 * i] + self.params[2 * i + 1]
            outputs.append(np.maximum(z, 0.0) if i < layers - 1 else z)
        return outputs

    def rows_per_fit(self, available: int) -> int:
        """Rows one regression reads: ``sgd_steps`` minibatches, drawn by the caller, which computes
        the targets of these rows only (a pass over every transition would cost more than the fit)."""
        return self.sgd_steps * min(self.batch_size, available)

    def fit(
        self, features: np.ndarray, actions: np.ndarray, targets: np.ndarray, rng: np.random.Generator
    ) -> float:
        """Adam steps on consecutive minibatches of the given (already drawn) rows."""
        losses = []
        for start in range(0, len(targets), self.batch_size):
            rows = slice(start, start + self.batch_size)
            grads, loss = self._gradients(features[rows], actions[rows], targets[rows])
            self._adam_step(grads)
            losses.append(loss)
        return float(np.mean(losses))

    def _gradients(
        self, features: np.ndarray, actions: np.ndarray, targets: np.ndarray
    ) -> tuple[list[np.ndarray], float]:
        outputs = self._forward(features)
        rows = np.arange(len(targets))
        errors = outputs[-1][rows, actions] - targets
        delta = np.zeros_like(outputs[-1])
        delta[rows, actions] = 2.0 * errors / len(targets)
        grads: list[np.ndarray] = [np.empty(0)] * len(self.params)
        for i in reversed(range(len(self.params) // 2)):
            grads[2 * i] = outputs[i].T @ delta
            grads[2 * i + 1] = delta.sum(axis=0)
            if i > 0:
                delta = (delta @ self.params[2 * i].T) * (outputs[i] > 0)
        return grads, float(np.mean(errors**2))

    def _adam_step(self, grads: list[np.ndarray], beta1: float = 0.9, beta2: float = 0.999) -> None:
        self._t += 1
        for p, g, m, v in zip(self.params, grads, self._m, self._v, strict=True):
            m *= beta1
            m += (1 - beta1) * g
            v *= beta2
            v += (1 - beta2) * g * g
            p -= self.lr * (m / (1 - beta1**self._t)) / (np.sqrt(v / (1 - beta2**self._t)) + 1e-8)


class FittedQEvaluation:
    """FQE of one target policy on one set of transitions (see the module docstring).

    Arrays: ``features`` / ``next_features`` ``[N, F]`` (model inputs), ``actions`` int ``[N]``,
    ``rewards`` ``[N]``, ``dones`` bool ``[N]`` (the step ended its episode), ``next_action_probs``
    ``[N, A]`` (``pi_e(. | s_{t+1})``; any row where ``dones`` is set is ignored).
    """

    def __init__(
        self,
        num_actions: int,
        gamma: float,
        iterations: int,
        hidden_sizes: Sequence[int] = (),
        seed: int | None = 0,
        sgd_steps: int = 20,
        batch_size: int = 256,
        lr: float = 1e-3,
    ):
        self.num_actions, self.gamma, self.iterations = num_actions, gamma, iterations
        self.hidden_sizes = tuple(hidden_sizes)
        self.rng = np.random.default_rng(seed)
        self.sgd = {"sgd_steps": sgd_steps, "batch_size": batch_size, "lr": lr}
        self.model: LinearQ | MLPQ | None = None
        #: The regression's mean squared error after each iteration.
        self.losses: list[float] = []

    def fit(
        self,
        features: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_features: np.ndarray,
        dones: np.ndarray,
        next_action_probs: np.ndarray,
    ) -> FittedQEvaluation:
        features = np.asarray(features, np.float64).reshape(len(features), -1)
        next_features = np.asarray(next_features, np.float64).reshape(len(next_features), -1)
        actions = np.asarray(actions, np.int64)
        rewards = np.asarray(rewards, np.float64)
        continues = self.gamma * (1.0 - np.asarray(dones, np.float64))
        if self.hidden_sizes:
            self.model = MLPQ(features.shape[1], self.num_actions, self.hidden_sizes, self.rng, **self.sgd)
        else:
            self.model = LinearQ(features.shape[1], self.num_actions)
        self.losses = []
        count = len(rewards)
        for _ in range(self.iterations):
            rows = self.model.rows_per_fit(count)
            rows = slice(None) if rows >= count else self.rng.integers(0, count, rows)
            next_values = np.sum(next_action_probs[rows] * self.model(next_features[rows]), axis=-1)
            targets = rewards[rows] + continues[rows] * next_values
            self.losses.append(self.model.fit(features[rows], actions[rows], targets, self.rng))
        return self

    def q_values(self, features: np.ndarray) -> np.ndarray:
        """``Q(s, .)`` ``[N, A]`` of the fitted model."""
        if self.model is None:
            raise RuntimeError("FittedQEvaluation.fit must run before q_values")
        return self.model(np.asarray(features, np.float64).reshape(len(features), -1))

    def state_values(self, features: np.ndarray, action_probs: np.ndarray) -> np.ndarray:
        """``V(s) = sum_a pi_e(a|s) Q(s, a)`` ``[N]``."""
        return np.sum(action_probs * self.q_values(features), axis=-1)


def _with_bias(features: np.ndarray) -> np.ndarray:
    features = np.asarray(features, np.float64).reshape(len(features), -1)
    return np.concatenate([features, np.ones((len(features), 1))], axis=1)


def _mse(q_values: np.ndarray, actions: np.ndarray, targets: np.ndarray) -> float:
    return float(np.mean((q_values[np.arange(len(targets)), actions] - targets) ** 2))
