"""QR-DQN on the TensorFlow backend: ``qrdqn_torch_policy``'s network and loss, term for term (see there).

The same network (DQN's ``QNetwork`` with ``num_quantiles`` outputs per action, weight names
``q/...``), so QR-DQN checkpoints move between the backends.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.dqn.qrdqn_config import quantile_midpoints
from rlgear.plugins.algorithms.dqn.rainbow import zero_noise
from rlgear.plugins.algorithms.dqn.tf_policy import DQNTFPolicy, QNetwork
from rlgear.plugins.backends.tf import build_model, conv_encoder, tf
from rlgear.plugins.backends.tf.export_heads import QValueHead
from rlgear.plugins.backends.tf.losses import quantile_huber_loss
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space, flat_dim


class _QuantileMeans(tf.Module):
    """The flat input -> ``[B, actions]`` Q-values, each the mean of its quantiles, for export."""

    def __init__(self, model: Any, num_quantiles: int):
        super().__init__()
        self.model, self.num_quantiles = model, num_quantiles

    def __call__(self, flat: tf.Tensor) -> tf.Tensor:
        outputs = self.model(flat)[0]
        return tf.reduce_mean(tf.reshape(outputs, [tf.shape(outputs)[0], -1, self.num_quantiles]), axis=-1)


class QRDQNTFPolicy(DQNTFPolicy):
    """DQN's policy (acting, target network, noise, checkpoints) with quantile outputs and loss."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_quantiles = int(config.training.num_quantiles)
        #: The quantile fractions tau_i = (2i + 1) / (2N).
        self.taus = tf.constant(quantile_midpoints(self.num_quantiles))
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> Any:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:  # its dist_inputs are read as the quantiles, [B, actions * N]
            outputs = self.num_outputs * training.num_quantiles
            return build_model(
                self.observation_space, self.action_space, outputs, model_config, self.init_rng
            )
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            training.dueling,
            self.init_rng,
            conv_encoder(self.observation_space, model_config, self.init_rng),
            num_atoms=training.num_quantiles,
            noisy=training.noisy,
            sigma0=training.sigma0,
        )

    def quantiles(self, outputs: tf.Tensor) -> tf.Tensor:
        """The model's flat outputs as quantile estimates ``[B, actions, N]``."""
        return tf.reshape(outputs, [tf.shape(outputs)[0], -1, self.num_quantiles])

    def q_values(self, outputs: tf.Tensor) -> tf.Tensor:
        """``[B, actions]``: the mean of each action's quantiles."""
        return tf.reduce_mean(self.quantiles(outputs), axis=-1)

    def acting_q_values(self, outputs: np.ndarray) -> np.ndarray:
        return outputs.reshape(len(outputs), -1, self.num_quantiles).mean(axis=-1)

    def export_head(self, explore: bool) -> QValueHead:
        """Greedy on the quantiles' means, noisy layers at their mean weights (on a copy)."""
        if explore:
            raise explore_refused(
                "qrdqn explores epsilon-greedily on a schedule of env steps (or with the noise of its "
                "noisy layers), which an exported graph does not carry"
            )
        model = copy.deepcopy(self.model)
        if self.config.training.noisy:
            zero_noise(model.noisy_layers())
        return QValueHead(_QuantileMeans(model, self.num_quantiles), self.action_space.n)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        n = tf.shape(obs)[0]
        if training.double_q:  # one online pass over obs and next_obs: it also picks the next action
            both, _ = self.model(tf.concat([obs, next_obs], axis=0))
            outputs, next_online = both[:n], tf.stop_gradient(both[n:])
        else:
            outputs, _ = self.model(obs)
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        taken = tf.gather(self.quantiles(outputs), actions, axis=1, batch_dims=1)[:, 0]  # [B, N]
        next_quantiles = tf.stop_gradient(self.quantiles(self.target_model(next_obs)[0]))
        # Double Q: the online network's mean picks the next action; else the target's.
        if training.double_q:
            chooser = self.q_values(next_online)
        else:
            chooser = tf.reduce_mean(next_quantiles, axis=-1)
        next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs
        if next_mask is not None:
            chooser = tf.where(next_mask, chooser, tf.constant(-np.inf, chooser.dtype))
        next_actions = tf.argmax(chooser, axis=1, output_type=tf.int32)[:, None]
        chosen = tf.gather(next_quantiles, next_actions, axis=1, batch_dims=1)[:, 0]  # [B, N]
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        rewards = tf.cast(batch[SB.REWARDS], taken.dtype)[:, None]
        discounts = tf.cast(batch[SB.DISCOUNTS], taken.dtype)[:, None]
        targets = tf.stop_gradient(rewards + discounts * chosen)
        return self.weighted_quantile_loss(taken, targets, self.taus, batch)

    def weighted_quantile_loss(
        self, taken: tf.Tensor, targets: tf.Tensor, taus: tf.Tensor, batch: dict[str, tf.Tensor]
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The quantile Huber loss of each row, weighted by prioritized replay's importance weights and
        averaged, with the unweighted row loss as ``td_errors`` (iqn shares this with qrdqn)."""
        row_loss = quantile_huber_loss(taken, targets, taus, float(self.config.training.kappa))
        per_row = row_loss
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        row_loss = tf.stop_gradient(row_loss)
        return tf.reduce_mean(per_row), {
            "mean_q": tf.reduce_mean(tf.stop_gradient(taken)),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_quantile_loss": tf.reduce_mean(row_loss),
            "td_errors": row_loss,  # the priority: the per-row loss before the importance weight
        }
