"""IQL on the TensorFlow backend: ``torch_policy``'s networks, weight names and losses, term for term."""

from __future__ import annotations

from typing import Any

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.plugins.backends.tf import StackedMLP, TargetModel, TFPolicy, named_variables, tf
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Box, Discrete, Space, flat_dim

NUM_CRITICS = 2


class IQLModel(tf.Module):
    """The catalog actor-value model (acting reads it alone) beside the stacked critics ``q/...``."""

    def __init__(self, actor_value: Any, critic: StackedMLP):
        super().__init__()
        self.actor_value = actor_value
        self.critic = critic

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.actor_value(obs)

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        return [*named_variables(self.actor_value), *self.critic.named("q")]


class IQLTFPolicy(TargetNetworkState, TargetModel, TFPolicy):
    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, SB.NEXT_OBS)
    observation_columns = (SB.OBS, SB.NEXT_OBS)  # both preprocessed (flattened) like obs

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete | Box):
            raise TypeError(f"IQL needs Discrete or Box actions, got {action_space!r}")
        super().__init__(observation_space, action_space, config)
        self.make_target_model()

    def make_model(self) -> IQLModel:
        if self.config.model.custom:
            raise TypeError(
                "IQLTFPolicy builds its own critics beside the catalog model; model.custom is not used"
            )
        actor_value = super().make_model()
        sizes = list(self.config.model.hidden_sizes)
        obs_dim = flat_dim(self.observation_space)
        activation = self.config.model.activation
        if isinstance(self.action_space, Discrete):
            critic = StackedMLP(NUM_CRITICS, obs_dim, sizes, self.action_space.n, activation, self.init_rng)
        else:
            in_dim = obs_dim + self.action_space.size
            critic = StackedMLP(NUM_CRITICS, in_dim, sizes, 1, activation, self.init_rng)
        return IQLModel(actor_value, critic)

    def critic_values(self, critic: StackedMLP, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """``[2, B]``: each critic's ``Q(s, a)`` of the dataset's actions."""
        if isinstance(self.action_space, Discrete):
            q_all = critic(obs)  # [2, B, n]
            index = tf.cast(actions, tf.int32)
            rows = tf.stack([tf.range(tf.shape(index)[0]), index], axis=1)
            return tf.stack([tf.gather_nd(q_all[k], rows) for k in range(NUM_CRITICS)])
        flat_actions = tf.reshape(tf.cast(actions, obs.dtype), (-1, self.action_space.size))
        return critic(tf.concat([obs, flat_actions], axis=-1))[..., 0]

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        training = self.config.training
        obs, actions = batch[SB.OBS], batch[SB.ACTIONS]
        dist_inputs, values = self.model(obs)
        target_q = tf.stop_gradient(
            tf.reduce_min(self.critic_values(self.target_model.critic, obs, actions), axis=0)
        )
        _, next_values = self.model(batch[SB.NEXT_OBS])
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], values.dtype)
            + tf.cast(batch[SB.DISCOUNTS], values.dtype) * next_values
        )
        u = target_q - values
        expectile_weight = tf.abs(training.expectile - tf.cast(u < 0, u.dtype))
        value_loss = tf.reduce_mean(expectile_weight * tf.square(u))
        q = self.critic_values(self.model.critic, obs, actions)
        critic_loss = 0.5 * tf.reduce_sum(tf.reduce_mean(tf.square(q - targets), axis=1))
        weights = tf.minimum(tf.exp(training.beta * tf.stop_gradient(u)), training.max_weight)
        logp = self.action_distribution(dist_inputs, batch).logp(actions)
        actor_loss = -tf.reduce_mean(weights * logp)
        loss = value_loss + critic_loss + actor_loss
        return loss, {
            "value_loss": value_loss,
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "mean_q": tf.reduce_mean(q),
            "mean_v": tf.reduce_mean(values),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_advantage_weight": tf.reduce_mean(weights),
        }

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step, then the Polyak update of the target critics (``training.tau``)."""
        stats = super().learn_on_batch(batch)
        self.update_target(self.config.training.tau)
        return stats
