"""MADDPG and MATD3 on the TensorFlow backend: the same networks, weight names and losses as ``torch_policy``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.ddpg.tf_policy import DDPGTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.plugins.backends.tf.team import TeamCriticTF
from rlgear.plugins.families.replay.team import TeamActing, actor_input_dim, team_spaces
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


class MADDPGTFPolicy(TeamActing, TeamCriticTF, DDPGTFPolicy):
    """DDPG's TF policy on a grouped Box team (see the package docstring); acting in numpy (``team``).

    ``last_noise``: the step's target smoothing draws ``[B, n, A]`` (None without).
    """

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)
        self.team_columns()

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

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        """As ``MADDPGTorchPolicy.loss``: the critic's TD loss on the joint action, and each present
        agent's actor loss with the other agents' replayed actions (Lowe et al. 2017)."""
        training = self.config.training
        n = self.layout.n_agents
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
        replayed = self.replayed_actions(batch[SB.ACTIONS], present)
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
            variant_state, joint = self.own_agent_variants(state, mu, replayed)
            q = self.team_q_values(variant_state, joint, "frozen")[0]
            q = tf.reshape(q, [rows, n])
            actor_loss = -tf.reduce_sum(q * present) / tf.maximum(tf.reduce_sum(present), 1.0)
            loss = loss + actor_loss
            stats["actor_loss"] = actor_loss
        return loss, stats, td_errors
