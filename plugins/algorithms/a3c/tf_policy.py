"""A3C's loss on the TensorFlow backend: the backend's advantage actor-critic loss, as A2C's.

Workers call ``compute_gradients`` (the base class) on their own batch; the
learner calls ``apply_gradients``. ``learn_on_batch`` (one step on the whole
batch) is what the learner would do with the same batch itself.
"""

from __future__ import annotations

from rlgear.plugins.backends.tf import TFPolicy, actor_critic_loss, tf
from rlgear.sample_batch import SampleBatch as SB


class A3CTFPolicy(TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        return actor_critic_loss(
            self.action_distribution(dist_inputs, batch),
            batch[SB.ACTIONS],
            batch[SB.ADVANTAGES],
            values,
            batch[SB.VALUE_TARGETS],
            training.vf_loss_coeff,
            training.entropy_coeff,
            mask,
        )
