"""What a policy with target networks adds to the weights and the checkpoint state, written once.

DQN, SAC, TD3 and DDPG keep target networks and their own acting generator beside
the base policy's state; APPO keeps a target network only (it has no ``acting_rng``).
Every backend saves them the same way (target weights under ``target/``, the
generator in the JSON meta), so a checkpoint restores
exactly and moves between backends. A backend's policy mixes this class in
before its base policy and provides ``update_target(tau)``,
``get_target_weights()``, ``set_target_weights(weights)`` and
``check_target_weights(weights)`` (raises, naming the weight, before anything changes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.policy import PolicyState


class TargetNetworkState:
    target_model: Any
    acting_rng: np.random.Generator

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights; the target network restarts from them too."""
        super().set_weights(weights)
        if getattr(self, "target_model", None) is not None:  # None while the base class is built
            self.update_target(1.0)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        for name, value in self.get_target_weights().items():
            state.arrays[f"target/{name}"] = value
        if getattr(self, "acting_rng", None) is not None:  # APPO's policy acts with the base class' own
            state.meta["acting_rng"] = self.acting_rng.bit_generator.state
        return state

    def set_state(self, state: PolicyState) -> None:
        target = {k.removeprefix("target/"): v for k, v in state.arrays.items() if k.startswith("target/")}
        if target:
            self.check_target_weights(target)  # before anything changes
        super().set_state(state)  # its set_weights() copies the online weights into the target
        if target:
            self.set_target_weights(target)
        if "acting_rng" in state.meta and getattr(self, "acting_rng", None) is not None:
            self.acting_rng.bit_generator.state = state.meta["acting_rng"]
