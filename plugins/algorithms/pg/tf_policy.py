"""PG's loss on the TensorFlow backend (the same loss as ``torch_policy``).

The on-policy SGD family's loop (``MinibatchSGD``) runs the config's schedule: one
gradient step on the whole batch, as REINFORCE does.
"""

from __future__ import annotations

from rlgear.plugins.backends.tf import TFPolicy, masked_mean, normalize_advantages, tf
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class PGTFPolicy(MinibatchSGD, TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        # Advantages are constants (computed at sampling time), so the policy
        # term sends no gradient into the baseline.
        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        policy_loss = -masked_mean(logp * advantages, mask)
        entropy = masked_mean(dist.entropy(), mask)
        loss = policy_loss - training.entropy_coeff * entropy
        stats = {"policy_loss": policy_loss, "entropy": entropy}
        if training.use_baseline:
            vf_loss = 0.5 * masked_mean((values - batch[SB.VALUE_TARGETS]) ** 2, mask)
            loss = loss + training.vf_loss_coeff * vf_loss
            stats["vf_loss"] = vf_loss
        return loss, stats
