"""QMIX's acting, written once for both backends: the agent network in numpy, per-agent
epsilon-greedy actions, the epsilon schedule and the acting generator in checkpoints.

Why numpy: acting is a few dozen rows per env step, where a framework's per-call cost dominates
(the backends' numpy twins exist for the same reason), and one implementation makes a torch and
a TF policy with the same weights act identically. The learners' GRUs (``torch_policy``,
``tf_policy``) compute the same function; ``tests/test_qmix_loss_reference.py`` checks all three
against one float64 reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.schedules import piecewise_linear
from rlgear.policy import epsilon_greedy_actions
from rlgear.sampling.agent_groups import TeamLayout
from rlgear.timestep import StepType


def epsilon_at(training: Any, timestep: int) -> float:
    """Epsilon after ``timestep`` env steps: linear from ``epsilon_initial`` to ``epsilon_final``
    over ``epsilon_timesteps``, then constant (PyMARL's ``DecayThenFlatSchedule``, linear)."""
    if timestep >= training.epsilon_timesteps:
        return float(training.epsilon_final)
    points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
    return piecewise_linear(points, timestep)


def agent_inputs(
    agent_obs: np.ndarray, last_actions: np.ndarray | None, num_actions: int, training: Any
) -> np.ndarray:
    """``[..., n, inputs]``: each agent's observation, then (``obs_last_action``) its previous
    action one-hot (``last_actions`` holds -1 where there is none: zeros), then
    (``obs_agent_id``) its one-hot index (PyMARL's ``_build_inputs``)."""
    n = agent_obs.shape[-2]
    parts = [agent_obs]
    if training.obs_last_action:
        eye = np.eye(num_actions + 1, dtype=agent_obs.dtype)[:, :num_actions]  # row -1: zeros
        parts.append(eye[np.where(last_actions < 0, num_actions, last_actions)])
    if training.obs_agent_id:
        parts.append(np.broadcast_to(np.eye(n, dtype=agent_obs.dtype), (*agent_obs.shape[:-2], n, n)))
    return np.concatenate(parts, axis=-1)


def input_dim(layout: TeamLayout, num_actions: int, training: Any) -> int:
    """Width of the agent network's input."""
    return (
        layout.obs_dim
        + (num_actions if training.obs_last_action else 0)
        + (layout.n_agents if training.obs_agent_id else 0)
    )


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def agent_step(
    weights: dict[str, np.ndarray], inputs: np.ndarray, hidden: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the agent network: ``(q_values [..., actions], hidden' [..., H])``.

    ``fc -> ReLU -> GRUCell -> fc``; the GRU is torch's ``GRUCell`` (gates r, z, n in that order
    in ``agent/gru/*``, with separate input and recurrent biases).
    """
    x = np.maximum(inputs @ weights["agent/fc/kernel"] + weights["agent/fc/bias"], 0.0)
    gi = x @ weights["agent/gru/kernel"] + weights["agent/gru/bias"]
    gh = hidden @ weights["agent/gru/recurrent_kernel"] + weights["agent/gru/recurrent_bias"]
    i_r, i_z, i_n = np.split(gi, 3, axis=-1)
    h_r, h_z, h_n = np.split(gh, 3, axis=-1)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    candidate = np.tanh(i_n + r * h_n)
    hidden = (1.0 - z) * candidate + z * hidden
    return hidden @ weights["agent/output/kernel"] + weights["agent/output/bias"], hidden


class TeamActing:
    """Mixed in before a backend's base policy: ``compute_actions`` on the numpy agent network, the
    recurrent state (each agent's GRU state, ``[B, n, H]``) and :meth:`epsilon`; ``acting_rng`` is saved
    in checkpoints by :class:`~rlgear.blocks.target_network.TargetNetworkState`.

    The host sets ``layout`` (:class:`~rlgear.sampling.agent_groups.TeamLayout`), ``num_actions``,
    ``acting_rng``, and provides ``get_weights()`` and ``weights_version``.
    """

    config: Any
    layout: TeamLayout
    num_actions: int
    global_timestep: int
    acting_rng: np.random.Generator
    weights_version: int

    def epsilon(self) -> float:
        """The probability of a random action per agent at the policy's ``global_timestep``."""
        return epsilon_at(self.config.training, self.global_timestep)

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        hidden = self.config.training.rnn_hidden_dim
        return [np.zeros((batch_size, self.layout.n_agents, hidden), np.float32)]

    def acting_weights(self) -> dict[str, np.ndarray]:
        """The agent network's weights as numpy, fetched again only after they changed."""
        cached = getattr(self, "_acting_weights", None)
        if cached is None or cached[0] != self.weights_version:
            weights = {k: v for k, v in self.get_weights().items() if k.startswith("agent/")}
            self._acting_weights = cached = (self.weights_version, weights)
        return cached[1]

    def compute_actions(
        self, timestep: Any, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        obs = np.asarray(timestep.observation, np.float32)
        batch, n = obs.shape[0], self.layout.n_agents
        hidden = self.get_initial_state(batch)[0] if not state else np.asarray(state[0], np.float32)
        agent_obs, _, _ = self.layout.split(obs)
        first = np.asarray(timestep.step_type) == int(StepType.FIRST)
        prev = np.asarray(timestep.prev_action, np.int64).reshape(batch, n)
        last_actions = np.where(first[:, None], -1, prev)
        inputs = agent_inputs(agent_obs, last_actions, self.num_actions, self.config.training)
        q_values, hidden = agent_step(self.acting_weights(), inputs, hidden)
        mask = timestep.action_mask
        mask = None if mask is None else np.asarray(mask, bool).reshape(batch * n, self.num_actions)
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(
            q_values.reshape(batch * n, self.num_actions), epsilon, self.acting_rng, mask
        )
        return actions.reshape(batch, n), [hidden.astype(np.float32)], {}


def team_spaces(observation_space: Any, action_space: Any) -> tuple[TeamLayout, int]:
    """``(layout, actions per agent)`` of a team policy's spaces, or a TypeError saying why they are
    not a grouped team's (qmix and vdn act for the whole team: the rollout worker groups the agents)."""
    from rlgear.sampling.agent_groups import team_layout
    from rlgear.spaces import MultiDiscrete

    try:
        layout = team_layout(observation_space)
    except ValueError as err:
        raise TypeError(f"qmix/vdn act for a team of agents: {err}") from None
    nvec = np.asarray(getattr(action_space, "nvec", []))
    if (
        not isinstance(action_space, MultiDiscrete)
        or len(nvec) != layout.n_agents
        or len(set(nvec.tolist())) != 1
    ):
        raise TypeError(
            f"qmix/vdn need the team's MultiDiscrete action (one Discrete per agent, padded to the largest by agent grouping), got {action_space!r}"
        )
    return layout, int(nvec[0])
