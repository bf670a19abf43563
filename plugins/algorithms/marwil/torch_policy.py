"""BC's and MARWIL's loss on the torch backend (the same loss as ``tf_policy``, term for term).

Per minibatch (Wang et al. 2018, eq. 8; the advantage norm as RLlib's MARWIL):

    A = R - V(s)                                  (R: the return-to-go, ``value_targets``)
    c^2 <- c^2 + rate * (mean(A^2) - c^2)         (before the weights are computed, no gradient)
    w = exp(beta * A / (1e-8 + c))                (no gradient)
    loss = -mean(w * (log pi(a|s) + bc_logstd_coeff * mean(log_std)))  +  vf_coeff * 0.5 * mean(A^2)

``beta = 0`` is behaviour cloning: ``w = 1``, no value loss, the norm is left alone.
"""

from __future__ import annotations

from typing import Any

import torch

from rlgear.plugins.backends.torch import DiagGaussian, TorchPolicy, masked_mean
from rlgear.plugins.backends.torch.losses import minibatch_mean
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MARWILTorchPolicy(TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.VALUE_TARGETS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        settings = config.training.loss_settings()
        if settings.bc_logstd_coeff > 0 and self.dist_class is not DiagGaussian:
            raise ValueError(
                f"training.bc_logstd_coeff: only Box (Gaussian) actions have a log std, this policy's "
                f"actions are {action_space!r} (set it to 0)"
            )
        #: The moving average of the squared advantage (``c^2``); in checkpoints, not a weight.
        self.moving_average_sqd_adv_norm = torch.tensor(
            float(settings.moving_average_sqd_adv_norm_start), dtype=torch.float32
        )

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        settings = self.config.training.loss_settings()
        mask = batch.get(SB.SEQ_MASK)
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        if settings.bc_logstd_coeff > 0:
            logp = logp + settings.bc_logstd_coeff * dist.log_std.mean(-1)
        stats: dict[str, torch.Tensor] = {}
        if settings.beta == 0.0:
            policy_loss = -masked_mean(logp, mask)
            loss = policy_loss
        else:
            advantages = batch[SB.VALUE_TARGETS] - values
            sqd_adv_mean = masked_mean(advantages**2, mask)
            with torch.no_grad():
                # the whole minibatch's mean: data-parallel learners must all move the norm alike
                whole_sqd_adv_mean = minibatch_mean(advantages.detach() ** 2, mask)
                norm = self.moving_average_sqd_adv_norm.to(values.device)
                norm = norm + settings.moving_average_sqd_adv_norm_update_rate * (whole_sqd_adv_mean - norm)
                self.moving_average_sqd_adv_norm = norm
                weights = torch.exp(settings.beta * advantages / (1e-8 + norm.sqrt()))
            policy_loss = -masked_mean(weights * logp, mask)
            vf_loss = 0.5 * sqd_adv_mean
            loss = policy_loss + settings.vf_coeff * vf_loss
            stats = {
                "vf_loss": vf_loss.detach(),
                "moving_average_sqd_adv_norm": norm.detach(),
                "mean_advantage_weight": masked_mean(weights, mask),
            }
        return loss, {"policy_loss": policy_loss.detach(), **stats}

    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.meta["moving_average_sqd_adv_norm"] = float(self.moving_average_sqd_adv_norm)
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "moving_average_sqd_adv_norm" in state.meta:
            self.moving_average_sqd_adv_norm = torch.tensor(
                float(state.meta["moving_average_sqd_adv_norm"]), dtype=torch.float32
            )
