"""PQN on the TensorFlow backend: the same network (weight names ``q/...``), acting and loss as
``torch_policy``, so PQN checkpoints move between the backends."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from rlgear.blocks.q_inference import LAYER_NORM_EPSILON
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.pqn.acting import EpsilonGreedyState, act_on_q_values
from rlgear.plugins.backends.tf import (
    ACTIVATIONS,
    ConvEncoder,
    Dense,
    TFPolicy,
    build_model,
    conv_encoder,
    tf,
)
from rlgear.plugins.backends.tf.export_heads import QValueHead
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class LayerNorm(tf.Module):
    """``torch.nn.LayerNorm`` over the last axis: biased variance, epsilon 1e-5, ``scale`` starting at 1
    and ``offset`` at 0 (Ba et al. 2016)."""

    def __init__(self, size: int):
        super().__init__()
        self.scale = tf.Variable(np.ones(size, np.float32), name="scale")
        self.offset = tf.Variable(np.zeros(size, np.float32), name="offset")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * self.scale + self.offset

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        return [(f"{prefix}/scale", self.scale), (f"{prefix}/offset", self.offset)]


class PQNQNetwork(tf.Module):
    """The torch ``PQNQNetwork``: dense -> LayerNorm (``layer_norm``) -> activation per hidden layer,
    then ``q/output``; returns ``(q_values, None)``. Weight names: ``q/conv_<i>/...`` (images),
    ``q/hidden_<i>/{kernel,bias}``, ``q/norm_<i>/{scale,offset}``, ``q/output/{kernel,bias}``."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        layer_norm: bool,
        rng: np.random.Generator,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        self.encoder = encoder
        self.hidden, self.norms = [], []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            self.hidden.append(Dense(in_dim, size, math.sqrt(2) if ortho else None, rng))
            if layer_norm:
                self.norms.append(LayerNorm(size))
            in_dim = size
        self.activation = ACTIVATIONS[model_config.activation]
        self.output = Dense(in_dim, num_actions, 1.0 if ortho else None, rng)

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, None]:
        features = obs if self.encoder is None else self.encoder(obs)
        for i, layer in enumerate(self.hidden):
            features = layer(features)
            if self.norms:
                features = self.norms[i](features)
            features = self.activation(features)
        return self.output(features), None

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        """In the order of the torch network's ``named_parameters()`` (layer by layer)."""
        out = [] if self.encoder is None else self.encoder.named("q")
        for i, layer in enumerate(self.hidden):
            out += layer.named(f"q/hidden_{i}")
            if self.norms:
                out += self.norms[i].named(f"q/norm_{i}")
        return out + self.output.named("q/output")


class _QValues(tf.Module):
    """The flat input -> ``[B, actions]`` Q-values, for export."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def __call__(self, flat: tf.Tensor) -> tf.Tensor:
        return self.model(flat)[0]


class PQNTFPolicy(EpsilonGreedyState, MinibatchSGD, TFPolicy):
    """Epsilon-greedy acting on the online Q-network (recording ``max_a Q`` as ``vf_preds``);
    epochs of minibatch SGD on Q(lambda) targets (see the torch ``PQNTorchPolicy``)."""

    loss_columns = (SB.OBS, SB.ACTIONS, SB.VALUE_TARGETS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete):
            raise TypeError(f"PQN needs discrete actions, got {action_space!r}")
        super().__init__(observation_space, action_space, config)  # its acting_rng draws epsilon-greedy

    def make_model(self) -> Any:
        model_config = self.config.model
        if model_config.custom:  # its dist_inputs are read as the Q-values
            return build_model(
                self.observation_space, self.action_space, self.num_outputs, model_config, self.init_rng
            )
        return PQNQNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            self.config.training.layer_norm,
            self.init_rng,
            conv_encoder(self.observation_space, model_config, self.init_rng),
        )

    # --- acting -------------------------------------------------------------------
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        outputs, _ = self._forward(tf.constant(self.preprocess(timestep.observation)))
        q_values = outputs.numpy()
        epsilon = self.epsilon() if explore else 0.0
        actions, extras = act_on_q_values(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, extras

    def export_head(self, explore: bool) -> QValueHead:
        """The acting part of an exported graph: greedy on the Q-values."""
        if explore:
            raise explore_refused(
                "pqn explores epsilon-greedily on a schedule of env steps, which an exported graph does not carry"
            )
        return QValueHead(_QValues(copy.deepcopy(self.model)), self.action_space.n)

    # --- learning -----------------------------------------------------------------
    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        q_values, _ = self.model(batch[SB.OBS])
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        q_taken = tf.gather(q_values, actions, axis=1, batch_dims=1)[:, 0]
        targets = tf.cast(batch[SB.VALUE_TARGETS], q_taken.dtype)
        td_errors = q_taken - targets
        loss = 0.5 * tf.reduce_mean(tf.square(td_errors))
        return loss, {
            "mean_q": tf.stop_gradient(tf.reduce_mean(q_taken)),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.stop_gradient(tf.reduce_mean(tf.abs(td_errors))),
        }
