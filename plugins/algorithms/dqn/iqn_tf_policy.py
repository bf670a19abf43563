"""IQN on the TensorFlow backend: ``iqn_torch_policy``'s network and loss, term for term (see there).

The same network layout and weight names (``q/hidden_<i>``, ``q/tau_embedding``, ``q/output`` or
``q/value`` and ``q/advantage``; kernels ``[in, out]``) and the same tau generators, so an IQN
checkpoint moves between the backends and, given the same taus, acts the same.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS
from rlgear.errors import RLGearError
from rlgear.plugins.algorithms.dqn.iqn_config import (
    NEXT_TAUS,
    TARGET_TAUS,
    TAU_COLUMNS,
    TAUS,
    TauSampling,
    acting_taus,
)
from rlgear.plugins.algorithms.dqn.qrdqn_config import quantile_midpoints
from rlgear.plugins.algorithms.dqn.qrdqn_tf_policy import QRDQNTFPolicy
from rlgear.plugins.backends.tf import ACTIVATIONS, ConvEncoder, Dense, conv_encoder, tf
from rlgear.plugins.backends.tf.export_heads import QValueHead
from rlgear.policy import epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim
from rlgear.timestep import TimeStep


class IQNNetwork(tf.Module):
    """``Z_tau(s, a)`` for states and ``[B, M]`` taus (see the torch ``IQNNetwork``: same layout and names).

    ``__call__(obs)`` (the backend's model contract) gives the mean quantile values at K fixed evenly
    spaced taus, a deterministic Q (as the torch network's ``forward``); acting and learning call
    :meth:`quantile_values` with sampled taus.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        rng: np.random.Generator,
        encoder: ConvEncoder | None,
        num_cosines: int,
        fixed_taus: int,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        hidden_gain, head_gain = (math.sqrt(2), 1.0) if ortho else (None, None)
        self.encoder = encoder
        in_dim = obs_dim if encoder is None else encoder.output_dim
        *trunk, head = model_config.hidden_sizes
        self.hidden = []
        for size in trunk:
            self.hidden.append(Dense(in_dim, size, hidden_gain, rng))
            in_dim = size
        self.activation = ACTIVATIONS[model_config.activation]
        self.tau_embedding = Dense(num_cosines, in_dim, hidden_gain, rng)
        self.head = Dense(in_dim, head, hidden_gain, rng)
        self.dueling, self.num_actions = dueling, num_actions
        if dueling:
            self.value = Dense(head, 1, head_gain, rng)
            self.advantage = Dense(head, num_actions, head_gain, rng)
        else:
            self.output = Dense(head, num_actions, head_gain, rng)
        self.frequencies = tf.constant(np.pi * np.arange(num_cosines, dtype=np.float32), tf.float32)
        self.fixed_taus = tf.constant(quantile_midpoints(fixed_taus))

    def features(self, obs: tf.Tensor) -> tf.Tensor:
        features = obs if self.encoder is None else self.encoder(obs)
        for layer in self.hidden:
            features = self.activation(layer(features))
        return features

    def embed(self, taus: tf.Tensor) -> tf.Tensor:
        """``phi(tau)``, ``[B, M, d]`` for taus ``[B, M]`` (eq. 4)."""
        return tf.nn.relu(self.tau_embedding(tf.cos(taus[..., None] * self.frequencies)))

    def quantile_values(self, obs: tf.Tensor, taus: tf.Tensor) -> tf.Tensor:
        """``[B, M, actions]``: ``Z_tau(s, a)`` at each row's ``M`` taus."""
        hidden = self.activation(self.head(self.features(obs)[:, None, :] * self.embed(taus)))
        if not self.dueling:
            return self.output(hidden)
        advantages = self.advantage(hidden)
        return self.value(hidden) + advantages - tf.reduce_mean(advantages, axis=-1, keepdims=True)

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, None]:
        taus = tf.tile(self.fixed_taus[None, :], [tf.shape(obs)[0], 1])
        return tf.reduce_mean(self.quantile_values(obs, taus), axis=1), None

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        out = [] if self.encoder is None else self.encoder.named("q")
        for i, layer in enumerate(self.hidden):
            out += layer.named(f"q/hidden_{i}")
        out += self.head.named(f"q/hidden_{len(self.hidden)}")
        out += self.tau_embedding.named("q/tau_embedding")
        for head in ("value", "advantage") if self.dueling else ("output",):
            out += getattr(self, head).named(f"q/{head}")
        return out


class IQNTFPolicy(TauSampling, QRDQNTFPolicy):
    """QR-DQN's policy on an :class:`IQNNetwork`, with taus drawn from the policy's own generators."""

    loss_columns = (*QRDQNTFPolicy.loss_columns, *TAU_COLUMNS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.make_tau_rngs(config.seed)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> Any:
        training = self.config.training
        return IQNNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            self.config.model,
            training.dueling,
            self.init_rng,
            conv_encoder(self.observation_space, self.config.model, self.init_rng),
            training.num_cosines,
            training.num_quantile_samples,
        )

    def _compile(self) -> None:
        super()._compile()
        tau_spec = tf.TensorSpec([None, self.config.training.num_quantile_samples], tf.float32)
        self._sampled_q = self.function(self._sampled_q_impl, [self._obs_spec, tau_spec])

    def _sampled_q_impl(self, obs: tf.Tensor, taus: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(self.model.quantile_values(obs, taus), axis=1)

    def export_head(self, explore: bool) -> QValueHead:
        """Refused: IQN's Q-values are means over taus sampled at every step, and an exported graph
        carries no generator; a graph at fixed taus would act otherwise than this policy (and fail
        ``rlgear export --check``), so there is none."""
        raise RLGearError(
            "iqn: acting averages the quantile values at taus sampled afresh at every step, which an "
            "exported graph cannot draw; iqn checkpoints are not exported (act with rlgear.run.agent)"
        )

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        obs = np.asarray(self.preprocess(timestep.observation), np.float32)
        taus = acting_taus(self.acting_tau_rng, len(obs), self.config.training)
        q_values = self._sampled_q(tf.convert_to_tensor(obs), tf.convert_to_tensor(taus)).numpy()
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        obs, next_obs, taus = batch[SB.OBS], batch[NEXT_OBS], batch[TAUS]
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        z = self.model.quantile_values(obs, taus)  # [B, N, actions]
        taken = tf.gather(z, actions, axis=2, batch_dims=1)[:, :, 0]  # [B, N]
        # a*: greedy on the mean over K taus, of the online network (double Q) or the target's
        chooser_net = self.model if training.double_q else self.target_model
        chooser = tf.stop_gradient(
            tf.reduce_mean(chooser_net.quantile_values(next_obs, batch[NEXT_TAUS]), axis=1)
        )
        next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs
        if next_mask is not None:
            chooser = tf.where(next_mask, chooser, tf.constant(-np.inf, chooser.dtype))
        next_actions = tf.argmax(chooser, axis=1, output_type=tf.int32)[:, None]
        next_z = self.target_model.quantile_values(next_obs, batch[TARGET_TAUS])  # [B, N', actions]
        chosen = tf.gather(next_z, next_actions, axis=2, batch_dims=1)[:, :, 0]  # [B, N']
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        rewards = tf.cast(batch[SB.REWARDS], taken.dtype)[:, None]
        discounts = tf.cast(batch[SB.DISCOUNTS], taken.dtype)[:, None]
        targets = tf.stop_gradient(rewards + discounts * chosen)
        return self.weighted_quantile_loss(taken, targets, taus, batch)
