"""IMPALA's V-trace loss on the torch backend.

The loss runs the learner's network over every step of the sequences
(:class:`~rlgear.plugins.backends.torch.VTraceTorchPolicy`), computes V-trace
targets from its own values and the importance weights ``pi/mu`` (target over
behaviour log-probability of the taken action), and learns the steps that are
not LAST and not the bootstrap row.
"""

from __future__ import annotations

import torch

from rlgear.plugins.backends.torch import VTraceTorchPolicy, mean_over
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB


class IMPALATorchPolicy(MinibatchSGD, VTraceTorchPolicy):
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        out = self.unroll(batch)
        logp, values = out.logp, out.values
        behaviour_logp = self.time_major(batch, SB.ACTION_LOGP).to(logp.dtype)
        vs, pg_advantages = self.vtrace_targets(batch, logp - behaviour_logp, values)
        learned = self.learned_steps(batch, values.dtype)
        policy_loss = -mean_over(logp[:-1] * pg_advantages, learned)
        vf_loss = 0.5 * mean_over((values[:-1] - vs) ** 2, learned)
        mean_entropy = mean_over(out.entropy[:-1], learned)
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
        rhos = torch.exp(logp.detach()[:-1] - behaviour_logp[:-1])
        return loss, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": mean_entropy.detach(),
            "mean_rho": mean_over(rhos, learned).detach(),
        }
