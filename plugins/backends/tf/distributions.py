"""Action distributions on TF tensors, with the torch backend's formulas.

Same parameterisation and the same numerics as
``rlgear.plugins.backends.torch.distributions`` (log-softmax logits, masked
``-inf`` logits clamped in entropy/KL, log-std Gaussians), so a loss computed
on either backend agrees to float32 rounding. ``sample`` takes its noise as an
input (uniform for Categorical, standard normal for DiagGaussian, shaped like
``noise_shape``): the policy draws it with a seeded numpy generator whose
state goes into checkpoints as JSON, and a compiled acting function needs no
TF random-generator state (whose read-and-update op costs more than the
64x64 forward pass itself).
"""

from __future__ import annotations

import math

import numpy as np

from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Box, Discrete, Space

_LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """Discrete actions from unnormalised logits ``[B, n]``."""

    def __init__(self, inputs: tf.Tensor):
        self.logits = inputs - tf.reduce_logsumexp(inputs, axis=-1, keepdims=True)

    def sample(self, uniform: tf.Tensor) -> tf.Tensor:
        """A sample per row from ``uniform`` noise in [0, 1), shaped ``[B, n]``."""
        # Gumbel-max trick: argmax(logits + Gumbel noise) ~ Categorical(softmax(logits)).
        uniform = tf.maximum(uniform, 1e-20)
        return tf.argmax(self.logits - tf.math.log(-tf.math.log(uniform)), axis=-1)

    def deterministic_sample(self) -> tf.Tensor:
        return tf.argmax(self.logits, axis=-1)

    def logp(self, actions: tf.Tensor) -> tf.Tensor:
        indices = tf.cast(actions, tf.int32)[:, None]
        return tf.gather(self.logits, indices, axis=-1, batch_dims=1)[:, 0]

    def _finite_logits(self) -> tf.Tensor:
        # Masked actions have logit -inf and probability 0; 0 * -inf would be nan.
        return tf.maximum(self.logits, self.logits.dtype.min)

    def entropy(self) -> tf.Tensor:
        return -tf.reduce_sum(tf.exp(self.logits) * self._finite_logits(), axis=-1)

    def kl(self, other: Categorical) -> tf.Tensor:
        return tf.reduce_sum(tf.exp(self.logits) * (self._finite_logits() - other._finite_logits()), axis=-1)

    @staticmethod
    def required_inputs(space: Discrete) -> int:
        return space.n

    @staticmethod
    def draw_noise(rng: np.random.Generator, batch_size: int, space: Discrete) -> np.ndarray:
        return rng.random((batch_size, space.n), dtype=np.float32)

    @staticmethod
    def greedy_noise(batch_size: int, space: Discrete) -> np.ndarray:
        """Noise for which ``sample`` is the argmax: u = 1/e makes the Gumbel term -log(-log u) = 0."""
        return np.full((batch_size, space.n), math.exp(-1.0), dtype=np.float32)


class DiagGaussian:
    """Continuous actions; inputs ``[B, 2 * dim]`` are the means then the log standard deviations."""

    def __init__(self, inputs: tf.Tensor):
        self.mean, self.log_std = tf.split(inputs, 2, axis=-1)
        self.std = tf.exp(self.log_std)

    def sample(self, normal: tf.Tensor) -> tf.Tensor:
        """A sample per row from standard-normal noise shaped ``[B, dim]``."""
        return self.mean + self.std * normal

    def deterministic_sample(self) -> tf.Tensor:
        return self.mean

    def logp(self, actions: tf.Tensor) -> tf.Tensor:
        z = (tf.cast(actions, self.mean.dtype) - self.mean) / self.std
        return tf.reduce_sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> tf.Tensor:
        return tf.reduce_sum(self.log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    def kl(self, other: DiagGaussian) -> tf.Tensor:
        return tf.reduce_sum(
            other.log_std
            - self.log_std
            + (self.std**2 + (self.mean - other.mean) ** 2) / (2.0 * other.std**2)
            - 0.5,
            axis=-1,
        )

    @staticmethod
    def required_inputs(space: Box) -> int:
        return 2 * space.size

    @staticmethod
    def draw_noise(rng: np.random.Generator, batch_size: int, space: Box) -> np.ndarray:
        return rng.standard_normal((batch_size, space.size), dtype=np.float32)

    @staticmethod
    def greedy_noise(batch_size: int, space: Box) -> np.ndarray:
        """Noise for which ``sample`` is the mean."""
        return np.zeros((batch_size, space.size), dtype=np.float32)


def distribution_class(space: Space) -> type[Categorical] | type[DiagGaussian]:
    if isinstance(space, Discrete):
        return Categorical
    if isinstance(space, Box):
        return DiagGaussian
    raise TypeError(f"no action distribution for {space!r}")
