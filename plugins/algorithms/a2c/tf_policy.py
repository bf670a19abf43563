"""A2C's loss on the TensorFlow backend (the same loss as ``torch_policy``).

The on-policy SGD family's loop (``MinibatchSGD``) runs the config's schedule: one
gradient step on the whole batch (with ``grad_clip``).
"""

from __future__ import annotations

from rlgear.plugins.backends.tf import TFPolicy, actor_critic_loss, normalize_advantages, tf
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class A2CTFPolicy(MinibatchSGD, TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        return actor_critic_loss(
            self.action_distribution(dist_inputs, batch),
            batch[SB.ACTIONS],
            advantages,
            values,
            batch[SB.VALUE_TARGETS],
            training.vf_loss_coeff,
            training.entropy_coeff,
            mask,
        )
