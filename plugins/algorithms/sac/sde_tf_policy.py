"""SAC with gSDE exploration on the TensorFlow backend: ``sde_torch_policy``'s method, weight names
(``policy/sde_log_std``) and acting. The step's exploration ``eps`` ``[F, |A|]`` is drawn with
numpy on the host like the rest of the TF learner's noise (``noise_shapes``) and kept in
:attr:`sde_eps` for the tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.plugins.algorithms.sac.sde import SDETwinActing
from rlgear.plugins.algorithms.sac.tf_policy import _HALF_LOG_2PI, _LOG_2, SACTFPolicy
from rlgear.plugins.backends.tf import tf
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.plugins.families.gsde import SDE_EPSILON
from rlgear.spaces import Space, flat_dim


class SDEActorCritics(ActorCritics):
    """SAC's actor (means only), critics and ``log_alpha``, plus ``policy/sde_log_std``."""

    def __init__(
        self, actor: ActorMLP, critic: StackedMLP, log_alpha: float, learn_alpha: bool, log_std: Any
    ):
        super().__init__(actor, critic, log_alpha, learn_alpha)
        self.sde_log_std = tf.Variable(np.asarray(log_std, np.float32), name="sde_log_std")

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        named = super().named_variables()
        # the torch module's parameter order: actor, critics, log_alpha, then sde_log_std
        return [*named, ("policy/sde_log_std", self.sde_log_std)]


class SDESACTFPolicy(SDETwinActing, SACTFPolicy):
    """SAC with ``training.use_sde`` on TF; built by ``SACTFPolicy`` itself."""

    gaussian_actor = False
    builds_sde = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.sde_init(config)
        self.sde_eps: np.ndarray | None = None

    def acting_observations(self, observations: Any) -> np.ndarray:
        return self.preprocess(observations)

    def make_model(self) -> ActorCritics:
        model_config, training = self.config.model, self.config.training
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim, sizes = flat_dim(self.observation_space), list(model_config.hidden_sizes)
        rng, activation = self.init_rng, model_config.activation
        actor = ActorMLP(obs_dim, sizes, self.num_actions, activation, rng)
        critic = StackedMLP(self.num_critics, obs_dim + self.num_actions, sizes, 1, activation, rng)
        width = self.num_actions if training.full_std else 1
        log_std = np.full((sizes[-1], width), float(training.log_std_init), np.float32)
        return SDEActorCritics(actor, critic, self.initial_log_alpha(), self.learns_alpha(), log_std)

    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        # SAC's two per-row draws (unused with gSDE, kept so the loss's signature holds), then eps.
        features = int(self.model.sde_log_std.shape[0])
        return [*super().noise_shapes(batch_size), (features, self.num_actions)]

    def keep_noise(self, noise: list[tf.Tensor]) -> Any:
        self.sde_eps = noise[-1].numpy()
        return tuple(noise)

    def sde_sigma(self) -> tf.Tensor:
        log_std = self.model.sde_log_std
        if self.config.training.use_expln:
            below = tf.exp(tf.minimum(log_std, 0.0))
            sigma = tf.where(log_std <= 0, below, tf.math.log1p(tf.maximum(log_std, 0.0)) + 1.0)
        else:
            sigma = tf.exp(log_std)
        return tf.broadcast_to(sigma, [sigma.shape[0], self.num_actions])

    def squashed_sample(self, obs: tf.Tensor, noise: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """As the torch policy's: ``a = tanh(mean + z^T (sigma * eps))`` with the step's ``eps``."""
        actor = self.model.actor
        hidden = obs
        for layer in actor.layers[:-1]:
            hidden = actor.activation(layer(hidden))
        mean = actor.layers[-1](hidden)
        features, sigma = tf.stop_gradient(hidden), self.sde_sigma()
        std = tf.sqrt(tf.matmul(tf.square(features), tf.square(sigma)) + SDE_EPSILON)
        pre_tanh = mean + tf.matmul(features, sigma * self._step_eps)
        gaussian_logp = tf.reduce_sum(
            -0.5 * tf.square((pre_tanh - mean) / std) - tf.math.log(std) - _HALF_LOG_2PI, axis=-1
        )
        log_det = tf.reduce_sum(2.0 * (_LOG_2 - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh)), axis=-1)
        return tf.tanh(pre_tanh), gaussian_logp - log_det

    def loss(self, batch: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool = True):
        self._step_eps = noise[-1]
        loss, stats, td_errors = super().loss(batch, noise[:-1], update_actor)
        return loss, {**stats, "sde_std": tf.reduce_mean(self.sde_sigma())}, td_errors
