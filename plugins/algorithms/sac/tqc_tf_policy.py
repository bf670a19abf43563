"""TQC on the TensorFlow backend: ``tqc_torch_policy``'s losses, term for term (see there)."""

from __future__ import annotations

from typing import Any

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.sac.tf_policy import SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.losses import quantile_huber_loss
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class TQCTFPolicy(SACTFPolicy):
    """SAC's actor, temperature and target copies; ``n_critics`` critics of ``n_quantiles`` atoms."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_critics = int(config.training.n_critics)  # read by make_model()
        super().__init__(observation_space, action_space, config)

    def critic_outputs(self) -> int:
        return int(self.config.training.n_quantiles)

    def quantiles(self, obs: tf.Tensor, actions: tf.Tensor, which: str = "online") -> tf.Tensor:
        """``[K, B, N]`` atoms at ``(obs, actions)``: ``online``, ``frozen`` or ``target``."""
        inputs = tf.concat([obs, actions], axis=-1)
        if which == "target":
            return self.target_model.critic(inputs)
        params = None
        if which == "frozen":
            critic = self.model.critic
            params = [tf.stop_gradient(v) for v in [*critic.kernels, *critic.biases]]
        return self.model.critic(inputs, params)

    def quantile_huber_loss(
        self, atoms: tf.Tensor, targets: tf.Tensor, batch: dict[str, tf.Tensor]
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The critic loss of ``atoms`` ``[K, B, N]`` against ``targets`` ``[B, M]``, and ``|TD error|``
        per row: the torch policy's, every critic's atoms pooled per row."""
        critics, n = atoms.shape[0], atoms.shape[-1]
        tau = (tf.range(n, dtype=atoms.dtype) + 0.5) / n
        pooled = tf.reshape(tf.transpose(atoms, [1, 0, 2]), [-1, critics * n])
        per_row = quantile_huber_loss(pooled, targets, tf.tile(tau, [critics]), 1.0) / (critics * n)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        row_means = tf.reduce_mean(tf.stop_gradient(atoms), axis=2) - tf.reduce_mean(targets, axis=1)
        return tf.reduce_mean(per_row), tf.reduce_mean(tf.abs(row_means), axis=0)

    def critic_terms(self, batch: dict[str, tf.Tensor], alpha: tf.Tensor, next_noise: tf.Tensor):
        """The quantile critics' loss against the truncated target (the torch twin's docstring)."""
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
        next_atoms = self.quantiles(next_obs, next_actions, "target")  # [K, B, N]
        pooled = tf.reshape(tf.transpose(next_atoms, [1, 0, 2]), [tf.shape(obs)[0], -1])
        kept = tf.sort(pooled, axis=1)[:, : self.config.training.kept_atoms()]
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32)[:, None]
            + tf.cast(batch[SB.DISCOUNTS], tf.float32)[:, None] * (kept - alpha * next_logp[:, None])
        )
        atoms = self.quantiles(obs, self.scaled_actions(batch[SB.ACTIONS]))
        critic_loss, td_errors = self.quantile_huber_loss(atoms, targets, batch)
        return critic_loss, td_errors, atoms, targets

    def policy_q(self, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(
            self.quantiles(obs, actions, "frozen"), axis=(0, 2)
        )  # no gradient to the critics
