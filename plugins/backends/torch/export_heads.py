"""The acting part of an exported torch policy: from the flat model input to the named outputs.

Why a module per policy kind: what "acting" means differs (a distribution's greedy action, a
Q-network's argmax, a squashed actor rescaled to the bounds), and each policy class knows its
own; :meth:`TorchActing.export_head` gives the actor-critic one and DQN and the off-policy
actors override it. Every head is an ``nn.Module`` with ``forward(flat, mask, extras)``
returning a tuple in the order of :attr:`ExportHead.outputs`, so
:mod:`rlgear.plugins.backends.torch.export` can put the preprocessing in front of any of them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlgear.export.signature import (
    RecurrentSignature,
    TensorSpec,
    action_output_specs,
)
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Space, Tuple, action_parts


class ExportHead(nn.Module):
    """Base of the heads: ``extra_inputs`` (after the observation's) and ``outputs`` describe it."""

    extra_inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def __init__(self) -> None:
        super().__init__()
        self.extra_inputs = []
        self.outputs = []


class ActionOutputs(nn.Module):
    """Flat actions ``[B, D]`` (or ``[B]``) -> the action outputs as the env takes them: composite
    actions split into their parts, bounded Box parts clipped (what the collector does)."""

    def __init__(self, action_space: Space):
        super().__init__()
        self.composite = isinstance(action_space, Tuple | Dict)
        self.parts = action_parts(action_space) if self.composite else [action_space]
        for i, part in enumerate(self.parts):
            if isinstance(part, Box) and part.bounded:
                self.register_buffer(f"low_{i}", torch.as_tensor(part.low, dtype=torch.float32).reshape(-1))
                self.register_buffer(f"high_{i}", torch.as_tensor(part.high, dtype=torch.float32).reshape(-1))

    def _clipped(self, i: int, part: Space, values: torch.Tensor) -> torch.Tensor:
        if isinstance(part, Box) and part.bounded:
            values = torch.minimum(
                torch.maximum(values, getattr(self, f"low_{i}")), getattr(self, f"high_{i}")
            )
        return values

    def forward(self, actions: torch.Tensor) -> list[torch.Tensor]:
        if not self.composite:
            (part,) = self.parts
            if isinstance(part, Discrete | MultiDiscrete):
                return [actions.to(torch.int64)]
            flat = self._clipped(0, part, actions.reshape(actions.shape[0], -1))
            return [flat.reshape(actions.shape[0], *part.shape)]
        out, offset = [], 0
        for i, part in enumerate(self.parts):
            width = (
                1
                if isinstance(part, Discrete)
                else int(part.size if isinstance(part, Box) else len(part.nvec))
            )
            column = actions[:, offset : offset + width]
            offset += width
            if isinstance(part, Discrete):
                out.append(torch.round(column[:, 0]).to(torch.int64))
            elif isinstance(part, MultiDiscrete):
                out.append(torch.round(column).to(torch.int64))
            else:
                out.append(self._clipped(i, part, column).reshape(actions.shape[0], *part.shape))
        return out


def distribution_output_specs(action_space: Space, num_inputs: int) -> list[TensorSpec]:
    """The distribution's extras: what the action was drawn from."""
    if isinstance(action_space, Discrete | MultiDiscrete):
        return [TensorSpec("logits", "float32", (None, num_inputs), "the policy's logits (before masking)")]
    if isinstance(action_space, Box):
        size = action_space.size
        specs = []
        if action_space.bounded:
            specs.append(TensorSpec("action_raw", "float32", (None, *action_space.shape), "before clipping"))
        return [
            *specs,
            TensorSpec("mean", "float32", (None, size), "the Gaussian's means"),
            TensorSpec("log_std", "float32", (None, size), "the Gaussian's log standard deviations"),
        ]
    return [
        TensorSpec("action_flat", "float32", (None, None), "the action parts side by side, before clipping"),
        TensorSpec("dist_inputs", "float32", (None, num_inputs), "each part's logits or means and log stds"),
    ]


class ActorCriticHead(ExportHead):
    """A model ``(flat) -> (dist_inputs, values)`` (or a recurrent one's with its state: ``recurrent``
    says which inputs and outputs carry it) and its distribution:
    the action (greedy, or sampled with ``explore``), the distribution's inputs, the value and the
    action's log-probability."""

    def __init__(
        self, model: nn.Module, dist_class: Any, action_space: Space, num_inputs: int, explore: bool,
        recurrent: RecurrentSignature | None = None,
    ):  # fmt: skip
        super().__init__()
        self.model = model
        self.dist_class = dist_class
        self.action_space = action_space
        self.explore = explore
        self.recurrent = recurrent
        self.actions = ActionOutputs(action_space)
        self.extra_inputs = list(recurrent.inputs) if recurrent else []
        self.outputs = [
            *action_output_specs(action_space),
            *distribution_output_specs(action_space, num_inputs),
            TensorSpec("value", "float32", (None,), "the value function's estimate"),
            TensorSpec("action_logp", "float32", (None,), "log-probability of the action (before clipping)"),
            *(recurrent.outputs if recurrent else []),
        ]

    def forward(self, flat: torch.Tensor, mask: torch.Tensor | None, extras: list[torch.Tensor]) -> tuple:
        state_out: list[torch.Tensor] = []
        if self.recurrent is not None:
            if self.recurrent.kind == "attention":  # the memory and its mask; zeros are an empty memory
                dist_inputs, values, state_out = self.model(flat, list(extras), None, None, 1)
            else:
                h, c, prev_action, prev_reward = extras
                resets = torch.zeros(
                    (flat.shape[0], 1), dtype=torch.bool
                )  # the step loop, not the fused kernel
                dist_inputs, values, state_out = self.model(flat, [h, c], prev_action, prev_reward, 1, resets)
        else:
            dist_inputs, values = self.model(flat)
        dist = self.dist_class(dist_inputs, mask)
        raw = dist.sample() if self.explore else dist.deterministic_sample()
        outputs = self.actions(raw)
        space = self.action_space
        if isinstance(space, Discrete | MultiDiscrete):
            outputs.append(dist_inputs)
        elif isinstance(space, Box):
            if space.bounded:
                outputs.append(raw.reshape(raw.shape[0], *space.shape))
            mean, log_std = torch.chunk(dist_inputs, 2, dim=-1)
            outputs += [mean, log_std]
        else:
            outputs += [raw, dist_inputs]
        outputs += [values, dist.logp(raw), *state_out]
        return tuple(outputs)


class QValueHead(ExportHead):
    """Greedy acting on Q-values (DQN): the best allowed action, and the Q-values themselves.

    ``q_values`` maps the flat input to ``[B, actions]`` (C51: already each distribution's mean).
    """

    def __init__(self, q_values: nn.Module, num_actions: int):
        super().__init__()
        self.q_values = q_values
        self.outputs = [
            TensorSpec("action", "int64", (None,), "the action with the highest Q-value among the allowed"),
            TensorSpec("q_values", "float32", (None, num_actions), "every action's Q-value (before masking)"),
        ]

    def forward(self, flat: torch.Tensor, mask: torch.Tensor | None, extras: list[torch.Tensor]) -> tuple:
        q = self.q_values(flat)
        chooser = q if mask is None else q.masked_fill(~mask, float("-inf"))
        return torch.argmax(chooser, dim=-1), q


class SquashedActorHead(ExportHead):
    """A tanh-squashed actor (SAC, TD3, DDPG): ``low + (tanh(u) + 1) (high - low) / 2``, with ``u`` the
    mean (greedy) or, for a Gaussian actor with ``explore``, a sample with log std clipped to
    ``[log_std_min, log_std_max]`` (what :class:`rlgear.blocks.squashed_inference.NumpyTanhActor` does)."""

    def __init__(
        self, actor: nn.Module, action_space: Box, gaussian: bool, explore: bool,
        log_std_min: float, log_std_max: float,
    ):  # fmt: skip
        super().__init__()
        self.actor = actor
        self.num_actions = action_space.size
        self.gaussian, self.explore = gaussian, explore
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        low = torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        self.register_buffer("low", low)
        self.register_buffer("half_range", (high - low) / 2)
        self.shape = action_space.shape
        self.outputs = [
            TensorSpec("action", "float32", (None, *action_space.shape), "within the Box bounds"),
            TensorSpec("mean", "float32", (None, self.num_actions), "the actor's output before tanh"),
        ]

    def forward(self, flat: torch.Tensor, mask: torch.Tensor | None, extras: list[torch.Tensor]) -> tuple:
        out = self.actor(flat)
        mean = out[:, : self.num_actions]
        u = mean
        if self.explore and self.gaussian:
            log_std = torch.clamp(out[:, self.num_actions :], self.log_std_min, self.log_std_max)
            u = mean + torch.exp(log_std) * torch.randn_like(mean)
        action = self.low + (torch.tanh(u) + 1.0) * self.half_range
        return action.reshape(flat.shape[0], *self.shape), mean


class LayerStackHead(ExportHead):
    """A framework-free MLP policy (:class:`rlgear.numpy_policy.NumpyMLPPolicy`: ES, ARS) rebuilt from its
    ``policy/hidden_<i>`` and ``policy/output`` weights: the argmax of its logits (Discrete) or its
    output as the action (Box, clipped to the bounds as the collector does)."""

    def __init__(self, weights: dict[str, Any], activation: str, action_space: Space):
        super().__init__()
        from rlgear.plugins.backends.torch.models import ACTIVATIONS

        names = sorted(k.removesuffix("/kernel") for k in weights if k.endswith("/kernel") and "hidden_" in k)
        names = [*sorted(names, key=lambda n: int(n.rsplit("_", 1)[1])), "policy/output"]
        layers: list[nn.Module] = []
        for i, name in enumerate(names):
            kernel = torch.as_tensor(weights[f"{name}/kernel"], dtype=torch.float32)
            linear = nn.Linear(kernel.shape[0], kernel.shape[1])
            with torch.no_grad():
                linear.weight.copy_(kernel.T)
                linear.bias.copy_(torch.as_tensor(weights[f"{name}/bias"], dtype=torch.float32))
            layers.append(linear)
            if i < len(names) - 1:
                layers.append(ACTIVATIONS[activation]())
        self.body = nn.Sequential(*layers)
        self.discrete = isinstance(action_space, Discrete)
        self.actions = ActionOutputs(action_space)
        width = int(weights["policy/output/kernel"].shape[1])
        self.outputs = [
            *action_output_specs(action_space),
            TensorSpec(
                "logits" if self.discrete else "output", "float32", (None, width), "the network's output"
            ),
        ]

    def forward(self, flat: torch.Tensor, mask: torch.Tensor | None, extras: list[torch.Tensor]) -> tuple:
        out = self.body(flat)
        actions = torch.argmax(out, dim=-1) if self.discrete else out
        return (*self.actions(actions), out)
