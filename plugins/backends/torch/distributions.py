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

from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple, action_parts

_LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """Discrete actions from unnormalised logits ``[B, n]``.

    ``mask`` (bool ``[B, n]``, True = allowed) sets the logits of disallowed actions to -inf:
    they have probability 0, so they are never sampled or chosen greedily, and they add
    nothing to the entropy or the KL (``_finite_logits``). Every row must allow an action.
    """

    def __init__(self, inputs: torch.Tensor, mask: torch.Tensor | None = None):
        if mask is not None:
            inputs = inputs.masked_fill(~mask.bool(), float("-inf"))
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

    def __init__(self, inputs: torch.Tensor, mask: torch.Tensor | None = None):
        if mask is not None:
            raise ValueError("an action mask needs Discrete or MultiDiscrete actions, not Box")
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


class MultiCategorical:
    """MultiDiscrete actions ``[B, k]``: independent Categoricals, one per entry of ``nvec``.

    Inputs are the logits side by side ``[B, sum(nvec)]``, as is the mask. log-probability,
    entropy and KL are sums over the parts (a product distribution).
    """

    nvec: tuple[int, ...] = ()

    def __init__(self, inputs: torch.Tensor, mask: torch.Tensor | None = None):
        logits = torch.split(inputs, list(self.nvec), dim=-1)
        masks = torch.split(mask, list(self.nvec), dim=-1) if mask is not None else [None] * len(logits)
        self.parts = [Categorical(x, m) for x, m in zip(logits, masks, strict=True)]

    @classmethod
    def for_space(cls, space: MultiDiscrete) -> type[MultiCategorical]:
        return type("MultiCategorical", (cls,), {"nvec": tuple(space.nvec)})

    def sample(self) -> torch.Tensor:
        return torch.stack([p.sample() for p in self.parts], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([p.deterministic_sample() for p in self.parts], dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(p.logp(actions[..., i]) for i, p in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)

    def kl(self, other: MultiCategorical) -> torch.Tensor:
        return sum(p.kl(q) for p, q in zip(self.parts, other.parts, strict=True))

    @staticmethod
    def required_inputs(space: MultiDiscrete) -> int:
        return sum(space.nvec)


class Product:
    """Tuple/Dict actions: one distribution per part, actions as flat float rows (``flatten_action``).

    Inputs are the parts' inputs side by side (Discrete: logits; MultiDiscrete: logits;
    Box: means then log standard deviations, both from the network). log-probability,
    entropy and KL are sums over the parts.
    """

    part_spaces: tuple[Space, ...] = ()

    def __init__(self, inputs: torch.Tensor, mask: torch.Tensor | None = None):
        if mask is not None:
            raise ValueError("an action mask needs Discrete or MultiDiscrete actions, not Tuple/Dict")
        widths = [distribution_class(s).required_inputs(s) for s in self.part_spaces]
        self.parts = [
            distribution_class(s)(x)
            for s, x in zip(self.part_spaces, torch.split(inputs, widths, -1), strict=True)
        ]

    @classmethod
    def for_space(cls, space: Tuple | Dict) -> type[Product]:
        return type("Product", (cls,), {"part_spaces": tuple(action_parts(space))})

    def _columns(self, actions: torch.Tensor) -> list[torch.Tensor]:
        out, offset = [], 0
        for space in self.part_spaces:
            width = 1 if isinstance(space, Discrete) else int(math.prod(space.shape))
            column = actions[..., offset : offset + width]
            offset += width
            if isinstance(space, Discrete):
                column = column[..., 0].round().long()
            elif isinstance(space, MultiDiscrete):
                column = column.round().long()
            out.append(column)
        return out

    def _flat(self, actions: list[torch.Tensor]) -> torch.Tensor:
        columns = [a.reshape(a.shape[0], -1).to(torch.float32) for a in actions]
        return torch.cat(columns, dim=-1)

    def sample(self) -> torch.Tensor:
        return self._flat([p.sample() for p in self.parts])

    def deterministic_sample(self) -> torch.Tensor:
        return self._flat([p.deterministic_sample() for p in self.parts])

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(p.logp(a) for p, a in zip(self.parts, self._columns(actions), strict=True))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)

    def kl(self, other: Product) -> torch.Tensor:
        return sum(p.kl(q) for p, q in zip(self.parts, other.parts, strict=True))

    @staticmethod
    def required_inputs(space: Tuple | Dict) -> int:
        return sum(distribution_class(s).required_inputs(s) for s in action_parts(space))


def distribution_class(space: Space) -> type:
    """The distribution of actions of ``space``: ``cls(inputs, mask=None)`` and ``cls.required_inputs(space)``."""
    if isinstance(space, Discrete):
        return Categorical
    if isinstance(space, Box):
        return DiagGaussian
    if isinstance(space, MultiDiscrete):
        return MultiCategorical.for_space(space)
    if isinstance(space, Tuple | Dict):
        return Product.for_space(space)
    raise TypeError(f"no action distribution for {space!r}")
