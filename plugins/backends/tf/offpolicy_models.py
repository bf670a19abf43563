"""The networks of the TF off-policy actor-critics (SAC, TD3, DDPG): the torch backend's twins.

* :class:`StackedMLP` - K critics of one shape as one network: kernels ``[K, in, out]``,
  one batched matmul per layer, as the torch ``StackedMLP``;
* :class:`ActorMLP` - the actor (``policy/hidden_<i>``, ``policy/output``);
* :class:`ActorCritics` - both, and SAC's ``log_alpha``, under their neutral names.

:class:`~rlgear.plugins.backends.tf.offpolicy.OffPolicyTFPolicy` builds and trains them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from rlgear.plugins.backends.tf.models import ACTIVATIONS, Dense
from rlgear.plugins.backends.tf.runtime import tf


class StackedMLP(tf.Module):
    """``members`` MLPs of the same shape: every layer one batched matmul (``[K, B, in] @ [K, in, out]``).

    Variables ``<scope>/hidden_<i>/{kernel,bias}`` and ``<scope>/output/...``, kernels
    ``[members, in, out]`` and biases ``[members, out]``, listed kernels first then biases
    (the torch module's parameter order). Initialised like ``nn.Linear`` (uniform in
    +-1/sqrt(in)), member by member.
    """

    def __init__(
        self,
        members: int,
        in_dim: int,
        hidden_sizes: list[int],
        out_dim: int,
        activation: str,
        rng: np.random.Generator,
    ):
        super().__init__()
        self.members = members
        self.activation = ACTIVATIONS[activation]
        self.kernels: list[tf.Variable] = []
        self.biases: list[tf.Variable] = []
        for fan_in, fan_out in itertools.pairwise([in_dim, *hidden_sizes, out_dim]):
            bound = 1.0 / math.sqrt(fan_in)
            kernel = rng.uniform(-bound, bound, (members, fan_in, fan_out)).astype(np.float32)
            bias = rng.uniform(-bound, bound, (members, fan_out)).astype(np.float32)
            self.kernels.append(tf.Variable(kernel, name="kernel"))
            self.biases.append(tf.Variable(bias, name="bias"))

    def __call__(self, x: tf.Tensor, params: list[tf.Tensor] | None = None) -> tf.Tensor:
        """``[members, B, out]`` from inputs ``[B, in]``; ``params`` (kernels then biases) stand in for
        the variables, e.g. their ``stop_gradient`` so that a loss reaches the inputs only."""
        params = [*self.kernels, *self.biases] if params is None else params
        half = len(params) // 2
        kernels, biases = params[:half], params[half:]
        x = tf.broadcast_to(x[None], [self.members, tf.shape(x)[0], x.shape[-1]])
        last = len(kernels) - 1
        for i, (kernel, bias) in enumerate(zip(kernels, biases, strict=True)):
            x = tf.matmul(x, kernel) + bias[:, None, :]
            if i < last:
                x = self.activation(x)
        return x

    def named(self, scope: str) -> list[tuple[str, tf.Variable]]:
        last = len(self.kernels) - 1
        layers = ["output" if i == last else f"hidden_{i}" for i in range(len(self.kernels))]
        kernels = [(f"{scope}/{layer}/kernel", var) for layer, var in zip(layers, self.kernels, strict=True)]
        biases = [(f"{scope}/{layer}/bias", var) for layer, var in zip(layers, self.biases, strict=True)]
        return kernels + biases


class ActorMLP(tf.Module):
    """The actor body and output layer, ``policy/hidden_<i>`` then ``policy/output`` (nn.Linear's init)."""

    def __init__(
        self, in_dim: int, hidden_sizes: list[int], out_dim: int, activation: str, rng: np.random.Generator
    ):
        super().__init__()
        self.layers = []
        for size in [*hidden_sizes, out_dim]:
            self.layers.append(Dense(in_dim, size, None, rng))
            in_dim = size
        self.activation = ACTIVATIONS[activation]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)

    def named(self, scope: str = "policy") -> list[tuple[str, tf.Variable]]:
        out = []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            out += layer.named(f"{scope}/{'output' if i == last else f'hidden_{i}'}")
        return out


class ActorCritics(tf.Module):
    """The actor, the stacked critics and (SAC) the log temperature; variables in the torch module's order."""

    def __init__(
        self, actor: ActorMLP, critic: StackedMLP, log_alpha: float | None = None, learn_alpha: bool = True
    ):
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.log_alpha = (
            None
            if log_alpha is None
            else tf.Variable([float(log_alpha)], dtype=tf.float32, name="log_alpha", trainable=learn_alpha)
        )

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, None]:
        return self.actor(obs), None  # the backend's model contract: (dist_inputs, values)

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        out = self.actor.named("policy") + self.critic.named("q")
        if self.log_alpha is not None:
            out.append(("log_alpha", self.log_alpha))
        return out
