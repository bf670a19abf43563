"""SAC on the TensorFlow backend: the same network, weight names and losses as ``torch_policy``."""

from __future__ import annotations

import math
from typing import Any

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.squashed_inference import LOG_STD_MAX, LOG_STD_MIN
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.backends.tf import OffPolicyTFPolicy, tf
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class SACTFPolicy(TargetNetworkState, OffPolicyTFPolicy):
    """Twin critics with target copies, a tanh-squashed Gaussian actor and the log temperature ``log_alpha``.

    Weights as ``SACTorchPolicy``'s: ``policy/...`` (means then log stds), ``q/...`` (``[2, in, out]``),
    ``log_alpha`` (``[1]``). ``last_noise`` holds the step's two standard-normal draws (actor, target).
    """

    num_critics = 2
    target_parts = ("critic",)
    gaussian_actor = True
    #: whether the class acts and learns with gSDE's noise (``training.use_sde``)
    builds_sde = False

    def __new__(cls, *args: Any, **kwargs: Any) -> SACTFPolicy:
        """A Discrete action space builds discrete SAC's policy (``discrete_tf_policy``), ``use_sde`` the
        gSDE one (``sde_tf_policy``), as on torch."""
        action_space = args[1] if len(args) > 1 else kwargs.get("action_space")
        config = args[2] if len(args) > 2 else kwargs.get("config")
        use_sde = bool(getattr(getattr(config, "training", None), "use_sde", False))
        if cls is SACTFPolicy and isinstance(action_space, Discrete):
            if use_sde:
                raise TypeError("training.use_sde: gSDE needs Box actions, got a Discrete action space")
            from rlgear.plugins.algorithms.sac.discrete_tf_policy import DiscreteSACTFPolicy

            cls = DiscreteSACTFPolicy
        elif use_sde and cls is SACTFPolicy:
            from rlgear.plugins.algorithms.sac.sde_tf_policy import SDESACTFPolicy

            cls = SDESACTFPolicy
        elif use_sde and not cls.builds_sde:
            raise TypeError(f"training.use_sde: gSDE is built for sac's own policy, not {cls.__name__}")
        return super().__new__(cls)

    def initial_log_alpha(self) -> float:
        return math.log(self.config.training.initial_alpha)

    def learns_alpha(self) -> bool:
        return bool(self.config.training.tune_alpha)

    @property
    def target_entropy(self) -> float:
        target = self.config.training.target_entropy
        return -float(self.num_actions) if target is None else float(target)

    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        return [(batch_size, self.num_actions)] * 2  # the actor's sample at s, the target's at s'

    def squashed_sample(self, obs: tf.Tensor, noise: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(a, log pi(a|s))`` with ``a = tanh(mean + std * noise)``; the tanh correction written as
        ``2 (log 2 - u - softplus(-2u))`` (finite where tanh saturates), as on torch."""
        out = self.model.actor(obs)
        mean, log_std = out[:, : self.num_actions], out[:, self.num_actions :]
        log_std = tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)
        pre_tanh = mean + tf.exp(log_std) * noise
        gaussian_logp = tf.reduce_sum(-0.5 * tf.square(noise) - log_std - _HALF_LOG_2PI, axis=-1)
        log_det = tf.reduce_sum(2.0 * (_LOG_2 - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh)), axis=-1)
        return tf.tanh(pre_tanh), gaussian_logp - log_det

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        obs = batch[SB.OBS]
        actor_noise, next_noise = noise
        log_alpha = self.model.log_alpha
        alpha = tf.stop_gradient(tf.exp(log_alpha))[0]
        critic_loss, td_errors, q_taken, targets = self.critic_terms(batch, alpha, next_noise)

        actions, logp = self.squashed_sample(obs, actor_noise)
        actor_loss = tf.reduce_mean(alpha * logp - self.policy_q(obs, actions))
        alpha_loss = -tf.reduce_mean(log_alpha * (tf.stop_gradient(logp) + self.target_entropy))
        loss = critic_loss + actor_loss
        if self.learns_alpha():
            loss = loss + alpha_loss
        stats = {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": alpha,
            "entropy": -tf.reduce_mean(logp),
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        return loss, stats, td_errors

    def critic_terms(self, batch: dict[str, tf.Tensor], alpha: tf.Tensor, next_noise: tf.Tensor):
        """``(critic loss, |TD error| per row, the critics' values at the taken actions, the targets)``:
        the part of the loss a critic variant (TQC's quantile critics) replaces."""
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        next_actions, next_logp = self.squashed_sample(next_obs, next_noise)
        next_q = tf.reduce_min(self.q_values(next_obs, next_actions, "target"), axis=0)
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32)
            + tf.cast(batch[SB.DISCOUNTS], tf.float32) * (next_q - alpha * next_logp)
        )
        q_taken = self.q_values(obs, self.scaled_actions(batch[SB.ACTIONS]))
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)
        return critic_loss, td_errors, q_taken, targets

    def policy_q(self, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """The value the actor maximizes at its own actions, with no gradient to the critics:
        the smaller of the twin critics (TQC: the mean of all atoms)."""
        return tf.reduce_min(self.q_values(obs, actions, "frozen"), axis=0)
