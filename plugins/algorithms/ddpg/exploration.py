"""DDPG's and TD3's exploration and delayed actor updates, in numpy: shared by the torch and TF policies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.policy import PolicyState
from rlgear.timestep import StepType, TimeStep

#: The policy-state array (``policy/<id>/exploration/ou_state`` in a checkpoint) of the OU process.
OU_STATE_KEY = "exploration/ou_state"


class DeterministicActorRules:
    """Mixed into a backend's DDPG policy (before its off-policy base): what does not depend on the framework.

    Reads ``config``, ``acting_rng``, ``num_grad_updates`` and keeps :attr:`ou_state`
    (``[env slots, actions]``, in the policy's state with Ornstein-Uhlenbeck noise).
    """

    config: Any
    acting_rng: np.random.Generator
    num_grad_updates: int
    num_actions: int
    ou_state: np.ndarray

    def exploration(self, squashed: np.ndarray, timestep: TimeStep) -> np.ndarray:
        """``clip(tanh(mu(s)) + noise, -1, 1)``: Gaussian noise, or an Ornstein-Uhlenbeck process per env
        slot (Lillicrap et al. 2016), restarted from 0 at each episode's FIRST step."""
        training = self.config.training
        scale = training.exploration_noise_scale
        draws = self.acting_rng.standard_normal(squashed.shape, dtype=np.float32)
        if training.exploration_noise == "gaussian":
            noise = scale * draws
        else:
            if self.ou_state.shape != squashed.shape:
                self.ou_state = np.zeros(squashed.shape, dtype=np.float32)
            self.ou_state[np.asarray(timestep.step_type) == StepType.FIRST] = 0.0
            dt = training.ou_dt
            self.ou_state += -training.ou_theta * self.ou_state * dt + scale * math.sqrt(dt) * draws
            noise = self.ou_state
        return np.clip(squashed + noise, -1.0, 1.0)

    # --- checkpoints: the OU process's state rides with the policy state (the acting generator too,
    # in TargetNetworkState's meta), so a restored policy draws the same exploring actions.
    def get_state(self) -> PolicyState:
        state = super().get_state()
        if self.config.training.exploration_noise == "ornstein_uhlenbeck":
            state.arrays[OU_STATE_KEY] = self.ou_state.copy()
        return state

    def set_state(self, state: PolicyState) -> None:
        ou_state = state.arrays.get(OU_STATE_KEY)
        if ou_state is not None:  # checked before anything changes
            ou_state = np.array(ou_state, dtype=np.float32)
            if ou_state.ndim != 2 or ou_state.shape[1] != self.num_actions:
                raise ValueError(
                    f"{OU_STATE_KEY} has shape {ou_state.shape}, expected [env slots, {self.num_actions}]"
                )
        super().set_state(state)
        if ou_state is not None:
            self.ou_state = ou_state

    def update_actor_now(self) -> bool:
        """TD3's delayed policy updates: the actor and the targets move every ``policy_delay``-th step."""
        return (self.num_grad_updates + 1) % self.config.training.policy_delay == 0
