"""What the TensorFlow policies of the centralised-critic team learners (``maddpg``, ``matd3``,
``masac``) share: reading a grouped team observation, the joint action's scaling and the
centralised critics; the torch backend's ``team`` module in TF (see it for the layout)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.plugins.backends.tf import tf
from rlgear.sampling.agent_groups import TeamLayout
from rlgear.spaces import Space


class TeamCriticTF:
    """Mixed in before an off-policy TF policy (DDPG's, SAC's) whose ``__init__`` set ``layout`` and
    ``agent_actions`` before calling it; :meth:`team_columns` finishes the set-up afterwards."""

    layout: TeamLayout
    agent_actions: int
    num_actions: int
    config: Any
    observation_space: Any
    action_low: np.ndarray
    action_half_range: np.ndarray
    q_values: Any

    def team_columns(self) -> None:
        """After the base ``__init__``: acting works on the flat joint action ``[B, n x A]``; the
        losses on ``[B, n, A]`` (the bounds ``[n, A]``), with each agent's own columns marked."""
        self._low_team = tf.constant(self.action_low)
        self._half_range_team = tf.constant(self.action_half_range)
        # [n, A]: 1 on each agent's own action columns, 0 on the padding of a narrower agent
        own = self.action_half_range > 0
        self._own_columns = tf.constant(own.astype(np.float32))
        self._scale_team = tf.constant(np.where(own, self.action_half_range, 1.0).astype(np.float32))
        self.action_low = self.action_low.reshape(-1)
        self.action_half_range = self.action_half_range.reshape(-1)

    def action_count(self, action_space: Space) -> int:
        """The joint action's width ``n x A`` (the critics' action input)."""
        return self.layout.n_agents * self.agent_actions

    @staticmethod
    def agent_actor(model: Any, inputs: tf.Tensor) -> tf.Tensor:
        """The actor's outputs ``[B, n, out]`` for actor inputs ``[B, n, in]`` (as ``[B * n]`` rows)."""
        shape = tf.shape(inputs)
        out = model.actor(tf.reshape(inputs, [-1, inputs.shape[-1]]))
        return tf.reshape(out, [shape[0], shape[1], -1])

    def split(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(actor inputs [B, n, in], state [B, s], presence [B, n])`` of team observations (flat or not)."""
        n = self.layout.n_agents
        team = tf.reshape(obs, [tf.shape(obs)[0], n + 1, self.observation_space.shape[1]])
        agents = tf.gather(team[:, :n, 1:], self.layout.obs_columns, axis=-1)
        if self.config.training.agent_id:
            ids = tf.broadcast_to(tf.eye(n), [tf.shape(obs)[0], n, n])
            agents = tf.concat([agents, ids], axis=-1)
        state = tf.gather(team[:, n, 1:], self.layout.state_columns, axis=-1)
        return agents, state, team[:, :n, 0]

    def team_q_values(self, state: tf.Tensor, joint: tf.Tensor, which: str = "online") -> tf.Tensor:
        """``[K, B]``: the centralised critics on the state and the joint action ``[B, n, A]``."""
        return self.q_values(state, tf.reshape(joint, [tf.shape(joint)[0], self.num_actions]), which)

    def replayed_actions(self, env_actions: tf.Tensor, present: tf.Tensor) -> tf.Tensor:
        """Replayed team actions ``[B, n, A]`` in ``[-1, 1]``: padding columns and absent agents zero."""
        rows, n = tf.shape(present)[0], self.layout.n_agents
        actions = tf.reshape(tf.cast(env_actions, tf.float32), [rows, n, self.agent_actions])
        return ((actions - self._low_team) / self._scale_team - 1.0) * self._own_columns * present[..., None]

    def own_agent_variants(
        self, state: tf.Tensor, own: tf.Tensor, replayed: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``(state, joint)`` as ``[B * n]`` rows: variant ``a`` of a row is its joint action with agent
        ``a``'s replaced by ``own[:, a]`` and the others' as replayed (MADDPG's actor gradient)."""
        n, width, state_dim = self.layout.n_agents, self.agent_actions, self.layout.state_dim
        rows = tf.shape(replayed)[0]
        mask = tf.reshape(tf.eye(n), [1, n, n, 1])
        joint = mask * own[:, None] + (1.0 - mask) * replayed[:, None]  # [B, a, j, A]
        variant_state = tf.reshape(
            tf.broadcast_to(state[:, None], [rows, n, state_dim]), [rows * n, state_dim]
        )
        return variant_state, tf.reshape(joint, [rows * n, n, width])
