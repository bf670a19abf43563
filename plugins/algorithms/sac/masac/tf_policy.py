"""MASAC on the TensorFlow backend: the same networks, weight names and losses as ``torch_policy``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.blocks.squashed_inference import LOG_STD_MAX, LOG_STD_MIN
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.sac.tf_policy import SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.plugins.backends.tf.team import TeamCriticTF
from rlgear.plugins.families.replay.team import TeamActing, actor_input_dim, team_spaces
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class MASACTFPolicy(TeamActing, TeamCriticTF, SACTFPolicy):
    """SAC's TF policy on a grouped Box team (see the package docstring); acting in numpy (``team``).

    ``last_noise``: the step's standard-normal draws ``(actor's at s, target's at s')``, each ``[B, n, A]``.
    """

    #: The rollout worker presents a multi-agent env as one team agent (rlgear.sampling.agent_groups).
    groups_agents = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.agent_actions = team_spaces(observation_space, action_space, "masac")
        super().__init__(observation_space, action_space, config)
        self.team_columns()

    def actor_outputs(self) -> int:
        """An agent's means then log stds: ``2 x A`` (the actor runs once per agent row)."""
        return 2 * self.agent_actions

    def make_model(self) -> ActorCritics:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        sizes, activation, rng, layout = (
            list(model_config.hidden_sizes),
            model_config.activation,
            self.init_rng,
            self.layout,
        )
        actor = ActorMLP(
            actor_input_dim(layout, self.config.training), sizes, self.actor_outputs(), activation, rng
        )
        critic = StackedMLP(self.num_critics, layout.state_dim + self.num_actions, sizes, 1, activation, rng)
        return ActorCritics(actor, critic, self.initial_log_alpha(), self.learns_alpha())

    def agent_target_entropy(self) -> tf.Tensor:
        """``[n]``: ``training.target_entropy`` per agent, or minus the agent's own action columns."""
        target = self.config.training.target_entropy
        own = tf.reduce_sum(self._own_columns, axis=-1)
        return -own if target is None else tf.fill(tf.shape(own), float(target))

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: masac acts for a team, one actor call per agent row, which the exported "
            "graphs do not carry; use rlgear.load on the checkpoint"
        )

    def greedy_actions(self, observations: Any) -> np.ndarray:
        """``[B, n, A]`` greedy team actions ``tanh(mean)`` through TF (for tests against the numpy twin)."""
        out = self.agent_actor(self.model, tf.constant(self.agent_actor_inputs(observations)))
        squashed = tf.tanh(out[..., : self.agent_actions])
        return (self._low_team + (squashed + 1.0) * self._half_range_team).numpy()

    # --- learning -----------------------------------------------------------------------------
    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        return [(batch_size, self.layout.n_agents, self.agent_actions)] * 2  # the actor's at s, at s'

    def agent_sample(self, inputs: tf.Tensor, noise: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """As ``MASACTorchPolicy.agent_sample``: ``(a [B, n, A], log pi(a_i | o_i) [B, n])`` over each
        agent's own columns."""
        out = self.agent_actor(self.model, inputs)
        mean, log_std = out[..., : self.agent_actions], out[..., self.agent_actions :]
        log_std = tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)
        pre_tanh = mean + tf.exp(log_std) * noise
        gaussian_logp = -0.5 * tf.square(noise) - log_std - _HALF_LOG_2PI
        log_det = 2.0 * (_LOG_2 - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh))
        own = self._own_columns
        return tf.tanh(pre_tanh) * own, tf.reduce_sum((gaussian_logp - log_det) * own, axis=-1)

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        """As ``MASACTorchPolicy.loss``: SAC's three losses on the team."""
        actor_noise, next_noise = noise
        inputs, state, present = self.split(batch[SB.OBS])
        next_inputs, next_state, next_present = self.split(batch[NEXT_OBS])
        rows, n = tf.shape(present)[0], self.layout.n_agents
        log_alpha = self.model.log_alpha
        alpha = tf.stop_gradient(tf.exp(log_alpha))[0]
        next_actions, next_logp = self.agent_sample(next_inputs, next_noise)
        next_actions = next_actions * next_present[..., None]
        next_q = tf.reduce_min(self.team_q_values(next_state, next_actions, "target"), axis=0)
        team_logp = tf.reduce_sum(next_logp * next_present, axis=-1)
        # rewards: the team's n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32)
            + tf.cast(batch[SB.DISCOUNTS], tf.float32) * (next_q - alpha * team_logp)
        )
        replayed = self.replayed_actions(batch[SB.ACTIONS], present)
        q_taken = self.team_q_values(state, replayed)
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)

        actions, logp = self.agent_sample(inputs, actor_noise)
        variant_state, joint = self.own_agent_variants(state, actions, replayed)
        q = tf.reshape(tf.reduce_min(self.team_q_values(variant_state, joint, "frozen"), axis=0), [rows, n])
        agents = tf.maximum(tf.reduce_sum(present), 1.0)
        actor_loss = tf.reduce_sum((alpha * logp - q) * present) / agents
        entropy_terms = (tf.stop_gradient(logp) + self.agent_target_entropy()) * present
        alpha_loss = -(log_alpha[0] * tf.reduce_sum(entropy_terms)) / agents
        loss = critic_loss + actor_loss
        if self.learns_alpha():
            loss = loss + alpha_loss
        stats = {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": alpha,
            "entropy": -tf.reduce_sum(logp * present) / agents,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        return loss, stats, td_errors
