"""The TF model catalog, with the torch catalog's weight names and shapes.

A model maps flat float observations ``[B, F]`` to ``(dist_inputs, values)``
exactly as the torch catalog does (``rlgear.plugins.backends.torch.models``),
and exposes its variables as ``named_variables()``: a list of
``(framework-neutral name, tf.Variable)`` in the order of the torch model's
``named_parameters()``. TF stores dense kernels ``[in, out]`` already, so the
neutral layout needs no transposition, and a checkpoint written by one backend
loads in the other.

Models are plain ``tf.Module``s with explicit variables rather than Keras
layers: the names are ours to fix, and nothing depends on Keras' naming or
build-on-first-call behaviour.

Custom models (``model.custom: module:Class``) are built as
``Class(observation_space, action_space, num_outputs, model_config, **model.custom_options)``;
they must be callable as above and have ``trainable_variables`` (a
``tf.Module`` or a Keras model). A custom model may define
``named_variables()``; without it, variables are exported as
``custom/<index>/<variable name>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.config.conv import ConvSpec, conv_layers
from rlgear.discovery.registry import resolve_object
from rlgear.errors import ConfigError, PluginError
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.spaces import Box, Space, flat_dim

ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "tanh": tf.tanh,
    "relu": tf.nn.relu,
    "elu": tf.nn.elu,
    "silu": tf.nn.silu,
}


def orthogonal(rng: np.random.Generator, in_dim: int, out_dim: int, gain: float) -> np.ndarray:
    """An orthogonal ``[in, out]`` matrix times ``gain`` (Saxe et al. 2014), drawn with numpy.

    The same construction as ``torch.nn.init.orthogonal_``: QR of a Gaussian
    matrix, signs fixed by R's diagonal.
    """
    rows, cols = out_dim, in_dim  # built in torch's [out, in] orientation, then transposed
    gaussian = rng.standard_normal((rows, cols))
    if rows < cols:
        gaussian = gaussian.T
    q, r = np.linalg.qr(gaussian)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return (gain * q).T.astype(np.float32)


class Dense(tf.Module):
    """``x @ kernel + bias`` with a ``[in, out]`` kernel.

    ``gain`` None gives torch's ``nn.Linear`` default (uniform in
    ``±1/sqrt(in)`` for kernel and bias), so ``orthogonal_init: false`` means
    the same thing on both backends.
    """

    def __init__(self, in_dim: int, out_dim: int, gain: float | None, rng: np.random.Generator):
        super().__init__()
        if gain is not None:
            kernel = orthogonal(rng, in_dim, out_dim, gain)
            bias = np.zeros(out_dim, dtype=np.float32)
        else:
            bound = 1.0 / math.sqrt(in_dim)
            kernel = rng.uniform(-bound, bound, (in_dim, out_dim)).astype(np.float32)
            bias = rng.uniform(-bound, bound, out_dim).astype(np.float32)
        self.kernel = tf.Variable(kernel, name="kernel")
        self.bias = tf.Variable(bias, name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(x, self.kernel) + self.bias

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        return [(f"{prefix}/kernel", self.kernel), (f"{prefix}/bias", self.bias)]


class DenseStack(tf.Module):
    """Hidden layers ``hidden_<i>`` with one activation."""

    def __init__(
        self, in_dim: int, sizes: list[int], activation: str, gain: float | None, rng: np.random.Generator
    ):
        super().__init__()
        self.layers = []
        for size in sizes:
            self.layers.append(Dense(in_dim, size, gain, rng))
            in_dim = size
        self.activation = ACTIVATIONS[activation]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for layer in self.layers:
            x = self.activation(layer(x))
        return x

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        out = []
        for i, layer in enumerate(self.layers):
            out += layer.named(f"{prefix}/hidden_{i}")
        return out


class ConvEncoder(tf.Module):
    """Flat ``[B, H * W * C]`` images -> conv layers (ReLU, no padding) -> ``[B, features]`` in HWC order.

    The torch ``ConvEncoder``'s twin (see :mod:`rlgear.config.conv`); TF convolves
    in NHWC with ``[kh, kw, in, out]`` filters, the neutral layout itself.
    ``orthogonal_init`` draws each filter as torch does, an orthogonal
    ``[out, in * kh * kw]`` matrix; without it, torch's ``nn.Conv2d`` default
    (uniform in ``±1/sqrt(in * kh * kw)`` for kernel and bias). Rows of an
    image-plus-vector layout carry the vector after the image: it is appended
    to the conv features unchanged.
    """

    def __init__(self, spec: ConvSpec, orthogonal_init: bool, rng: np.random.Generator):
        super().__init__()
        self.image_shape = spec.image_shape
        self.image_size = spec.image_size
        self.vector_size = spec.vector_size
        self.conv_dim = spec.conv_dim
        self.scale = spec.scale
        self.output_dim = spec.output_dim
        self.strides = []
        self.kernels = []
        self.biases = []
        for layer in spec.layers:
            k, c_in, c_out = layer.kernel, layer.in_channels, layer.out_channels
            fan_in = c_in * k * k
            if orthogonal_init:
                # orthogonal() gives [fan_in, out] from torch's [out, fan_in] orientation
                matrix = orthogonal(rng, fan_in, c_out, math.sqrt(2))
                kernel = matrix.T.reshape(c_out, c_in, k, k).transpose(2, 3, 1, 0)
                bias = np.zeros(c_out, dtype=np.float32)
            else:
                bound = 1.0 / math.sqrt(fan_in)
                kernel = rng.uniform(-bound, bound, (k, k, c_in, c_out))
                bias = rng.uniform(-bound, bound, c_out)
            self.kernels.append(tf.Variable(np.ascontiguousarray(kernel, dtype=np.float32), name="kernel"))
            self.biases.append(tf.Variable(bias.astype(np.float32), name="bias"))
            self.strides.append(layer.stride)

    def feature_map(self, obs: tf.Tensor) -> tf.Tensor:
        """The last conv layer's output ``[B, H', W', C']``, before flattening."""
        image = obs if self.vector_size == 0 else obs[:, : self.image_size]
        x = tf.reshape(image, [-1, *self.image_shape])
        if self.scale != 1.0:
            x = x * self.scale
        for kernel, bias, stride in zip(self.kernels, self.biases, self.strides, strict=True):
            x = tf.nn.relu(tf.nn.conv2d(x, kernel, stride, "VALID") + bias)
        return x

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        x = self.feature_map(obs)
        features = tf.reshape(x, [tf.shape(x)[0], self.conv_dim])
        if self.vector_size == 0:
            return features
        return tf.concat([features, obs[:, self.image_size :]], axis=-1)

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        out = []
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases, strict=True)):
            out += [(f"{prefix}/conv_{i}/kernel", kernel), (f"{prefix}/conv_{i}/bias", bias)]
        return out


def conv_encoder(observation_space: Space, model_config: Any, rng: np.random.Generator) -> ConvEncoder | None:
    """The conv trunk for an image space (``model.conv_filters``), else None."""
    spec = conv_layers(observation_space, model_config)
    return None if spec is None else ConvEncoder(spec, bool(model_config.orthogonal_init), rng)


class ActorCriticMLP(tf.Module):
    """Policy and value MLPs (separate, or sharing their hidden layers), as the torch catalog's.

    Framework-neutral weight names: ``policy/hidden_<i>/{kernel,bias}``,
    ``value/hidden_<i>/...`` (or ``shared/hidden_<i>/...``), ``policy/output/...``,
    ``value/output/...`` and ``policy/log_std``; kernels are ``[in, out]``.
    With an ``encoder`` (images), one conv trunk ``shared/conv_<i>/...`` feeds both; the relational
    module (``model.relational``, :mod:`rlgear.plugins.backends.tf.relational`) sits in the same slot.
    """

    def __init__(
        self,
        obs_dim: int,
        num_outputs: int,
        continuous: bool,
        model_config: Any,
        rng: np.random.Generator,
        encoder: Any = None,
    ):
        super().__init__()
        self.encoder = encoder
        if encoder is not None:
            obs_dim = encoder.output_dim
        sizes = list(model_config.hidden_sizes)
        act = model_config.activation
        ortho = model_config.orthogonal_init
        hidden_gain = math.sqrt(2) if ortho else None
        last = sizes[-1] if sizes else obs_dim
        self.continuous = continuous
        self.shared = bool(model_config.vf_share_layers)
        head_outputs = num_outputs // 2 if continuous else num_outputs
        if self.shared:
            self.shared_body = DenseStack(obs_dim, sizes, act, hidden_gain, rng)
        else:
            self.policy_body = DenseStack(obs_dim, sizes, act, hidden_gain, rng)
            self.value_body = DenseStack(obs_dim, sizes, act, hidden_gain, rng)
        # Small policy-head init keeps the first policy near uniform (Andrychowicz et al. 2021).
        self.policy_output = Dense(last, head_outputs, 0.01 if ortho else None, rng)
        self.value_output = Dense(last, 1, 1.0 if ortho else None, rng)
        if continuous:
            self.log_std = tf.Variable(
                np.full(head_outputs, float(model_config.init_log_std), dtype=np.float32), name="log_std"
            )

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if self.encoder is not None:
            obs = self.encoder(obs)
        if self.shared:
            hidden = self.shared_body(obs)
            logits, values = self.policy_output(hidden), self.value_output(hidden)
        else:
            logits = self.policy_output(self.policy_body(obs))
            values = self.value_output(self.value_body(obs))
        if self.continuous:
            logits = tf.concat([logits, tf.broadcast_to(self.log_std, tf.shape(logits))], axis=-1)
        return logits, values[:, 0]

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        """Neutral names in the order of the torch model's ``named_parameters()``.

        (torch lists a module's own parameters, here ``log_std``, before its submodules'.)
        """
        bodies = ["shared"] if self.shared else ["policy", "value"]
        out = [("policy/log_std", self.log_std)] if self.continuous else []
        if self.encoder is not None:
            out += self.encoder.named("shared")
        for body in bodies:
            out += getattr(self, f"{body}_body").named(body)
        out += self.policy_output.named("policy/output") + self.value_output.named("value/output")
        return out


def named_variables(model: Any) -> list[tuple[str, tf.Variable]]:
    """``(neutral name, variable)`` pairs of any TF model (catalog or custom)."""
    if hasattr(model, "named_variables"):
        return list(model.named_variables())
    return [(f"custom/{i}/{v.name.split(':')[0]}", v) for i, v in enumerate(model.trainable_variables)]


def build_model(
    observation_space: Space,
    action_space: Space,
    num_outputs: int,
    model_config: Any,
    rng: np.random.Generator,
) -> Any:
    """The catalog MLP (or LSTM with ``model.lstm``, attention memory with ``model.attention``, the
    relational encoder with ``model.relational``), or the
    user's ``model.custom`` class; ``rng`` draws the initial weights."""
    if model_config.custom:
        cls = resolve_object(model_config.custom, "model.custom")
        if not isinstance(cls, type):
            raise PluginError(
                f"model.custom: '{model_config.custom}' must be a class (the backend in use is tf)"
            )
        try:
            model = cls(
                observation_space, action_space, num_outputs, model_config, **model_config.custom_options
            )
        except TypeError as err:
            raise ConfigError(
                f"model.custom: {model_config.custom} could not be built: {err} (it is called as "
                "Class(observation_space, action_space, num_outputs, model_config, **custom_options))"
            ) from err
        if not (callable(model) and hasattr(model, "trainable_variables")):
            raise PluginError(
                f"model.custom: '{model_config.custom}' must be a tf.Module or Keras model (callable, "
                "with trainable_variables); the backend in use is tf"
            )
        return model
    if not model_config.hidden_sizes:
        raise ConfigError("model.hidden_sizes: expected at least one layer size")
    if getattr(model_config, "relational", False):
        from rlgear.plugins.backends.tf.relational import RelationalEncoder

        return ActorCriticMLP(
            0,
            num_outputs,
            isinstance(action_space, Box),
            model_config,
            rng,
            RelationalEncoder(observation_space, model_config, rng),
        )
    encoder = conv_encoder(observation_space, model_config, rng)
    if getattr(model_config, "attention", False):
        from rlgear.plugins.backends.tf.attention import AttentionActorCritic

        return AttentionActorCritic(
            flat_dim(observation_space), num_outputs, action_space, model_config, rng, encoder
        )
    if getattr(model_config, "lstm", False):
        from rlgear.plugins.backends.tf.recurrent import LSTMActorCritic

        return LSTMActorCritic(
            flat_dim(observation_space), num_outputs, action_space, model_config, rng, encoder
        )
    return ActorCriticMLP(
        flat_dim(observation_space), num_outputs, isinstance(action_space, Box), model_config, rng, encoder
    )
