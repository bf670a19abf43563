"""Discrete SAC on the TensorFlow backend: the losses, weight names and acting of
``discrete_torch_policy`` (see its docstring for the equations, Christodoulou 2019)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.sac.discrete import discrete_target_entropy
from rlgear.plugins.algorithms.sac.tf_policy import SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.export_heads import QValueHead
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.policy import categorical_sample
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class DiscreteSACTFPolicy(SACTFPolicy):
    """SAC for a Discrete action space; built by ``SACTFPolicy`` itself when the action space is Discrete."""

    gaussian_actor = False  # the actor's output is the n logits

    def action_count(self, action_space: Space) -> int:
        if not isinstance(action_space, Discrete):
            raise TypeError(f"{type(self).__name__} needs a Discrete action space, got {action_space!r}")
        return int(action_space.n)

    @property
    def target_entropy(self) -> float:
        return discrete_target_entropy(self.config, self.num_actions)

    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        return []  # exact expectations over the actions: the loss samples nothing

    def make_model(self) -> ActorCritics:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim, sizes = flat_dim(self.observation_space), list(model_config.hidden_sizes)
        rng, activation = self.init_rng, model_config.activation
        actor = ActorMLP(obs_dim, sizes, self.num_actions, activation, rng)
        critic = StackedMLP(self.num_critics, obs_dim, sizes, self.num_actions, activation, rng)
        return ActorCritics(actor, critic, self.initial_log_alpha(), self.learns_alpha())

    def action_values(self, obs: tf.Tensor, which: str = "online") -> tf.Tensor:
        """``[num_critics, B, n]``: every action's Q-value, ``online``, ``frozen`` or ``target``."""
        if which == "target":
            return self.target_model.critic(obs)
        params = None
        if which == "frozen":
            critic = self.model.critic
            params = [tf.stop_gradient(v) for v in [*critic.kernels, *critic.biases]]
        return self.model.critic(obs, params)

    # --- acting -------------------------------------------------------------------------------
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """As the torch policy's: uniform before ``learning_starts``, else a categorical draw or argmax."""
        twin = self.actor_twin
        if twin.version != self.weights_version:
            twin.load(self.get_weights(), self.weights_version)
        obs = self.preprocess(timestep.observation)
        if explore and self.global_timestep < self.config.training.learning_starts:
            return self.acting_rng.integers(self.num_actions, size=obs.shape[0]), state, {}
        logits = twin.forward(obs)
        if explore:
            return categorical_sample(logits, self.acting_rng), state, {}
        return np.argmax(logits, axis=-1).astype(np.int64), state, {}

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """The most likely action, through the framework (for tests against the twin)."""
        return np.argmax(self.model.actor(tf.constant(self.preprocess(observations))).numpy(), axis=-1)

    def export_head(self, explore: bool) -> QValueHead:
        """Greedy acting: the argmax of the actor's logits (output ``q_values`` holds the logits)."""
        if explore:
            raise explore_refused(
                "discrete SAC's exported graph acts greedily (the actor's most likely action)"
            )
        return QValueHead(self.model.actor, self.num_actions)

    # --- learning -----------------------------------------------------------------------------
    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        log_alpha = self.model.log_alpha
        alpha = tf.stop_gradient(tf.exp(log_alpha))[0]
        next_logp = tf.nn.log_softmax(self.model.actor(next_obs), axis=-1)
        next_q = tf.reduce_min(self.action_values(next_obs, "target"), axis=0)  # [B, n]
        next_v = tf.reduce_sum(tf.exp(next_logp) * (next_q - alpha * next_logp), axis=-1)
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], tf.float32) + tf.cast(batch[SB.DISCOUNTS], tf.float32) * next_v
        )
        q_all = self.action_values(obs)  # [K, B, n]
        taken = tf.one_hot(tf.cast(batch[SB.ACTIONS], tf.int32), self.num_actions, dtype=q_all.dtype)
        q_taken = tf.reduce_sum(q_all * taken[None], axis=-1)
        critic_loss, td_errors = self.critic_loss(q_taken, targets, batch)

        logp = tf.nn.log_softmax(self.model.actor(obs), axis=-1)
        probs = tf.exp(logp)
        q_policy = tf.reduce_min(self.action_values(obs, "frozen"), axis=0)  # no gradient to the critics
        actor_loss = tf.reduce_mean(tf.reduce_sum(probs * (alpha * logp - q_policy), axis=-1))
        entropy = tf.stop_gradient(-tf.reduce_sum(probs * logp, axis=-1))
        alpha_loss = tf.reduce_mean(log_alpha * (entropy - self.target_entropy))
        loss = critic_loss + actor_loss
        if self.learns_alpha():
            loss = loss + alpha_loss
        stats = {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": alpha,
            "entropy": tf.reduce_mean(entropy),
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(td_errors),
        }
        return loss, stats, td_errors
