"""APPO's loss on the torch backend: PPO's clipped surrogate on V-trace advantages.

The formulation is RLlib's APPO learner (``appo_torch_learner.py``), with a target network
(``use_target_network``, the default); per learned step ``t``, with ``pi`` the learner,
``pi_target`` the target network and ``mu`` the behaviour policy the worker acted with:

- V-trace (``vs``, policy-gradient advantages ``A``) runs on ``log pi_target - log mu`` (the
  target network's importance weights, clipped by ``vtrace_clip_*``), with the learner's values;
- the surrogate's ratio is ``r = min(2, mu / pi_target) * pi / mu``, which is ``pi / pi_target``
  unless the behaviour policy is far ahead of the target; the loss is
  ``-mean(min(A r, A clip(r, 1 - eps, 1 + eps)))``
  ``+ vf_loss_coeff * 0.5 * mean((V - vs)^2) - entropy_coeff * mean(entropy)``
  ``[+ kl_coeff * mean(KL(pi_target || pi))]``.

Without a target network the same loss takes V-trace's weights and the ratio against ``mu``
(``r = pi / mu``, as IMPALA's weights). Means run over the learned steps (neither LAST nor
the bootstrap row); ``vs`` and ``A`` are constants of the loss.
"""

from __future__ import annotations

from typing import Any

import torch

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.algorithms.appo.kl import AdaptiveKLCoeff
from rlgear.plugins.backends.torch import TargetModel, VTraceTorchPolicy, clipped_surrogate, mean_over
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space

#: RLlib's APPO caps the behaviour-over-target correction of the ratio at 2.
MAX_BEHAVIOUR_OVER_TARGET = 2.0


class APPOTorchPolicy(AdaptiveKLCoeff, TargetNetworkState, TargetModel, MinibatchSGD, VTraceTorchPolicy):
    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.make_target_model()
        self.kl_coeff = float(config.training.kl_coeff)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        out = self.unroll(batch)
        logp, values = out.logp, out.values
        behaviour_logp = self.time_major(batch, SB.ACTION_LOGP).to(logp.dtype)
        learned = self.learned_steps(batch, values.dtype)
        if training.use_target_network:
            with torch.no_grad():
                target = self.unroll(batch, self.target_model)
            log_rhos = target.logp - behaviour_logp
            behaviour_over_target = torch.clamp(torch.exp(-log_rhos), 0.0, MAX_BEHAVIOUR_OVER_TARGET)
            ratio = behaviour_over_target * torch.exp(logp - behaviour_logp)
        else:
            log_rhos = logp.detach() - behaviour_logp
            ratio = torch.exp(logp - behaviour_logp)
        vs, pg_advantages = self.vtrace_targets(batch, log_rhos, values)
        ratio = ratio[:-1]
        policy_loss = -mean_over(clipped_surrogate(pg_advantages, ratio, training.clip_param), learned)
        vf_loss = 0.5 * mean_over((values[:-1] - vs) ** 2, learned)
        mean_entropy = mean_over(out.entropy[:-1], learned)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
        stats = {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": mean_entropy.detach(),
            "mean_rho": mean_over(torch.exp(log_rhos[:-1]), learned).detach(),
            "clip_fraction": mean_over(
                ((ratio.detach() - 1.0).abs() > training.clip_param).to(values.dtype), learned
            ),
        }
        if training.use_target_network:
            kl = target.dist.kl(out.dist)  # KL(pi_target || pi) per step, [N*(T+1)]
            kl = mean_over(kl.reshape(logp.shape[1], logp.shape[0]).transpose(0, 1)[:-1], learned)
            if training.use_kl_loss:
                loss = loss + self.kl_coeff * kl
            stats["kl"] = kl.detach()
        return loss, stats
