"""A3C's loss on the TensorFlow backend (the same loss as ``torch_policy``).

Workers call ``compute_gradients`` (the base class) on their own batch; the
learner calls ``apply_gradients``. ``learn_on_batch`` (one step on the whole
batch) is what the learner would do with the same batch itself.
"""

from __future__ import annotations

from rlgear.plugins.backends.tf import TFPolicy, tf
from rlgear.sample_batch import SampleBatch as SB


class A3CTFPolicy(TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        dist_inputs, values = self.model(batch[SB.OBS])
        dist = self.dist_class(dist_inputs)
        logp = dist.logp(batch[SB.ACTIONS])
        policy_loss = -tf.reduce_mean(logp * batch[SB.ADVANTAGES])
        vf_loss = 0.5 * tf.reduce_mean((values - batch[SB.VALUE_TARGETS]) ** 2)
        entropy = tf.reduce_mean(dist.entropy())
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy
        return loss, {"policy_loss": policy_loss, "vf_loss": vf_loss, "entropy": entropy}
