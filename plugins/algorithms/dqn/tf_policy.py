"""DQN on the TensorFlow backend: the Q-network, epsilon-greedy acting, the target network and the TD loss.

The same network (weight names ``q/...``), loss and target-network rules as
``torch_policy``, so DQN checkpoints move between the backends too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.execution.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.execution.schedules import piecewise_linear
from rlgear.execution.target_network import TargetNetworkState
from rlgear.plugins.backends.tf import (
    ACTIVATIONS,
    ConvEncoder,
    Dense,
    TFPolicy,
    build_model,
    conv_encoder,
    named_variables,
    tf,
)
from rlgear.policy import epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class QNetwork(tf.Module):
    """An MLP from observations to one Q-value per action (see the torch ``QNetwork``).

    With ``dueling``, ``Q = V + A - mean(A)`` (Wang et al. 2016, eq. 9). Returns
    ``(q_values, None)`` (the backend's model contract). Weight names:
    ``q/conv_<i>/{kernel,bias}`` (image observations), ``q/hidden_<i>/{kernel,bias}``, then
    ``q/output/...`` or ``q/value/...`` and ``q/advantage/...``; kernels ``[in, out]``.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        rng: np.random.Generator,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        self.encoder = encoder
        self.hidden = []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            self.hidden.append(Dense(in_dim, size, math.sqrt(2) if ortho else None, rng))
            in_dim = size
        self.activation = ACTIVATIONS[model_config.activation]
        self.dueling = dueling
        head_gain = 1.0 if ortho else None
        if dueling:
            self.value = Dense(in_dim, 1, head_gain, rng)
            self.advantage = Dense(in_dim, num_actions, head_gain, rng)
        else:
            self.output = Dense(in_dim, num_actions, head_gain, rng)

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, None]:
        features = obs if self.encoder is None else self.encoder(obs)
        for layer in self.hidden:
            features = self.activation(layer(features))
        if not self.dueling:
            return self.output(features), None
        advantages = self.advantage(features)
        return self.value(features) + advantages - tf.reduce_mean(advantages, axis=-1, keepdims=True), None

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        out = [] if self.encoder is None else self.encoder.named("q")
        for i, layer in enumerate(self.hidden):
            out += layer.named(f"q/hidden_{i}")
        for head in ("value", "advantage") if self.dueling else ("output",):
            out += getattr(self, head).named(f"q/{head}")
        return out


def _huber(x: tf.Tensor, delta: float) -> tf.Tensor:
    """``torch.nn.functional.huber_loss`` per element: quadratic within ``delta``, linear beyond."""
    abs_x = tf.abs(x)
    return tf.where(abs_x < delta, 0.5 * x * x, delta * (abs_x - 0.5 * delta))


class DQNTFPolicy(TargetNetworkState, TFPolicy):
    """Epsilon-greedy acting on a Q-network, learning from replayed n-step transitions.

    Beyond the TFPolicy contract it keeps a target network (updated by
    :meth:`update_target`, saved in :meth:`get_state` under ``target/``) and,
    after every :meth:`learn_on_batch`, the per-row TD errors in
    :attr:`td_errors` for prioritized replay.
    """

    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS, NEXT_ACTION_MASK, WEIGHTS)
    observation_columns = (SB.OBS, NEXT_OBS)
    row_outputs = ("td_errors",)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete):
            raise TypeError(f"DQN needs discrete actions, got {action_space!r}")
        self.target_model = None
        super().__init__(observation_space, action_space, config)  # builds make_model()'s Q-network
        # The target network starts as a copy of the online one (Mnih et al. 2015).
        self.target_model = self.make_model()
        self.target_variables = named_variables(self.target_model)
        self.update_target(1.0)
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)
        #: |TD error| per row of the last learn_on_batch() batch, before that update.
        self.td_errors = np.zeros(0, dtype=np.float32)

    def make_model(self) -> Any:
        model_config = self.config.model
        if model_config.custom:  # its dist_inputs are read as the Q-values
            return build_model(
                self.observation_space, self.action_space, self.num_outputs, model_config, self.init_rng
            )
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            self.config.training.dueling,
            self.init_rng,
            conv_encoder(self.observation_space, model_config, self.init_rng),
        )

    # --- acting -------------------------------------------------------------------
    def epsilon(self) -> float:
        """The probability of a random action at ``global_timestep`` (linear decay)."""
        training = self.config.training
        if self.global_timestep >= training.epsilon_timesteps:
            return float(training.epsilon_final)
        points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
        return piecewise_linear(points, self.global_timestep)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        q_values, _ = self._forward(tf.convert_to_tensor(self.preprocess(timestep.observation)))
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values.numpy(), epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    # --- learning -----------------------------------------------------------------
    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step on ``batch``; afterwards :attr:`td_errors` holds its ``|TD error|`` per row."""
        self.td_errors = np.zeros(len(batch), dtype=np.float32)
        return super().learn_on_batch(batch)

    def compute_td_errors(self, batch: SB) -> np.ndarray:
        """``|TD error|`` of every row of ``batch`` under the current networks, without learning.

        Ape-X's rollout workers give their fragments these initial priorities before sending them
        to replay (Horgan et al. 2018); the same :meth:`loss`, run eagerly without a gradient tape.
        """
        _, stats = self.loss(self.to_tensors(batch, self.learner_columns(self.loss_columns)))
        return stats["td_errors"].numpy().astype(np.float32)

    def on_row_outputs(self, rows: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        self.td_errors[rows] = outputs["td_errors"]

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        n = tf.shape(obs)[0]
        if training.double_q:  # one online pass over obs and next_obs: it also picks the next action
            q_both, _ = self.model(tf.concat([obs, next_obs], axis=0))
            q_values, next_q_online = q_both[:n], tf.stop_gradient(q_both[n:])
        else:
            q_values, _ = self.model(obs)
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        q_taken = tf.gather(q_values, actions, axis=1, batch_dims=1)[:, 0]
        next_q_target, _ = self.target_model(next_obs)
        next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs: the max is over those
        if next_mask is not None:
            minus_inf = tf.constant(-np.inf, next_q_target.dtype)
            next_q_target = tf.where(next_mask, next_q_target, minus_inf)
        if training.double_q:  # van Hasselt et al. 2016: the online network selects, the target evaluates
            if next_mask is not None:
                next_q_online = tf.where(next_mask, next_q_online, minus_inf)
            next_actions = tf.argmax(next_q_online, axis=1, output_type=tf.int32)[:, None]
            next_q = tf.gather(next_q_target, next_actions, axis=1, batch_dims=1)[:, 0]
        else:
            next_q = tf.reduce_max(next_q_target, axis=1)
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], q_taken.dtype) + tf.cast(batch[SB.DISCOUNTS], q_taken.dtype) * next_q
        )
        td_errors = q_taken - targets
        if training.td_error_loss_fn == "huber":  # quadratic near 0, linear beyond huber_delta
            per_row = _huber(td_errors, training.huber_delta)
        else:
            per_row = 0.5 * tf.square(td_errors)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        loss = tf.reduce_mean(per_row)
        abs_td = tf.abs(tf.stop_gradient(td_errors))
        return loss, {
            "mean_q": tf.reduce_mean(tf.stop_gradient(q_taken)),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(abs_td),
            "td_errors": abs_td,
        }

    # --- the target network ---------------------------------------------------------
    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target``; ``tau=1`` copies (exactly)."""
        for (_, target), (_, online) in zip(self.target_variables, self.named_variables, strict=True):
            if tau >= 1.0:
                target.assign(online)
            else:
                target.assign(target + tau * (online - target))  # torch's lerp_

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target network's weights, named and laid out like :meth:`get_weights`."""
        return {name: var.numpy().copy() for name, var in self.target_variables}

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.check_weights(weights)  # checks every weight before changing any
        self.assign_weights(self.target_variables, weights)

    # --- weights and state -------------------------------------------------------------
    def check_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Raise, naming the weight, if ``weights`` do not fit the target network (changes nothing)."""
        self.check_weights(weights)
