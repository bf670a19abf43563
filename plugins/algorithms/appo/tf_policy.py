"""APPO's loss on the TensorFlow backend (the same loss as ``torch_policy``, op for op; see there)."""

from __future__ import annotations

from typing import Any

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.algorithms.appo.kl import AdaptiveKLCoeff
from rlgear.plugins.backends.tf import TargetModel, VTraceTFPolicy, clipped_surrogate, mean_over, tf
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space

#: RLlib's APPO caps the behaviour-over-target correction of the ratio at 2.
MAX_BEHAVIOUR_OVER_TARGET = 2.0


class APPOTFPolicy(AdaptiveKLCoeff, TargetNetworkState, TargetModel, MinibatchSGD, VTraceTFPolicy):
    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        # The coefficient adapts during the run: a variable, so the compiled loss never retraces.
        self._kl_coeff = tf.Variable(float(config.training.kl_coeff), dtype=tf.float32, trainable=False)
        super().__init__(observation_space, action_space, config)
        self.make_target_model()

    @property
    def kl_coeff(self) -> float:
        return float(self._kl_coeff.numpy())

    @kl_coeff.setter
    def kl_coeff(self, value: float) -> None:
        self._kl_coeff.assign(value)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        out = self.unroll(batch)
        logp, values = out.logp, out.values
        behaviour_logp = tf.cast(self.time_major(batch, SB.ACTION_LOGP), logp.dtype)
        learned = self.learned_steps(batch, values.dtype)
        if training.use_target_network:
            target = self.unroll(batch, self.target_model)
            target_logp = tf.stop_gradient(target.logp)
            log_rhos = target_logp - behaviour_logp
            behaviour_over_target = tf.clip_by_value(tf.exp(-log_rhos), 0.0, MAX_BEHAVIOUR_OVER_TARGET)
            ratio = behaviour_over_target * tf.exp(logp - behaviour_logp)
        else:
            log_rhos = tf.stop_gradient(logp) - behaviour_logp
            ratio = tf.exp(logp - behaviour_logp)
        vs, pg_advantages = self.vtrace_targets(batch, log_rhos, values)
        ratio = ratio[:-1]
        policy_loss = -mean_over(clipped_surrogate(pg_advantages, ratio, training.clip_param), learned)
        vf_loss = 0.5 * mean_over((values[:-1] - vs) ** 2, learned)
        mean_entropy = mean_over(out.entropy[:-1], learned)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
        clipped = tf.cast(tf.abs(tf.stop_gradient(ratio) - 1.0) > training.clip_param, values.dtype)
        stats = {
            "policy_loss": policy_loss,
            "vf_loss": vf_loss,
            "entropy": mean_entropy,
            "mean_rho": mean_over(tf.exp(log_rhos[:-1]), learned),
            "clip_fraction": mean_over(clipped, learned),
        }
        if training.use_target_network:
            kl = target.dist.kl(out.dist)  # KL(pi_target || pi) per step, [N*(T+1)]
            kl = mean_over(tf.transpose(tf.reshape(kl, [tf.shape(logp)[1], logp.shape[0]]))[:-1], learned)
            if training.use_kl_loss:
                loss = loss + self._kl_coeff * kl
            stats["kl"] = kl
        return loss, stats
