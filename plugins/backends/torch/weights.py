"""A torch policy's weights in the framework-neutral layout, and its checkpoint state.

:class:`TorchWeights` is one part of :class:`~rlgear.plugins.backends.torch.policy.TorchPolicy`.
Weights leave as numpy under neutral names (the model's ``weight_names()``), dense kernels
``[in, out]`` and conv kernels ``[kh, kw, in, out]`` (torch stores ``[out, in, ...]``), so they
load into any backend. ``get_state`` adds the optimizer's arrays, the counters and the numpy
generators (minibatch order, the twin's sampling noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.plugins.backends.torch.models import from_neutral_kernel, to_neutral_kernel
from rlgear.policy import NonFiniteGuard, PolicyState


class TorchWeights:
    """Weights and state; mixed into ``TorchPolicy`` (which sets the attributes)."""

    model: torch.nn.Module
    optimizer: Any
    rng: np.random.Generator
    fast_actor: Any
    global_timestep: int
    num_grad_updates: int
    nonfinite: NonFiniteGuard
    weights_version: int
    _weight_names: dict[str, str]

    def _neutral_names(self) -> dict[str, str]:
        names = self.model.weight_names() if hasattr(self.model, "weight_names") else {}
        return {name: names.get(name, name) for name, _ in self.model.named_parameters()}

    def get_weights(self) -> dict[str, np.ndarray]:
        out = {}
        for name, param in self.model.named_parameters():
            value = self.to_neutral_layout(name, param.detach().cpu().numpy())
            out[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        return out

    def _is_kernel(self, name: str) -> bool:
        return name.endswith("weight") and self._weight_names[name].endswith("kernel")

    def to_neutral_layout(self, name: str, value: np.ndarray) -> np.ndarray:
        """Parameter ``name``'s array in the neutral layout: dense kernels ``[in, out]`` (torch stores
        ``[out, in]``), conv kernels ``[kh, kw, in, out]`` (torch: ``[out, in, kh, kw]``); others as is."""
        if self._is_kernel(name) and value.ndim in (2, 4):
            return to_neutral_kernel(value)
        return value

    def _torch_layout(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check every weight against the model (neutral layout), then convert; nothing is changed here."""
        missing = [n for n in self._weight_names.values() if n not in weights]
        if missing:
            raise ValueError(f"weights are missing {missing}; they do not fit this model")
        out = {}
        for name, param in self.model.named_parameters():
            neutral = self._weight_names[name]
            value = np.asarray(weights[neutral])
            # a zero-copy view of the parameter's shape, laid out as the neutral dict holds it
            expected = self.to_neutral_layout(name, np.broadcast_to(np.float32(0), tuple(param.shape))).shape
            if tuple(value.shape) != expected:
                raise ValueError(
                    f"weight '{neutral}' has shape {tuple(value.shape)}, the model expects {expected}"
                )
            out[name] = (
                from_neutral_kernel(value) if self._is_kernel(name) and value.ndim in (2, 4) else value
            )
        return out

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load numpy weights (copied onto the parameters' device, wherever the policy learns)."""
        converted = self._torch_layout(weights)  # all checks first: a bad dict changes nothing
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.copy_(torch.from_numpy(np.ascontiguousarray(converted[name], dtype=np.float32)))
        self.weights_version += 1

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{k}": v for k, v in self.get_weights().items()}
        for key, value in self.optimizer.state_arrays().items():
            arrays[f"optimizer/{key}"] = value.detach().cpu().numpy().copy()
        meta = {
            "optimizer": self.optimizer.state_meta(),
            "global_timestep": self.global_timestep,
            "num_grad_updates": self.num_grad_updates,
            "num_nonfinite_updates": self.nonfinite.total,
            "rng": self.rng.bit_generator.state,
        }
        if self.fast_actor is not None:
            meta["twin_rng"] = self.fast_actor.rng_state()  # "acting_rng" is the target-network mixin's
        return PolicyState(arrays=arrays, meta=meta)

    def set_state(self, state: PolicyState) -> None:
        weights = {k.removeprefix("weights/"): v for k, v in state.arrays.items() if k.startswith("weights/")}
        self._torch_layout(weights)  # check before changing anything
        optimizer_meta = state.meta.get("optimizer")
        if optimizer_meta is not None and optimizer_meta.get("type") != self.optimizer.type_name:
            raise ValueError(
                f"optimizer state of {optimizer_meta.get('type')}, this policy uses {self.optimizer.type_name}"
            )
        self.set_weights(weights)
        if "optimizer" in state.meta:
            arrays = {
                k.removeprefix("optimizer/"): torch.from_numpy(np.array(v))
                for k, v in state.arrays.items()
                if k.startswith("optimizer/")
            }
            self.optimizer.load_state(arrays, state.meta["optimizer"])
        self.global_timestep = int(state.meta.get("global_timestep", 0))
        self.num_grad_updates = int(state.meta.get("num_grad_updates", 0))
        self.nonfinite.total = int(state.meta.get("num_nonfinite_updates", 0))
        if "rng" in state.meta:
            self.rng.bit_generator.state = state.meta["rng"]
        if self.fast_actor is not None:  # checkpoints before "twin_rng" kept it as "acting_rng"
            saved = state.meta.get("twin_rng", state.meta.get("acting_rng"))
            if saved is not None:
                self.fast_actor.set_rng_state(saved)
