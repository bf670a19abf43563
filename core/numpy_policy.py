"""Framework-free policies: numpy weights, numpy forward pass, no loss and no optimizer.

Why: an algorithm that takes no gradient step (evolution strategies, random
search, the cross-entropy method) needs no deep-learning framework at all. A
policy class with ``framework_free = True`` may be listed under the key ``"*"``
of an algorithm's ``policies``: it is then used under every ``backend:`` value,
the run loads no backend plugin (:class:`rlgear.backend.NoFrameworkBackend`
stands in) and imports neither torch nor tensorflow.

Weights keep the framework-neutral names and layouts of the model catalog
(dense kernels ``[in, out]``), so :class:`NumpyMLPPolicy`'s weights are the
policy tower of the catalog MLP.

:class:`FlatLayout` maps a weight dict to one flat float32 vector and back:
the search space of parameter-space algorithms, and what
:meth:`NumpyMLPPolicy.compute_population_actions` takes one row of per env slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.errors import UnsupportedError
from rlgear.policy import Policy, PolicyState, action_dim, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class FlatLayout:
    """The order and shapes of a weight dict's arrays, to move between the dict and a flat vector.

    The order is the dict's insertion order (the policy's own), so a flat vector
    means the same thing in every process that built the same policy.
    """

    def __init__(self, weights: dict[str, np.ndarray]):
        self.names = list(weights)
        self.shapes = [tuple(np.shape(weights[name])) for name in self.names]
        sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.size = int(self.offsets[-1])

    def flatten(self, weights: dict[str, np.ndarray]) -> np.ndarray:
        """float32 ``[size]``."""
        return np.concatenate([np.asarray(weights[n], np.float32).ravel() for n in self.names])

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: array}`` (copies) from a float ``[size]`` vector."""
        return {
            name: self.slice(flat, i).reshape(shape).copy() for i, (name, shape) in enumerate(self.items())
        }

    def items(self) -> list[tuple[str, tuple[int, ...]]]:
        return list(zip(self.names, self.shapes, strict=True))

    def slice(self, flat: np.ndarray, index: int) -> np.ndarray:
        """The part of ``flat`` (``[..., size]``) holding array number ``index``, flat."""
        return flat[..., self.offsets[index] : self.offsets[index + 1]]

    def batched(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: [N, *shape]}`` from ``[N, size]``: one weight set per row."""
        n = flat.shape[0]
        return {name: self.slice(flat, i).reshape(n, *shape) for i, (name, shape) in enumerate(self.items())}


class NumpyPolicy(Policy):
    """Base class of framework-free policies: weights in a numpy dict, nothing else to checkpoint.

    A subclass sets ``self.weights`` (``{name: float32 array}``, neutral names) in its
    constructor and implements :meth:`compute_actions`. It has no loss:
    :meth:`learn_on_batch` refuses (the algorithm changes the weights itself, by
    :meth:`set_weights`).
    """

    #: Runs without any framework: valid under the ``"*"`` key of ``Trainer.policies``.
    framework_free = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.weights: dict[str, np.ndarray] = {}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        raise UnsupportedError(
            f"{type(self).__name__} is a framework-free policy without a loss: its algorithm sets its "
            "weights (set_weights) instead of calling learn_on_batch"
        )

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self.weights.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        for name, value in self.weights.items():  # check all before changing any
            if name not in weights:
                raise ValueError(f"weight '{name}' is missing (got {', '.join(sorted(weights))})")
            if np.shape(weights[name]) != value.shape:
                raise ValueError(
                    f"weight '{name}' has shape {np.shape(weights[name])}, expected {value.shape}"
                )
        self.weights = {name: np.array(weights[name], np.float32) for name in self.weights}

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{name}": value for name, value in self.get_weights().items()}
        return PolicyState(arrays, {"global_timestep": self.global_timestep})

    def set_state(self, state: PolicyState) -> None:
        self.set_weights({k.removeprefix("weights/"): v for k, v in state.arrays.items()})
        self.global_timestep = int(state.meta.get("global_timestep", 0))


_ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


class NumpyMLPPolicy(NumpyPolicy):
    """The catalog MLP's policy tower in numpy, acting deterministically.

    ``policy/hidden_<i>/{kernel,bias}`` for each of :meth:`hidden_layer_sizes`
    (``model.hidden_sizes``, ``model.activation``), then ``policy/output/{kernel,bias}``:
    logits for Discrete actions (the action is their argmax), the action itself for
    Box actions (the evaluator clips it to the bounds). With no hidden layer it is the
    linear policy ``obs @ kernel + bias``.

    Initialisation: hidden layers with normalised-column Gaussians (std 1 per unit, as in
    Salimans et al. 2017's code), the output layer the same scaled by 0.01; a linear policy
    starts at zero (Mania et al. 2018). Seeded from ``config.seed``.

    :meth:`compute_population_actions` runs a different weight set per env slot in one
    batched pass: what :func:`rlgear.plugins.families.evolution.population.evaluate_population` calls.
    """

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        if action_space.kind not in ("discrete", "continuous"):
            raise UnsupportedError(
                f"{type(self).__name__} supports Discrete and Box actions, not {action_space!r}"
            )
        self.discrete = isinstance(action_space, Discrete)
        self.activation = _ACTIVATIONS[config.model.activation]
        sizes = [flat_dim(observation_space), *self.hidden_layer_sizes(config), action_dim(action_space)]
        rng = np.random.default_rng(config.seed)
        names = [f"policy/hidden_{i}" for i in range(len(sizes) - 2)] + ["policy/output"]
        for i, name in enumerate(names):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            if len(names) == 1:
                kernel = np.zeros((fan_in, fan_out), np.float32)
            else:
                kernel = rng.standard_normal((fan_in, fan_out)).astype(np.float32)
                kernel *= (1.0 if i < len(names) - 1 else 0.01) / np.sqrt(
                    np.square(kernel).sum(0, keepdims=True)
                )
            self.weights[f"{name}/kernel"] = kernel
            self.weights[f"{name}/bias"] = np.zeros(fan_out, np.float32)
        self.layout = FlatLayout(self.weights)

    def hidden_layer_sizes(self, config: Any) -> list[int]:
        """The hidden layers (``model.hidden_sizes``; override for another rule, e.g. a linear option)."""
        return list(config.model.hidden_sizes)

    def _actions(self, out: np.ndarray) -> np.ndarray:
        if self.discrete:
            return out.argmax(axis=-1).astype(np.int64)
        return out.reshape(len(out), *self.action_space.shape)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        x = flatten_observations(self.observation_space, timestep.observation)
        num_layers = len(self.layout.names) // 2
        for i in range(num_layers):
            kernel, bias = self.weights[self.layout.names[2 * i]], self.weights[self.layout.names[2 * i + 1]]
            x = x @ kernel + bias
            if i < num_layers - 1:
                x = self.activation(x)
        return self._actions(x), state, {}

    def compute_population_actions(self, timestep: TimeStep, parameters: np.ndarray) -> np.ndarray:
        """Actions with weight set ``parameters[b]`` (a :class:`FlatLayout` vector) for env slot ``b``.

        ``parameters`` is ``[B, layout.size]``; one batched matmul per layer,
        ``x[b] @ kernel[b]``, so a population costs what one policy does per step.
        """
        x = flatten_observations(self.observation_space, timestep.observation)
        per_slot = self.layout.batched(np.asarray(parameters, np.float32))
        num_layers = len(self.layout.names) // 2
        for i in range(num_layers):
            kernel, bias = per_slot[self.layout.names[2 * i]], per_slot[self.layout.names[2 * i + 1]]
            x = np.matmul(x[:, None, :], kernel)[:, 0, :] + bias
            if i < num_layers - 1:
                x = self.activation(x)
        return self._actions(x)
