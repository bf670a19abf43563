"""The torch model catalog, and the hook for users' own networks.

A model maps flat float observations ``[B, F]`` to ``(dist_inputs, values)``:
``dist_inputs`` is ``[B, num_outputs]`` (logits for Discrete actions; means
then log standard deviations for Box actions) and ``values`` is ``[B]`` (or
None for a model without a value head).

Custom models (``model.custom: module:Class``) are ``torch.nn.Module``
subclasses constructed as
``Class(observation_space, action_space, num_outputs, model_config, **model.custom_options)``
with that same ``forward``. A custom model may define ``weight_names()``
returning ``{parameter name: framework-neutral name}``; without it, weights are
exported under their torch parameter names.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.config.conv import ConvSpec, conv_layers
from rlgear.discovery.registry import resolve_object
from rlgear.errors import ConfigError, PluginError
from rlgear.spaces import Box, Space, flat_dim

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def orthogonal_(weight: torch.Tensor, gain: float) -> None:
    """``torch.nn.init.orthogonal_`` with the QR step in numpy (conv kernels as ``[out, in * kh * kw]``).

    Same algorithm and the same draws from torch's RNG (Saxe et al. 2014: QR of
    a Gaussian matrix, signs fixed by R's diagonal); numpy's QR avoids paging in
    torch's LAPACK kernels, about 20 MB of resident memory for a process that
    otherwise never uses them.
    """
    rows, cols = weight.shape[0], weight[0].numel()
    gaussian = torch.randn(rows, cols).numpy().astype(np.float64)
    if rows < cols:
        gaussian = gaussian.T
    q, r = np.linalg.qr(gaussian)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with torch.no_grad():
        weight.copy_(torch.from_numpy((gain * q).astype(np.float32)).view_as(weight))


def _dense_stack(in_dim: int, sizes: list[int], activation: str, gain: float | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in sizes:
        linear = nn.Linear(in_dim, size)
        if gain is not None:
            orthogonal_(linear.weight, gain)
            nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[activation]()]
        in_dim = size
    return nn.Sequential(*layers)


def _head(in_dim: int, out_dim: int, gain: float | None) -> nn.Linear:
    linear = nn.Linear(in_dim, out_dim)
    if gain is not None:
        orthogonal_(linear.weight, gain)
        nn.init.zeros_(linear.bias)
    return linear


class ConvEncoder(nn.Module):
    """Flat ``[B, H * W * C]`` images -> conv layers (ReLU) -> ``[B, features]`` in HWC order.

    See :mod:`rlgear.config.conv` for the layout contract; torch convolves in NCHW,
    so the input is permuted in and the output permuted back before flattening.
    Rows of an image-plus-vector layout (``spec.vector_size > 0``) carry the
    vector after the image: it is appended to the conv features unchanged.
    """

    def __init__(self, spec: ConvSpec, orthogonal_init: bool):
        super().__init__()
        self.image_shape = spec.image_shape
        self.image_size = spec.image_size
        self.vector_size = spec.vector_size
        self.scale = spec.scale
        self.output_dim = spec.output_dim
        self.convs = nn.ModuleList()
        for layer in spec.layers:
            conv = nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel, layer.stride)
            if orthogonal_init:
                orthogonal_(conv.weight, math.sqrt(2))
                nn.init.zeros_(conv.bias)
            self.convs.append(conv)

    def feature_map(self, obs: torch.Tensor) -> torch.Tensor:
        """The last conv layer's output ``[B, H', W', C']`` (HWC), before flattening."""
        image = obs if self.vector_size == 0 else obs[:, : self.image_size]
        x = image.reshape(-1, *self.image_shape).permute(0, 3, 1, 2)
        if self.scale != 1.0:
            x = x * self.scale
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x.permute(0, 2, 3, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.feature_map(obs)
        features = x.reshape(x.shape[0], -1)
        if self.vector_size == 0:
            return features
        return torch.cat([features, obs[:, self.image_size :]], dim=-1)

    def weight_names(self, prefix: str, attribute: str) -> dict[str, str]:
        """``{torch parameter name: neutral name}``, the module being held as ``attribute``."""
        names = {}
        for i in range(len(self.convs)):
            names[f"{attribute}.convs.{i}.weight"] = f"{prefix}/conv_{i}/kernel"
            names[f"{attribute}.convs.{i}.bias"] = f"{prefix}/conv_{i}/bias"
        return names


def conv_encoder(observation_space: Space, model_config: Any) -> ConvEncoder | None:
    """The conv trunk for an image space (``model.conv_filters``), else None."""
    spec = conv_layers(observation_space, model_config)
    return None if spec is None else ConvEncoder(spec, bool(model_config.orthogonal_init))


def to_neutral_kernel(value: np.ndarray) -> np.ndarray:
    """torch layout -> neutral: dense ``[out, in]`` -> ``[in, out]``; conv ``[out, in, kh, kw]`` ->
    ``[kh, kw, in, out]``."""
    return value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T


def from_neutral_kernel(value: np.ndarray) -> np.ndarray:
    """The inverse of :func:`to_neutral_kernel`."""
    return value.transpose(3, 2, 0, 1) if value.ndim == 4 else value.T


class ActorCriticMLP(nn.Module):
    """Policy and value MLPs (separate, or sharing their hidden layers).

    Framework-neutral weight names: ``policy/hidden_<i>/{kernel,bias}``,
    ``value/hidden_<i>/...`` (or ``shared/hidden_<i>/...``), ``policy/output/...``,
    ``value/output/...`` and ``policy/log_std``; kernels are ``[in, out]``.

    With an ``encoder`` (the conv trunk of image observations) both MLPs read
    its features: one trunk, shared by the policy and the value function, as in
    Mnih et al. 2016 and the PPO Atari setup; its weights are ``shared/conv_<i>/...``.
    The relational module (``model.relational``) is an encoder in the same slot
    (:mod:`rlgear.plugins.backends.torch.relational`).
    """

    def __init__(
        self,
        obs_dim: int,
        num_outputs: int,
        continuous: bool,
        model_config: Any,
        encoder: nn.Module | None = None,
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
            self.shared_body = _dense_stack(obs_dim, sizes, act, hidden_gain)
        else:
            self.policy_body = _dense_stack(obs_dim, sizes, act, hidden_gain)
            self.value_body = _dense_stack(obs_dim, sizes, act, hidden_gain)
        # Small policy-head init keeps the first policy near uniform (Andrychowicz et al. 2021).
        self.policy_output = _head(last, head_outputs, 0.01 if ortho else None)
        self.value_output = _head(last, 1, 1.0 if ortho else None)
        if continuous:
            self.log_std = nn.Parameter(torch.full((head_outputs,), float(model_config.init_log_std)))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.encoder is not None:
            obs = self.encoder(obs)
        if self.shared:
            hidden = self.shared_body(obs)
            logits, values = self.policy_output(hidden), self.value_output(hidden)
        else:
            logits = self.policy_output(self.policy_body(obs))
            values = self.value_output(self.value_body(obs))
        if self.continuous:
            logits = torch.cat([logits, self.log_std.expand_as(logits)], dim=-1)
        return logits, values.squeeze(-1)

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("shared", "encoder")
        bodies = ["shared_body"] if self.shared else ["policy_body", "value_body"]
        for body in bodies:
            names.update(body_weight_names(getattr(self, body), body, body.removesuffix("_body")))
        for head in ("policy", "value"):
            names[f"{head}_output.weight"] = f"{head}/output/kernel"
            names[f"{head}_output.bias"] = f"{head}/output/bias"
        if self.continuous:
            names["log_std"] = "policy/log_std"
        return names


def body_weight_names(body: nn.Sequential, attribute: str, prefix: str) -> dict[str, str]:
    """Neutral names of a dense stack's layers: ``<attribute>.<i>.weight`` -> ``<prefix>/hidden_<k>/kernel``
    (and bias), ``k`` counting the Linear layers only (activations sit between them)."""
    names, index = {}, 0
    for i, module in enumerate(body):
        if isinstance(module, nn.Linear):
            names[f"{attribute}.{i}.weight"] = f"{prefix}/hidden_{index}/kernel"
            names[f"{attribute}.{i}.bias"] = f"{prefix}/hidden_{index}/bias"
            index += 1
    return names


def build_model(
    observation_space: Space, action_space: Space, num_outputs: int, model_config: Any
) -> nn.Module:
    """The catalog MLP (or LSTM with ``model.lstm``, attention memory with ``model.attention``, the
    relational encoder with ``model.relational``), or
    the user's ``model.custom`` class."""
    if model_config.custom:
        cls = resolve_object(model_config.custom, "model.custom")
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise PluginError(
                f"model.custom: '{model_config.custom}' must be a torch.nn.Module subclass "
                "(the backend in use is torch)"
            )
        try:
            return cls(
                observation_space, action_space, num_outputs, model_config, **model_config.custom_options
            )
        except TypeError as err:
            raise ConfigError(
                f"model.custom: {model_config.custom} could not be built: {err} (it is called as "
                "Class(observation_space, action_space, num_outputs, model_config, **custom_options))"
            ) from err
    if not model_config.hidden_sizes:
        raise ConfigError("model.hidden_sizes: expected at least one layer size")
    if getattr(model_config, "attention", False):
        from rlgear.plugins.backends.torch.attention import AttentionActorCritic

        return AttentionActorCritic(
            flat_dim(observation_space),
            num_outputs,
            action_space,
            model_config,
            conv_encoder(observation_space, model_config),
        )
    if getattr(model_config, "relational", False):
        from rlgear.plugins.backends.torch.relational import RelationalEncoder

        return ActorCriticMLP(
            0,
            num_outputs,
            isinstance(action_space, Box),
            model_config,
            RelationalEncoder(observation_space, model_config),
        )
    if getattr(model_config, "lstm", False):
        from rlgear.plugins.backends.torch.recurrent import LSTMActorCritic

        return LSTMActorCritic(
            flat_dim(observation_space),
            num_outputs,
            action_space,
            model_config,
            conv_encoder(observation_space, model_config),
        )
    return ActorCriticMLP(
        flat_dim(observation_space),
        num_outputs,
        isinstance(action_space, Box),
        model_config,
        conv_encoder(observation_space, model_config),
    )
