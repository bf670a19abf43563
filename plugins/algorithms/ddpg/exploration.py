"""DDPG's and TD3's exploration and delayed actor updates, in numpy: shared by the torch and TF policies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.timestep import StepType, TimeStep


class DeterministicActorRules:
    """Mixed into a backend's DDPG policy (before its off-policy base): what does not depend on the framework.

    Reads ``config``, ``acting_rng``, ``num_grad_updates`` and keeps :attr:`ou_state`.
    """

    config: Any
    acting_rng: np.random.Generator
    num_grad_updates: int
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

    def update_actor_now(self) -> bool:
        """TD3's delayed policy updates: the actor and the targets move every ``policy_delay``-th step."""
        return (self.num_grad_updates + 1) % self.config.training.policy_delay == 0
