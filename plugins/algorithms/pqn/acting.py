"""PQN's acting, written once for both backends: the epsilon schedule, epsilon-greedy actions with
the bootstrap values the targets need, and the acting generator in checkpoints."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.schedules import piecewise_linear
from rlgear.policy import PolicyState, epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch


def epsilon_at(training: Any, timestep: int) -> float:
    """Epsilon after ``timestep`` env steps: linear from ``epsilon_initial`` to ``epsilon_final`` over
    ``epsilon_timesteps`` steps, then constant (CleanRL's ``linear_schedule``)."""
    if timestep >= training.epsilon_timesteps:
        return float(training.epsilon_final)
    points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
    return piecewise_linear(points, timestep)


def act_on_q_values(
    q_values: np.ndarray, epsilon: float, rng: np.random.Generator, action_mask: np.ndarray | None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Epsilon-greedy actions ``[B]`` and ``{vf_preds: max_a Q(s, a)}`` over the allowed actions.

    ``vf_preds`` is the greedy policy's value of each observation: the Q(lambda) targets bootstrap
    from it (at truncations and at a fragment's last row) and mix it in at every step.
    """
    allowed = q_values if action_mask is None else np.where(action_mask, q_values, -np.inf)
    actions = epsilon_greedy_actions(q_values, epsilon, rng, action_mask)
    return actions, {SampleBatch.VF_PREDS: allowed.max(axis=-1).astype(np.float32)}


class EpsilonGreedyState:
    """Mixed in before a backend's base policy: :meth:`epsilon`, and ``acting_rng`` (the draws of
    epsilon-greedy acting) saved in the checkpoint state under ``acting_rng``, as DQN's."""

    config: Any
    global_timestep: int
    acting_rng: np.random.Generator

    def epsilon(self) -> float:
        """The probability of a random action at the policy's ``global_timestep``."""
        return epsilon_at(self.config.training, self.global_timestep)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.meta["acting_rng"] = self.acting_rng.bit_generator.state
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "acting_rng" in state.meta:
            self.acting_rng.bit_generator.state = state.meta["acting_rng"]
