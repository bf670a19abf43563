"""What every V-trace learner's torch policy shares (IMPALA, APPO): the sequence unroll and V-trace.

The batch holds sequences ``[N, T+1, ...]`` (see :mod:`rlgear.plugins.families.vtrace.vtrace_trainer`).
:meth:`VTraceTorchPolicy.unroll` runs a network (the learner's, or APPO's target
network) over every step and returns time-major ``[T+1, N]`` log-probabilities,
entropies and values; :meth:`VTraceTorchPolicy.vtrace_targets` computes V-trace
targets and policy-gradient advantages with the run's ``vtrace_*`` keys. An
algorithm's loss combines them. :func:`vtrace` is the torch twin of
:func:`rlgear.value_ops.vtrace` (tested against it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from rlgear.plugins.backends.torch.policy import TorchPolicy
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


class Unroll(NamedTuple):
    """A network's outputs over sequences: ``dist`` per step (flat ``[N*(T+1)]``, sequence-major),
    the rest time-major ``[T+1, N]``."""

    dist: Any
    logp: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor


class VTraceTorchPolicy(TorchPolicy):
    """Base of a V-trace learner's policy: rows are whole sequences ``[N, T+1, ...]``."""

    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.STEP_TYPES, SB.ACTION_LOGP)
    rows_are_sequences = True

    def host_tensors(self, batch: SB, columns: Any) -> dict[str, torch.Tensor]:
        """Sequences ``[N, T+1, ...]``: observations are flattened per step, then put back in shape."""
        tensors = super().host_tensors(batch, [c for c in columns if c != SB.OBS])
        obs = np.asarray(batch[SB.OBS])
        n, steps = obs.shape[:2]
        flat = self.preprocess(obs.reshape(n * steps, *obs.shape[2:]))
        tensors[SB.OBS] = flat.reshape(n, steps, -1)
        return tensors

    def unroll(self, batch: dict[str, torch.Tensor], model: torch.nn.Module | None = None) -> Unroll:
        """``model`` (default: the learner's) over every step of the batch's sequences."""
        model = self.model if model is None else model
        obs = batch[SB.OBS]
        n, steps = obs.shape[:2]

        def time_major(x: torch.Tensor) -> torch.Tensor:  # [N*(T+1), ...] -> [T+1, N, ...]
            return x.reshape(n, steps, *x.shape[1:]).transpose(0, 1)

        if self.recurrent:  # along each whole sequence from its first state, zeroed at FIRST rows
            dist_inputs, values, _ = model(
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
            dist_inputs, values = model(obs.reshape(n * steps, -1))
        mask = batch.get(SB.ACTION_MASK)  # [N, T+1, n]: each step's own mask
        dist = self.dist_class(dist_inputs, None if mask is None else mask.reshape(n * steps, -1))
        actions = batch[SB.ACTIONS]
        logp = time_major(dist.logp(actions.reshape(n * steps, *actions.shape[2:])))
        return Unroll(dist, logp, time_major(dist.entropy()), time_major(values))

    @staticmethod
    def time_major(batch: dict[str, torch.Tensor], key: str) -> torch.Tensor:
        """Column ``key`` of the sequences, ``[N, T+1]`` -> ``[T+1, N]``."""
        return batch[key].transpose(0, 1)

    def vtrace_targets(
        self, batch: dict[str, torch.Tensor], log_rhos: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V-trace ``(vs, pg_advantages)`` ``[T, N]`` with the run's ``gamma`` and ``vtrace_*`` keys.

        ``log_rhos`` and ``values`` are time-major ``[T+1, N]``; both are constants here.
        """
        training = self.config.training
        return vtrace(
            log_rhos=log_rhos.detach(),
            rewards=self.time_major(batch, SB.REWARDS).to(values.dtype),
            values=values.detach(),
            step_types=self.time_major(batch, SB.STEP_TYPES),
            discounts=self.time_major(batch, SB.DISCOUNTS).to(values.dtype) * training.gamma,
            clip_rho_threshold=training.vtrace_clip_rho_threshold,
            clip_pg_rho_threshold=training.vtrace_clip_pg_rho_threshold,
            clip_c_threshold=training.vtrace_clip_c_threshold,
            lambda_=training.vtrace_lambda,
        )

    def minibatch_weight(self, tensors: dict[str, torch.Tensor], rows: np.ndarray) -> float:
        """The learned steps of sequences ``rows``: V-trace's loss terms are means over them
        (:func:`mean_over`), so data-parallel learners weigh their shards by these."""
        step_types = tensors[SB.STEP_TYPES]
        step_types = step_types[torch.from_numpy(rows).to(step_types.device)]  # [n, T+1]
        return float((step_types[:, :-1] != _LAST).sum())

    def learned_steps(self, batch: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        """``[T, N]``, 1 at the steps a loss learns: neither LAST (their action was ignored) nor the
        bootstrap row. Loss terms are sums over these divided by their count (:func:`mean_over`)."""
        return (self.time_major(batch, SB.STEP_TYPES)[:-1] != _LAST).to(dtype)


def mean_over(x: torch.Tensor, learned: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` ``[T, N]`` over the learned steps (0 when there is none)."""
    return (x * learned).sum() / learned.sum().clamp(min=1.0)
