"""MAPPO on the TensorFlow backend: the torch module's model (same weight names, shapes and variable
order) and PPO's TF loss, unchanged, with values from the centralised critic."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgear.plugins.algorithms.ppo.mappo.common import CentralisedCritic
from rlgear.plugins.algorithms.ppo.mappo.critic_input import CRITIC_OBS
from rlgear.plugins.algorithms.ppo.tf_policy import PPOTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.models import Dense, DenseStack
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Space, flat_dim


class MAPPOActorCritic(tf.Module):
    """The torch ``MAPPOActorCritic``'s twin: the actor on the observation, the critic on the critic input."""

    def __init__(self, obs_dim: int, num_outputs: int, continuous: bool, model_config: Any, critic_dim: int,
                 critic_sizes: list[int], rng: np.random.Generator):  # fmt: skip
        super().__init__()
        sizes, act = list(model_config.hidden_sizes), model_config.activation
        ortho = model_config.orthogonal_init
        gain = math.sqrt(2) if ortho else None
        self.continuous = continuous
        head_outputs = num_outputs // 2 if continuous else num_outputs
        self.policy_body = DenseStack(obs_dim, sizes, act, gain, rng)
        self.policy_output = Dense(sizes[-1], head_outputs, 0.01 if ortho else None, rng)
        if continuous:
            self.log_std = tf.Variable(
                np.full(head_outputs, float(model_config.init_log_std), dtype=np.float32), name="log_std"
            )
        self.critic_body = DenseStack(critic_dim, critic_sizes, act, gain, rng)
        self.critic_output = Dense(critic_sizes[-1], 1, 1.0 if ortho else None, rng)

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits = self.policy_output(self.policy_body(obs))
        if self.continuous:
            logits = tf.concat([logits, tf.broadcast_to(self.log_std, tf.shape(logits))], axis=-1)
        return logits, tf.zeros(tf.shape(obs)[:1], dtype=logits.dtype)

    def critic(self, critic_obs: tf.Tensor) -> tf.Tensor:
        return self.critic_output(self.critic_body(critic_obs))[:, 0]

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        """In the order of the torch model's ``named_parameters()`` (its own ``log_std`` first)."""
        out = [("policy/log_std", self.log_std)] if self.continuous else []
        out += self.policy_body.named("policy") + self.policy_output.named("policy/output")
        return out + self.critic_body.named("critic") + self.critic_output.named("critic/output")


class MAPPOTFPolicy(CentralisedCritic, PPOTFPolicy):
    """PPO's TF policy whose value predictions come from the centralised critic."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.critic_setup(observation_space, config)
        super().__init__(observation_space, action_space, config)

    def make_model(self) -> Any:
        return MAPPOActorCritic(
            flat_dim(self.observation_space), self.num_outputs, isinstance(self.action_space, Box),
            self.config.model, self.critic_spec.dim, self.critic_hidden_sizes(), self.init_rng,
        )  # fmt: skip

    def model_outputs(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        dist_inputs, _ = self.model(batch[SampleBatch.OBS])
        return dist_inputs, self.model.critic(batch[CRITIC_OBS])

    def critic_values(self, critic_obs: np.ndarray) -> np.ndarray:
        return self.model.critic(tf.constant(np.asarray(critic_obs, dtype=np.float32))).numpy()
