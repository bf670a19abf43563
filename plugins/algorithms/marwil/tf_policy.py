"""BC's and MARWIL's loss on the TensorFlow backend (``torch_policy``'s loss, term for term; see there).

The moving average of the squared advantage lives in a variable that the compiled loss updates,
so the traced step never retraces; the loss settings are read at trace time (a new config
recompiles, :meth:`TFPolicy.update_config`).
"""

from __future__ import annotations

from typing import Any

from rlgear.plugins.backends.tf import DiagGaussian, TFPolicy, masked_mean, tf
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MARWILTFPolicy(TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.VALUE_TARGETS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        settings = config.training.loss_settings()
        self._sqd_adv_norm = tf.Variable(
            float(settings.moving_average_sqd_adv_norm_start),
            dtype=tf.float32,
            trainable=False,
            name="moving_average_sqd_adv_norm",
        )
        super().__init__(observation_space, action_space, config)
        if settings.bc_logstd_coeff > 0 and self.dist_class is not DiagGaussian:
            raise ValueError(
                f"training.bc_logstd_coeff: only Box (Gaussian) actions have a log std, this policy's "
                f"actions are {action_space!r} (set it to 0)"
            )

    @property
    def moving_average_sqd_adv_norm(self) -> float:
        """The moving average of the squared advantage (``c^2``)."""
        return float(self._sqd_adv_norm.numpy())

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        settings = self.config.training.loss_settings()
        mask = batch.get(SB.SEQ_MASK)
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        if settings.bc_logstd_coeff > 0:
            logp = logp + settings.bc_logstd_coeff * tf.reduce_mean(dist.log_std, axis=-1)
        if settings.beta == 0.0:
            policy_loss = -masked_mean(logp, mask)
            return policy_loss, {"policy_loss": policy_loss}
        advantages = batch[SB.VALUE_TARGETS] - values
        sqd_adv_mean = masked_mean(advantages**2, mask)
        norm = self._sqd_adv_norm
        updated = norm + settings.moving_average_sqd_adv_norm_update_rate * (
            tf.stop_gradient(sqd_adv_mean) - norm
        )
        norm.assign(updated)
        weights = tf.stop_gradient(tf.exp(settings.beta * advantages / (1e-8 + tf.sqrt(updated))))
        policy_loss = -masked_mean(weights * logp, mask)
        vf_loss = 0.5 * sqd_adv_mean
        loss = policy_loss + settings.vf_coeff * vf_loss
        return loss, {
            "policy_loss": policy_loss,
            "vf_loss": vf_loss,
            "moving_average_sqd_adv_norm": updated,
            "mean_advantage_weight": masked_mean(weights, mask),
        }

    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.meta["moving_average_sqd_adv_norm"] = self.moving_average_sqd_adv_norm
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "moving_average_sqd_adv_norm" in state.meta:
            self._sqd_adv_norm.assign(float(state.meta["moving_average_sqd_adv_norm"]))
