"""IMPALA's V-trace loss on the TensorFlow backend (the same loss as ``torch_policy``, op for op)."""

from __future__ import annotations

from rlgear.plugins.backends.tf import VTraceTFPolicy, mean_over, tf
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class IMPALATFPolicy(MinibatchSGD, VTraceTFPolicy):
    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        out = self.unroll(batch)
        logp, values = out.logp, out.values
        behaviour_logp = tf.cast(self.time_major(batch, SB.ACTION_LOGP), logp.dtype)
        vs, pg_advantages = self.vtrace_targets(batch, logp - behaviour_logp, values)
        learned = self.learned_steps(batch, values.dtype)
        policy_loss = -mean_over(logp[:-1] * pg_advantages, learned)
        vf_loss = 0.5 * mean_over((values[:-1] - vs) ** 2, learned)
        mean_entropy = mean_over(out.entropy[:-1], learned)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
        rhos = tf.exp(tf.stop_gradient(logp)[:-1] - behaviour_logp[:-1])
        return loss, {
            "policy_loss": policy_loss,
            "vf_loss": vf_loss,
            "entropy": mean_entropy,
            "mean_rho": mean_over(rhos, learned),
        }
