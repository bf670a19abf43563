"""A TF policy's weights under the framework-neutral names, and its checkpoint state.

:class:`TFWeights` is one part of :class:`~rlgear.plugins.backends.tf.policy.TFPolicy`. TF
kernels are ``[in, out]`` already, so weights leave as numpy under the torch backend's names and
shapes as they are, and checkpoints move between the backends. ``get_state`` adds the
optimizer's arrays, the counters and the numpy generators (minibatch order, the TF acting
path's noise, the twin's noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import NonFiniteGuard, PolicyState


class TFWeights:
    """Weights and state; mixed into ``TFPolicy`` (which sets the attributes)."""

    named_variables: list[tuple[str, Any]]
    optimizer: Any
    rng: np.random.Generator
    acting_rng: np.random.Generator
    fast_actor: Any
    global_timestep: int
    num_grad_updates: int
    nonfinite: NonFiniteGuard
    weights_version: int

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: var.numpy().copy() for name, var in self.named_variables}

    def check_weights(self, weights: dict[str, np.ndarray], kind: str = "weight") -> None:
        """Raise ValueError naming the first weight that is missing or has the wrong shape.

        ``kind`` names what the arrays are in the message (``"gradient"`` for :meth:`apply_gradients`).
        """
        missing = [name for name, _ in self.named_variables if name not in weights]
        if missing:
            raise ValueError(f"{kind}s are missing {missing}; they do not fit this model")
        for name, var in self.named_variables:
            shape = tuple(np.shape(weights[name]))
            if shape != tuple(var.shape):
                raise ValueError(f"{kind} '{name}' has shape {shape}, the model expects {tuple(var.shape)}")

    def assign_weights(self, named: list[tuple[str, tf.Variable]], weights: dict[str, np.ndarray]) -> None:
        for name, var in named:
            var.assign(np.asarray(weights[name], dtype=var.dtype.as_numpy_dtype))

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.check_weights(weights)  # all checks first: a bad dict changes nothing
        self.assign_weights(self.named_variables, weights)
        self.weights_version += 1

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{k}": v for k, v in self.get_weights().items()}
        for key, value in self.optimizer.state_arrays().items():
            arrays[f"optimizer/{key}"] = value
        meta = {
            "optimizer": self.optimizer.state_meta(),
            "global_timestep": self.global_timestep,
            "num_grad_updates": self.num_grad_updates,
            "num_nonfinite_updates": self.nonfinite.total,
            "rng": self.rng.bit_generator.state,
            "tf_acting_rng": self.acting_rng.bit_generator.state,
        }
        if self.fast_actor is not None:
            meta["twin_rng"] = self.fast_actor.rng_state()  # "acting_rng" is the target-network mixin's
        return PolicyState(arrays=arrays, meta=meta)

    def set_state(self, state: PolicyState) -> None:
        weights = {k.removeprefix("weights/"): v for k, v in state.arrays.items() if k.startswith("weights/")}
        optimizer_arrays = {
            k.removeprefix("optimizer/"): v for k, v in state.arrays.items() if k.startswith("optimizer/")
        }
        self.check_weights(weights)  # check everything before changing anything
        if "optimizer" in state.meta:
            self.optimizer.check_state(optimizer_arrays, state.meta["optimizer"])
        self.set_weights(weights)
        if "optimizer" in state.meta:
            self.optimizer.load_state(optimizer_arrays, state.meta["optimizer"])
        self.global_timestep = int(state.meta.get("global_timestep", 0))
        self.num_grad_updates = int(state.meta.get("num_grad_updates", 0))
        self.nonfinite.total = int(state.meta.get("num_nonfinite_updates", 0))
        if "rng" in state.meta:
            self.rng.bit_generator.state = state.meta["rng"]
        if "tf_acting_rng" in state.meta:
            self.acting_rng.bit_generator.state = state.meta["tf_acting_rng"]
        if self.fast_actor is not None:  # checkpoints before "twin_rng" kept it as "acting_rng"
            saved = state.meta.get("twin_rng", state.meta.get("acting_rng"))
            if saved is not None:
                self.fast_actor.set_rng_state(saved)
