"""IMPALA's V-trace loss on the torch backend.

The batch holds sequences ``[N, T+1, ...]`` (see :mod:`..impala`). The loss
runs the learner's network over every step, computes V-trace targets from its
own values and the importance weights ``pi/mu`` (target over behaviour
log-probability of the taken action), and learns the steps that are not LAST
and not the bootstrap row. :func:`vtrace` is the torch twin of
:func:`rlgear.value_ops.vtrace` (tested against it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.plugins.backends.torch import TorchPolicy
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType

_LAST = int(StepType.LAST)


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    step_types: torch.Tensor,
    discounts: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(vs, pg_advantages)`` ``[T, B]`` from time-major ``[T+1, B]`` inputs; no gradient flows.

    Same layout and definition as :func:`rlgear.value_ops.vtrace`.
    """
    rhos = torch.exp(log_rhos[:-1])

    def clipped(threshold: float | None) -> torch.Tensor:
        return rhos if threshold is None else torch.clamp(rhos, max=threshold)

    is_last = step_types == _LAST
    cs = lambda_ * clipped(clip_c_threshold)
    deltas = clipped(clip_rho_threshold) * (rewards[1:] + discounts[1:] * values[1:] - values[:-1])
    vs_minus_v = torch.zeros_like(values)
    for t in range(values.shape[0] - 2, -1, -1):
        accumulated = deltas[t] + discounts[t + 1] * cs[t] * vs_minus_v[t + 1]
        vs_minus_v[t] = torch.where(is_last[t], torch.zeros_like(accumulated), accumulated)
    vs = values + vs_minus_v
    pg_advantages = clipped(clip_pg_rho_threshold) * (rewards[1:] + discounts[1:] * vs[1:] - values[:-1])
    pg_advantages = torch.where(is_last[:-1], torch.zeros_like(pg_advantages), pg_advantages)
    return vs[:-1], pg_advantages


class IMPALATorchPolicy(TorchPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.STEP_TYPES, SB.ACTION_LOGP)
    rows_are_sequences = True

    def to_tensors(self, batch: SB, columns: Any) -> dict[str, torch.Tensor]:
        """Sequences ``[N, T+1, ...]``: observations are flattened per step, then put back in shape."""
        tensors = super().to_tensors(batch, [c for c in columns if c != SB.OBS])
        obs = np.asarray(batch[SB.OBS])
        n, steps = obs.shape[:2]
        flat = self.preprocess(obs.reshape(n * steps, *obs.shape[2:]))
        tensors[SB.OBS] = flat.reshape(n, steps, -1)
        return tensors

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        training = self.config.training
        obs = batch[SB.OBS]
        n, steps = obs.shape[:2]

        def time_major(x: torch.Tensor) -> torch.Tensor:  # [N*(T+1), ...] -> [T+1, N, ...]
            return x.reshape(n, steps, *x.shape[1:]).transpose(0, 1)

        if self.recurrent:  # along each whole sequence from its first state, zeroed at FIRST rows
            dist_inputs, values, _ = self.model(
                obs.reshape(n * steps, -1),
                [batch[SB.state_in(0)], batch[SB.state_in(1)]],
                batch[SB.PREV_ACTIONS].reshape(n * steps, *batch[SB.PREV_ACTIONS].shape[2:])
                if SB.PREV_ACTIONS in batch
                else None,
                batch[SB.REWARDS].reshape(-1),
                steps,
                (batch[SB.STEP_TYPES] == int(StepType.FIRST)).reshape(-1),
            )
        else:
            dist_inputs, values = self.model(obs.reshape(n * steps, -1))
        mask = batch.get(SB.ACTION_MASK)  # [N, T+1, n]: each step's own mask
        dist = self.dist_class(dist_inputs, None if mask is None else mask.reshape(n * steps, -1))
        actions = batch[SB.ACTIONS]
        logp = time_major(dist.logp(actions.reshape(n * steps, *actions.shape[2:])))
        entropy = time_major(dist.entropy())
        values = time_major(values)
        step_types = batch[SB.STEP_TYPES].transpose(0, 1)
        behaviour_logp = batch[SB.ACTION_LOGP].transpose(0, 1).to(logp.dtype)
        vs, pg_advantages = vtrace(
            log_rhos=logp.detach() - behaviour_logp,
            rewards=batch[SB.REWARDS].transpose(0, 1).to(values.dtype),
            values=values.detach(),
            step_types=step_types,
            discounts=batch[SB.DISCOUNTS].transpose(0, 1).to(values.dtype) * training.gamma,
            clip_rho_threshold=training.vtrace_clip_rho_threshold,
            clip_pg_rho_threshold=training.vtrace_clip_pg_rho_threshold,
            clip_c_threshold=training.vtrace_clip_c_threshold,
            lambda_=training.vtrace_lambda,
        )
        # learned: steps that are neither LAST (their action was ignored) nor the bootstrap row
        learned = (step_types[:-1] != _LAST).to(values.dtype)
        count = learned.sum().clamp(min=1.0)
        policy_loss = -(logp[:-1] * pg_advantages * learned).sum() / count
        vf_loss = 0.5 * (((values[:-1] - vs) ** 2) * learned).sum() / count
        mean_entropy = (entropy[:-1] * learned).sum() / count
        loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
        rhos = torch.exp(logp.detach()[:-1] - behaviour_logp[:-1])
        return loss, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": mean_entropy.detach(),
            "mean_rho": ((rhos * learned).sum() / count).detach(),
        }
