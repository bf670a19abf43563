"""SAC with gSDE: what its torch and TF policies share, framework-free (acting through the numpy
twin of the actor with per-env exploration matrices, and their place in the policy state).
See ``sde_torch_policy`` for the method (Raffin et al. 2021)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.export.signature import explore_refused
from rlgear.plugins.families.gsde import SDENoise, sde_std
from rlgear.policy import PolicyState
from rlgear.timestep import TimeStep


class SDETwinActing:
    """Mixed in before SAC's policy class: gSDE's acting, export refusal and state."""

    config: Any
    actor_twin: Any
    num_actions: int
    weights_version: int
    global_timestep: int
    acting_rng: np.random.Generator
    action_low: np.ndarray
    action_half_range: np.ndarray

    def sde_init(self, config: Any) -> None:
        seed = config.seed
        self.sde_noise = SDENoise(int(config.training.sde_sample_freq), None if seed is None else seed + 5)
        self._acting_sigma = np.zeros((0, self.num_actions))

    # --- acting -------------------------------------------------------------------------------
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """Uniform before ``learning_starts`` (unless ``use_sde_at_warmup``), else
        ``tanh(mean + theta_env^T z)`` exploring, ``tanh(mean)`` greedy; rescaled to the bounds."""
        training, twin = self.config.training, self.actor_twin
        if twin.version != self.weights_version:
            weights = self.get_weights()
            twin.load(weights, self.weights_version)
            self._acting_sigma = sde_std(
                weights["policy/sde_log_std"], self.num_actions, bool(training.use_expln)
            )
        obs = self.acting_observations(timestep.observation)
        warmup = explore and self.global_timestep < training.learning_starts
        if warmup and not training.use_sde_at_warmup:
            squashed = self.acting_rng.uniform(-1.0, 1.0, (obs.shape[0], self.num_actions))
        else:
            pre_tanh = twin.forward(obs)
            if explore:
                features = twin.last_hidden()
                pre_tanh = pre_tanh + self.sde_noise.noise(
                    features, timestep.env_id, self._acting_sigma, self.weights_version
                )
            squashed = np.tanh(pre_tanh)
        actions = self.action_low + (squashed + 1.0) * self.action_half_range
        return actions.astype(np.float32, copy=False), state, {}

    def export_head(self, explore: bool) -> Any:
        if explore:
            raise explore_refused("gSDE's exploration matrices are acting state, not part of the actor")
        return super().export_head(False)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.arrays.update(self.sde_noise.get_state(self.weights_version))
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        self.sde_noise.set_state(state.arrays, self.weights_version)
