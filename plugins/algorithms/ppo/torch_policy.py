"""PPO's loss on the torch backend; ``num_sgd_iter`` epochs of minibatches through the on-policy SGD family."""

from __future__ import annotations

from typing import Any

import torch

from rlgear.blocks.schedules import piecewise_linear
from rlgear.plugins.algorithms.ppo.gsde_torch import SDEActing
from rlgear.plugins.backends.torch import TorchPolicy, clipped_surrogate, masked_mean, normalize_advantages
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class PPOTorchPolicy(SDEActing, MinibatchSGD, TorchPolicy):
    """PPO's clipped surrogate; ``training.use_sde`` explores with gSDE (:class:`SDEActing`)."""

    loss_columns = (SB.OBS, SB.ACTIONS, SB.ACTION_LOGP, SB.ADVANTAGES, SB.VALUE_TARGETS, SB.VF_PREDS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if config.training.use_sde:
            self.sde_setup(observation_space, action_space, config)
        super().__init__(observation_space, action_space, config)

    def clip_param(self) -> float:
        training = self.config.training
        if training.clip_param_schedule:
            return piecewise_linear(training.clip_param_schedule, self.global_timestep)
        return training.clip_param

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        clip = self.clip_param()
        mask = batch.get(SB.SEQ_MASK)  # padding of recurrent sequences weighs nothing
        dist_inputs, values = self.model_outputs(batch)
        dist = self.action_distribution(dist_inputs, batch)
        logp = dist.logp(batch[SB.ACTIONS])
        log_ratio = logp - batch[SB.ACTION_LOGP]
        ratio = torch.exp(log_ratio)

        advantages = batch[SB.ADVANTAGES]
        if training.normalize_advantages:
            advantages = normalize_advantages(advantages, mask)
        surrogate = clipped_surrogate(advantages, ratio, clip)
        policy_loss = -masked_mean(surrogate, mask)

        targets = batch[SB.VALUE_TARGETS]
        vf_loss = (values - targets) ** 2
        if training.vf_clip_param is not None:
            old = batch[SB.VF_PREDS]
            clipped = old + torch.clamp(values - old, -training.vf_clip_param, training.vf_clip_param)
            vf_loss = torch.max(vf_loss, (clipped - targets) ** 2)
        vf_loss = 0.5 * masked_mean(vf_loss, mask)
        entropy = masked_mean(dist.entropy(), mask)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy

        with torch.no_grad():
            # Low-variance KL estimator (Schulman, "Approximating KL divergence", 2020).
            approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)
            clip_fraction = masked_mean(((ratio - 1.0).abs() > clip).float(), mask)
        return loss, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }
