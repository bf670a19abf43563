"""PPO's loss on the TensorFlow backend (the same loss as ``torch_policy``, op for op)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.schedules import piecewise_linear
from rlgear.plugins.algorithms.ppo.gsde_tf import SDEActingTF
from rlgear.plugins.backends.tf import TFPolicy, clipped_surrogate, masked_mean, normalize_advantages, tf
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class PPOTFPolicy(SDEActingTF, MinibatchSGD, TFPolicy):
    """PPO's clipped surrogate; ``training.use_sde`` explores with gSDE (:class:`SDEActingTF`)."""

    loss_columns = (SB.OBS, SB.ACTIONS, SB.ACTION_LOGP, SB.ADVANTAGES, SB.VALUE_TARGETS, SB.VF_PREDS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if config.training.use_sde:
            self.sde_setup(observation_space, action_space, config)
        # The clip range follows a schedule: a variable, so the compiled loss never retraces.
        self._clip = tf.Variable(0.0, dtype=tf.float32, trainable=False, name="clip_param")
        super().__init__(observation_space, action_space, config)

    def clip_param(self) -> float:
        training = self.config.training
        if training.clip_param_schedule:
            return piecewise_linear(training.clip_param_schedule, self.global_timestep)
        return training.clip_param

    # The traced loss reads the clip from a variable (no retrace when the schedule moves), so
    # every entry point that runs the loss sets it first.
    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        self._clip.assign(self.clip_param())
        return super().learn_on_batch(batch)

    def compute_gradients(self, batch: SB) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        self._clip.assign(self.clip_param())
        return super().compute_gradients(batch)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        clip = self._clip
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        log_ratio = logp - batch[SB.ACTION_LOGP]
        ratio = tf.exp(log_ratio)

        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        surrogate = clipped_surrogate(advantages, ratio, clip)
        policy_loss = -masked_mean(surrogate, mask)

        targets = batch[SB.VALUE_TARGETS]
        vf_loss = (values - targets) ** 2
        if training.vf_clip_param is not None:
            old = batch[SB.VF_PREDS]
            clipped = old + tf.clip_by_value(values - old, -training.vf_clip_param, training.vf_clip_param)
            vf_loss = tf.maximum(vf_loss, (clipped - targets) ** 2)
        vf_loss = 0.5 * masked_mean(vf_loss, mask)
        entropy = masked_mean(dist.entropy(), mask)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy

        # Low-variance KL estimator (Schulman, "Approximating KL divergence", 2020).
        approx_kl = tf.stop_gradient(masked_mean((ratio - 1.0) - log_ratio, mask))
        clip_fraction = tf.stop_gradient(masked_mean(tf.cast(tf.abs(ratio - 1.0) > clip, tf.float32), mask))
        return loss, {
            "policy_loss": policy_loss,
            "vf_loss": vf_loss,
            "entropy": entropy,
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }
