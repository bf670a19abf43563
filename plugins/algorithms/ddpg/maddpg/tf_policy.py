"""MADDPG and MATD3 on the TensorFlow backend: the same networks, weight names and losses as ``torch_policy``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.ddpg.tf_policy import DDPGTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.plugins.families.replay.team import TeamActing, actor_input_dim, team_spaces
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MADDPGTFPolicy(TeamActing, DDPGTFPolicy):
    """DDPG's TF policy on a grouped Box team (see the package docstring); acting in numpy (``team``).

    ``last_noise``: the step's target smoothing draws ``[B, n, A]`` (None without).
    """

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)
        # acting works on the flat joint action [B, n x A]; the losses on [B, n, A] (the bounds [n, A])
        self._low_team = tf.constant(self.action_low)
        self._half_range_team = tf.constant(self.action_half_range)
        # [n, A]: 1 on each agent's own action columns, 0 on the padding of a narrower agent
        own = self.action_half_range > 0
        self._own_columns = tf.constant(own.astype(np.float32))
        self._scale_team = tf.constant(np.where(own, self.action_half_range, 1.0).astype(np.float32))
        self.action_low = self.action_low.reshape(-1)
        self.action_half_range = self.action_half_range.reshape(-1)

    def action_count(self, action_space: Space) -> int:
        """The joint action's width ``n x A`` (the critics' action input and the exploration noise's)."""
        return self.layout.n_agents * self.agent_actions

    def make_model(self) -> ActorCritics:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        sizes, activation, rng = list(model_config.hidden_sizes), model_config.activation, self.init_rng
        layout = self.layout
        actor = ActorMLP(
            actor_input_dim(layout, self.config.training), sizes, self.agent_actions, activation, rng
        )
        critic = StackedMLP(self.num_critics, layout.state_dim + self.num_actions, sizes, 1, activation, rng)
        return ActorCritics(actor, critic, None)

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: maddpg acts for a team, one actor call per agent row, which the exported "
            "graphs do not carry; use rlgear.load on the checkpoint"
        )

    def greedy_actions(self, observations: Any) -> np.ndarray:
        """``[B, n, A]`` greedy team actions through TF (for tests against the numpy twin)."""
        squashed = tf.tanh(self.agent_actor(self.model, tf.constant(self.agent_actor_inputs(observations))))
        return (self._low_team + (squashed + 1.0) * self._half_range_team).numpy()

    # --- learning -----------------------------------------------------------------------------
    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        training = self.config.training
        return [(batch_size, self.layout.n_agents, self.agent_actions)] if training.target_noise > 0 else []

    @staticmethod
    def agent_actor(model: ActorCritics, inputs: tf.Tensor) -> tf.Tensor:
        """The pre-tanh actions ``[B, n, A]`` of actor inputs ``[B, n, in]`` (as ``[B * n]`` rows)."""
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

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        """As ``MADDPGTorchPolicy.loss``: the critic's TD loss on the joint action, and each present
        agent's actor loss with the other agents' replayed actions (Lowe et al. 2017)."""
        training = self.config.training
        n, width = self.layout.n_agents, self.agent_actions
        inputs, state, present = self.split(batch[SB.OBS])
        next_inputs, next_state, next_present = self.split(batch[NEXT_OBS])
        rows = tf.shape(present)[0]
        next_actions = tf.tanh(self.agent_actor(self.target_model, next_inputs))
        if noise:  # TD3's target policy smoothing, per agent and action component
            clip = training.target_noise_clip
            smoothing = tf.clip_by_value(training.target_noise * noise[0], -clip, clip)
            next_actions = tf.clip_by_value(next_actions + smoothing, -1.0, 1.0)
        next_actions = next_actions * self._own_columns * next_present[..., None]
        next_q = tf.reduce_min(self.team_q_values(next_state, next_actions, "target"), axis=0)
        # rewards: the team's n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32) + tf.cast(batch[SB.DISCOUNTS], tf.float32) * next_q
        )
        env_actions = tf.reshape(tf.cast(batch[SB.ACTIONS], tf.float32), [rows, n, width])
        # in [-1, 1]; a narrower agent's padding columns zero (their bounds are [0, 0])
        replayed = (
            ((env_actions - self._low_team) / self._scale_team - 1.0) * self._own_columns * present[..., None]
        )
        q_taken = self.team_q_values(state, replayed)
        loss, td_errors = self.critic_loss(q_taken, targets, batch)
        stats = {
            "critic_loss": loss,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        if update_actor:
            mu = tf.tanh(self.agent_actor(self.model, inputs)) * self._own_columns  # [B, n, A]
            own = tf.reshape(tf.eye(n), [1, n, n, 1])
            joint = own * mu[:, None] + (1.0 - own) * replayed[:, None]  # [B, a, j, A]
            state_dim = self.layout.state_dim  # static, as the critic's input width must be
            variant_state = tf.reshape(
                tf.broadcast_to(state[:, None], [rows, n, state_dim]), [rows * n, state_dim]
            )
            q = self.team_q_values(variant_state, tf.reshape(joint, [rows * n, n, width]), "frozen")[0]
            q = tf.reshape(q, [rows, n])
            actor_loss = -tf.reduce_sum(q * present) / tf.maximum(tf.reduce_sum(present), 1.0)
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss
        return loss, stats, td_errors
