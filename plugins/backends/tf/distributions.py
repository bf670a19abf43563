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
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple, action_parts

_LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """Discrete actions from unnormalised logits ``[B, n]``."""

    def __init__(self, inputs: tf.Tensor, mask: tf.Tensor | None = None):
        if mask is not None:  # disallowed actions: logit -inf, probability 0 (see the torch twin)
            inputs = tf.where(tf.cast(mask, tf.bool), inputs, tf.constant(-np.inf, inputs.dtype))
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

    def __init__(self, inputs: tf.Tensor, mask: tf.Tensor | None = None):
        if mask is not None:
            raise ValueError("an action mask needs Discrete or MultiDiscrete actions, not Box")
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


def _sum(values: list[tf.Tensor]) -> tf.Tensor:
    return tf.add_n(values) if len(values) > 1 else values[0]


class MultiCategorical:
    """MultiDiscrete actions ``[B, k]``: a product of Categoricals (the torch twin's layout)."""

    nvec: tuple[int, ...] = ()

    def __init__(self, inputs: tf.Tensor, mask: tf.Tensor | None = None):
        logits = tf.split(inputs, list(self.nvec), axis=-1)
        masks = tf.split(mask, list(self.nvec), axis=-1) if mask is not None else [None] * len(logits)
        self.parts = [Categorical(x, m) for x, m in zip(logits, masks, strict=True)]

    @classmethod
    def for_space(cls, space: MultiDiscrete) -> type[MultiCategorical]:
        return type("MultiCategorical", (cls,), {"nvec": tuple(space.nvec)})

    def sample(self, uniform: tf.Tensor) -> tf.Tensor:
        noise = tf.split(uniform, list(self.nvec), axis=-1)
        return tf.stack([p.sample(u) for p, u in zip(self.parts, noise, strict=True)], axis=-1)

    def deterministic_sample(self) -> tf.Tensor:
        return tf.stack([p.deterministic_sample() for p in self.parts], axis=-1)

    def logp(self, actions: tf.Tensor) -> tf.Tensor:
        return _sum([p.logp(actions[:, i]) for i, p in enumerate(self.parts)])

    def entropy(self) -> tf.Tensor:
        return _sum([p.entropy() for p in self.parts])

    def kl(self, other: MultiCategorical) -> tf.Tensor:
        return _sum([p.kl(q) for p, q in zip(self.parts, other.parts, strict=True)])

    @staticmethod
    def required_inputs(space: MultiDiscrete) -> int:
        return sum(space.nvec)

    @staticmethod
    def draw_noise(rng: np.random.Generator, batch_size: int, space: MultiDiscrete) -> np.ndarray:
        return rng.random((batch_size, sum(space.nvec)), dtype=np.float32)

    @staticmethod
    def greedy_noise(batch_size: int, space: MultiDiscrete) -> np.ndarray:
        return np.full((batch_size, sum(space.nvec)), math.exp(-1.0), dtype=np.float32)


class Product:
    """Tuple/Dict actions as flat float rows: one distribution per part (the torch twin's layout)."""

    part_spaces: tuple[Space, ...] = ()

    def __init__(self, inputs: tf.Tensor, mask: tf.Tensor | None = None):
        if mask is not None:
            raise ValueError("an action mask needs Discrete or MultiDiscrete actions, not Tuple/Dict")
        widths = [distribution_class(s).required_inputs(s) for s in self.part_spaces]
        self.parts = [
            distribution_class(s)(x)
            for s, x in zip(self.part_spaces, tf.split(inputs, widths, -1), strict=True)
        ]

    @classmethod
    def for_space(cls, space: Tuple | Dict) -> type[Product]:
        return type("Product", (cls,), {"part_spaces": tuple(action_parts(space))})

    def _columns(self, actions: tf.Tensor) -> list[tf.Tensor]:
        out, offset = [], 0
        for space in self.part_spaces:
            width = 1 if isinstance(space, Discrete) else int(np.prod(space.shape))
            column = actions[:, offset : offset + width]
            offset += width
            if isinstance(space, Discrete):
                column = tf.cast(tf.round(column[:, 0]), tf.int64)
            elif isinstance(space, MultiDiscrete):
                column = tf.cast(tf.round(column), tf.int64)
            out.append(column)
        return out

    def _noise_widths(self) -> list[int]:
        return [action_noise_width(s) for s in self.part_spaces]

    @staticmethod
    def _flat(actions: list[tf.Tensor]) -> tf.Tensor:
        return tf.concat([tf.reshape(tf.cast(a, tf.float32), [tf.shape(a)[0], -1]) for a in actions], axis=-1)

    def sample(self, noise: tf.Tensor) -> tf.Tensor:
        parts = tf.split(noise, self._noise_widths(), axis=-1)
        return self._flat([p.sample(u) for p, u in zip(self.parts, parts, strict=True)])

    def deterministic_sample(self) -> tf.Tensor:
        return self._flat([p.deterministic_sample() for p in self.parts])

    def logp(self, actions: tf.Tensor) -> tf.Tensor:
        return _sum([p.logp(a) for p, a in zip(self.parts, self._columns(actions), strict=True)])

    def entropy(self) -> tf.Tensor:
        return _sum([p.entropy() for p in self.parts])

    def kl(self, other: Product) -> tf.Tensor:
        return _sum([p.kl(q) for p, q in zip(self.parts, other.parts, strict=True)])

    @staticmethod
    def required_inputs(space: Tuple | Dict) -> int:
        return sum(distribution_class(s).required_inputs(s) for s in action_parts(space))

    @staticmethod
    def draw_noise(rng: np.random.Generator, batch_size: int, space: Tuple | Dict) -> np.ndarray:
        return np.concatenate(
            [distribution_class(s).draw_noise(rng, batch_size, s) for s in action_parts(space)], axis=1
        )

    @staticmethod
    def greedy_noise(batch_size: int, space: Tuple | Dict) -> np.ndarray:
        return np.concatenate(
            [distribution_class(s).greedy_noise(batch_size, s) for s in action_parts(space)], axis=1
        )


def action_noise_width(space: Space) -> int:
    """Columns of sampling noise per row: one per logit, one per Box element."""
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, Box):
        return space.size
    if isinstance(space, MultiDiscrete):
        return sum(space.nvec)
    return sum(action_noise_width(s) for s in action_parts(space))


def distribution_class(space: Space) -> type:
    """The distribution of actions of ``space``: ``cls(inputs, mask=None)``, ``required_inputs``, noise."""
    if isinstance(space, Discrete):
        return Categorical
    if isinstance(space, Box):
        return DiagGaussian
    if isinstance(space, MultiDiscrete):
        return MultiCategorical.for_space(space)
    if isinstance(space, Tuple | Dict):
        return Product.for_space(space)
    raise TypeError(f"no action distribution for {space!r}")
