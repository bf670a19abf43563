"""gSDE for PPO on the TensorFlow backend: ``gsde_torch``'s model (same weight names, same variable
order) and acting, in TF. See :mod:`rlgear.plugins.families.gsde` for the method."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.inference import POLICY_HEAD
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.models import ActorCriticMLP
from rlgear.plugins.families.gsde import SDE_EPSILON, SDENoise
from rlgear.policy import PolicyState, recurrent_model
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Space, flat_dim
from rlgear.timestep import TimeStep

_LOG_2PI = float(np.log(2.0 * np.pi))


class SDEActorCriticMLP(ActorCriticMLP):
    """The catalog actor-critic MLP with ``policy/sde_log_std`` ``[F, A]`` (or ``[F, 1]``) instead of
    ``policy/log_std``; outputs the means then the per-state log stds, as the torch twin."""

    def __init__(
        self, obs_dim: int, num_actions: int, model_config: Any, training: Any, rng: np.random.Generator
    ):
        super().__init__(obs_dim, 2 * num_actions, True, model_config, rng)
        del self.log_std
        self.continuous = False  # no state-independent log_std in named_variables / __call__ of the base
        width = num_actions if training.full_std else 1
        features = list(model_config.hidden_sizes)[-1]
        self.sde_log_std = tf.Variable(
            np.full((features, width), float(training.log_std_init), np.float32), name="sde_log_std"
        )
        self.use_expln, self.num_actions = bool(training.use_expln), num_actions

    def sigma(self) -> tf.Tensor:
        log_std = self.sde_log_std
        if self.use_expln:
            below = tf.exp(tf.minimum(log_std, 0.0))
            sigma = tf.where(log_std <= 0, below, tf.math.log1p(tf.maximum(log_std, 0.0)) + 1.0)
        else:
            sigma = tf.exp(log_std)
        return tf.broadcast_to(sigma, [sigma.shape[0], self.num_actions])

    def heads(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(means [B, A], features z [B, F] (stop_gradient), values [B])``."""
        if self.shared:
            policy_hidden = value_hidden = self.shared_body(obs)
        else:
            policy_hidden, value_hidden = self.policy_body(obs), self.value_body(obs)
        mean = self.policy_output(policy_hidden)
        return mean, tf.stop_gradient(policy_hidden), self.value_output(value_hidden)[:, 0]

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        mean, features, values = self.heads(obs)
        variance = tf.matmul(tf.square(features), tf.square(self.sigma()))
        return tf.concat([mean, 0.5 * tf.math.log(variance + SDE_EPSILON)], axis=-1), values

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        return [("policy/sde_log_std", self.sde_log_std), *super().named_variables()]  # torch's order


class SDEActingTF:
    """PPO's acting with gSDE on TF (eager, per step): ``mean + theta_env^T z`` exploring, the mean
    greedy, the log-probability under the per-state Gaussian; matrices in the policy state."""

    def sde_setup(self, observation_space: Space, action_space: Space, config: Any) -> None:
        if not isinstance(action_space, Box):
            raise TypeError(f"training.use_sde: gSDE needs Box actions, got {action_space!r}")
        if (
            config.model.custom
            or recurrent_model(config.model)
            or config.model.conv_filters
            or config.model.relational
        ):
            raise TypeError(
                "training.use_sde: gSDE is built for the catalog MLP (no model.custom, lstm, attention, "
                "relational or conv)"
            )
        self.sde_noise = SDENoise(
            int(config.training.sde_sample_freq), None if config.seed is None else config.seed + 5
        )

    def make_model(self) -> Any:
        if not self.config.training.use_sde:
            return super().make_model()
        return SDEActorCriticMLP(
            flat_dim(self.observation_space), self.action_space.size, self.config.model, self.config.training,
            self.init_rng,
        )  # fmt: skip

    def _make_fast_actor(self) -> Any:
        return None if self.config.training.use_sde else super()._make_fast_actor()

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if not self.config.training.use_sde:
            return super().compute_actions(timestep, state, explore)
        obs = tf.constant(self.preprocess(timestep.observation))
        mean, features, values = (t.numpy() for t in self.model.heads(obs))
        dist_inputs = self.model(obs)[0].numpy().astype(np.float64)
        actions = mean
        if explore:
            sigma = self.model.sigma().numpy()
            actions = mean + self.sde_noise.noise(features, timestep.env_id, sigma, self.weights_version)
        k = self.action_space.size
        log_std = dist_inputs[:, k:]
        z = (actions - dist_inputs[:, :k]) / np.exp(log_std)
        logp = (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(axis=-1)  # the loss's DiagGaussian, in numpy
        extras = {SampleBatch.ACTION_LOGP: logp.astype(np.float32), SampleBatch.VF_PREDS: values}
        shape = (len(actions), *self.action_space.shape)
        return actions.reshape(shape).astype(np.float32), state, extras

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        if POLICY_HEAD not in columns:  # acting here fills the log-probabilities itself
            return
        super().finish_fragment(columns)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        if self.config.training.use_sde:
            state.arrays.update(self.sde_noise.get_state(self.weights_version))
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if self.config.training.use_sde:
            self.sde_noise.set_state(state.arrays, self.weights_version)
