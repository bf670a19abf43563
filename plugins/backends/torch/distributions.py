"""Action distributions, written directly on tensors.

They do what ``torch.distributions`` does for the two cases RL needs, without
its argument validation and object overhead, which dominates the cost of
acting with a small network (DEPENDENCY-NOTES.md / issue 2: a hand-written
loop ran 14-16k env-steps/s with ``torch.distributions.Categorical`` and about
28k with Gumbel-max sampling).
"""

from __future__ import annotations

import math

import torch

from rlgear.spaces import Box, Discrete, Space

_LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """Discrete actions from unnormalised logits ``[B, n]``."""

    def __init__(self, inputs: torch.Tensor):
        self.logits = inputs - torch.logsumexp(inputs, dim=-1, keepdim=True)

    def sample(self) -> torch.Tensor:
        # Gumbel-max trick: argmax(logits + Gumbel noise) ~ Categorical(softmax(logits)).
        uniform = torch.rand_like(self.logits).clamp_(min=1e-20)
        return torch.argmax(self.logits - torch.log(-torch.log(uniform)), dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.argmax(self.logits, dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def _finite_logits(self) -> torch.Tensor:
        # Masked actions have logit -inf and probability 0; 0 * -inf would be nan.
        return self.logits.clamp(min=torch.finfo(self.logits.dtype).min)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self._finite_logits()).sum(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self._finite_logits() - other._finite_logits())).sum(-1)

    @staticmethod
    def required_inputs(space: Discrete) -> int:
        return space.n


class DiagGaussian:
    """Continuous actions; inputs ``[B, 2 * dim]`` are the means then the log standard deviations."""

    def __init__(self, inputs: torch.Tensor):
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * (_LOG_2PI + 1.0)).sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        return (
            other.log_std
            - self.log_std
            + (self.std**2 + (self.mean - other.mean) ** 2) / (2.0 * other.std**2)
            - 0.5
        ).sum(-1)

    @staticmethod
    def required_inputs(space: Box) -> int:
        return 2 * space.size


def distribution_class(space: Space) -> type[Categorical] | type[DiagGaussian]:
    if isinstance(space, Discrete):
        return Categorical
    if isinstance(space, Box):
        return DiagGaussian
    raise TypeError(f"no action distribution for {space!r}")
