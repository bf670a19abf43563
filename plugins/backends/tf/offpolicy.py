"""TF pieces of the off-policy continuous actor-critics (SAC, TD3, DDPG): the torch backend's twin.

* :class:`OffPolicyTFPolicy` - what SAC, TD3 and DDPG share on TF, with the same
  arithmetic, weight names and rules as ``OffPolicyTorchPolicy``: the actor
  (``policy/...``), the stacked critics (``q/...``) and SAC's ``log_alpha`` under one
  optimizer, one gradient step per :meth:`learn_on_batch` (a compiled ``tf.function``
  that also does the Polyak update of the targets, so one call per step), actions
  squashed by tanh and rescaled to the Box bounds, acting through the numpy twin
  :class:`rlgear.blocks.squashed_inference.NumpyTanhActor`. Its networks (the stacked
  critics ``StackedMLP``, the actor) are in :mod:`~rlgear.plugins.backends.tf.offpolicy_models`.

The actor's loss reads the critics through ``tf.stop_gradient`` of their variables,
so each loss reaches only its own parameters and one optimizer step equals separate
optimizers' steps (see the torch module's docstring). The learner's noise (SAC's
reparameterised samples, TD3's target smoothing) is drawn with numpy on the host and
fed to the compiled step: its draws are then known (``last_noise``, read by the loss
tests) and saved with the checkpoint like every other numpy generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.blocks.squashed_inference import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    NumpyTanhActor,
    action_bounds,
    box_action_count,
)
from rlgear.export.signature import explore_refused
from rlgear.plugins.backends.tf.compiled import _columns_key, _spec
from rlgear.plugins.backends.tf.export_heads import SquashedActorHead
from rlgear.plugins.backends.tf.offpolicy_models import ActorCritics, ActorMLP, StackedMLP
from rlgear.plugins.backends.tf.optimizers import make_optimizer
from rlgear.plugins.backends.tf.policy import TFPolicy
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space, flat_dim
from rlgear.timestep import TimeStep


class OffPolicyTFPolicy(TFPolicy):
    """Base of SAC's, TD3's and DDPG's TF policies (see the module docstring and ``OffPolicyTorchPolicy``).

    A subclass sets :attr:`num_critics`, :attr:`target_parts`, :attr:`gaussian_actor`,
    :meth:`initial_log_alpha`, implements ``loss(batch, noise, update_actor) -> (loss, stats,
    td_errors)`` in TF ops, :meth:`noise_shapes` (the learner noise one step draws) and
    :meth:`exploration`. After :meth:`learn_on_batch`, :attr:`td_errors` holds ``|TD error|``
    per row (mean over the critics) for prioritized replay.
    """

    loss_columns: ClassVar[tuple[str, ...]] = (
        SampleBatch.OBS,
        SampleBatch.ACTIONS,
        SampleBatch.REWARDS,
        SampleBatch.DISCOUNTS,
        NEXT_OBS,
        WEIGHTS,
    )
    observation_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS, NEXT_OBS)
    num_critics: ClassVar[int] = 2
    target_parts: ClassVar[tuple[str, ...]] = ("critic",)
    gaussian_actor: ClassVar[bool] = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.num_actions = self.action_count(action_space)
        self.target_model = None
        super().__init__(observation_space, action_space, config)
        learned = [var for var in self.variables if var.trainable]
        if len(learned) != len(self.variables):  # SAC's fixed alpha: outside the optimizer, as on torch
            training = config.training
            self.variables = learned
            self.optimizer = make_optimizer(
                training.optimizer, learned, self._current_lr(), training.optimizer_epsilon,
                training.optimizer_kwargs, getattr(config, "fail", None),
            )  # fmt: skip
            self._compile()
        low, high = action_bounds(action_space)
        self.action_low, self.action_half_range = low, (high - low) / 2
        # Target copies of target_parts: a second model built alike, then set to the online weights.
        self.target_model = self.make_model()
        prefixes = tuple(_SCOPES[part] for part in self.target_parts)
        online = dict(self.named_variables)
        self.target_variables = [
            (name, var) for name, var in self.target_model.named_variables() if name.startswith(prefixes)
        ]
        self._target_pairs = [(var, online[name]) for name, var in self.target_variables]
        self.update_target(1.0)
        seed = config.seed
        self.actor_twin = NumpyTanhActor(
            len(config.model.hidden_sizes), config.model.activation, self.gaussian_actor,
            None if seed is None else seed + 1,
        )  # fmt: skip
        self.acting_rng = self.actor_twin.rng
        #: the learner's noise (SAC's reparameterised samples, TD3's target smoothing)
        self.noise_rng = np.random.default_rng(None if seed is None else [seed, 2])
        self.last_noise: Any = None
        self.td_errors = np.zeros(0, dtype=np.float32)

    # --- the networks -----------------------------------------------------------------------
    def action_count(self, action_space: Space) -> int:
        """The actor's action width; raises for a space the policy cannot act in (here: anything but a
        bounded one-dimensional Box; discrete SAC's policy overrides it for Discrete)."""
        return box_action_count(type(self).__name__, action_space)

    def actor_outputs(self) -> int:
        """Width of the actor's output layer: 2 x actions (means, log stds) when Gaussian, else actions."""
        return 2 * self.num_actions if self.gaussian_actor else self.num_actions

    def critic_outputs(self) -> int:
        """Width of each critic's output layer: 1 (a Q-value); TQC's critics output quantiles."""
        return 1

    def initial_log_alpha(self) -> float | None:
        """The log temperature's initial value, or None for a policy without one (TD3, DDPG)."""
        return None

    def learns_alpha(self) -> bool:
        """Whether the optimizer moves ``log_alpha`` (SAC's ``tune_alpha``)."""
        return True

    def make_model(self) -> ActorCritics:
        model_config = self.config.model
        if model_config.custom:
            raise TypeError(
                f"{type(self).__name__} builds its own actor and critics; model.custom is not used"
            )
        obs_dim = flat_dim(self.observation_space)
        sizes = list(model_config.hidden_sizes)
        rng, activation = self.init_rng, model_config.activation
        actor = ActorMLP(obs_dim, sizes, self.actor_outputs(), activation, rng)
        critic = StackedMLP(
            self.num_critics, obs_dim + self.num_actions, sizes, self.critic_outputs(), activation, rng
        )
        return ActorCritics(actor, critic, self.initial_log_alpha(), self.learns_alpha())

    def _make_fast_actor(self) -> None:
        return None  # acting goes through actor_twin (a NumpyTanhActor), not the actor-critic twin

    def q_values(self, obs: tf.Tensor, actions: tf.Tensor, which: str = "online") -> tf.Tensor:
        """``[num_critics, B]`` Q-values of ``actions`` (in ``[-1, 1]``): ``online``, ``frozen`` (the online
        weights without gradient to them) or ``target``."""
        inputs = tf.concat([obs, actions], axis=-1)
        if which == "target":
            return self.target_model.critic(inputs)[..., 0]
        params = None
        if which == "frozen":
            critic = self.model.critic
            params = [tf.stop_gradient(v) for v in [*critic.kernels, *critic.biases]]
        return self.model.critic(inputs, params)[..., 0]

    def scaled_actions(self, env_actions: tf.Tensor) -> tf.Tensor:
        """Env actions (within the Box) mapped to the actor's ``[-1, 1]``."""
        return (tf.cast(env_actions, tf.float32) - self.action_low) / self.action_half_range - 1.0

    # --- acting -------------------------------------------------------------------------------
    def exploration(self, squashed: np.ndarray, timestep: TimeStep) -> np.ndarray:
        """Exploring actions in ``[-1, 1]`` from the actor's ``squashed`` output (SAC: already sampled)."""
        return squashed

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """As the torch policy's: uniform before ``learning_starts`` env steps, else the numpy twin's
        (exploring, or greedy ``tanh(mean)``) actions rescaled from ``[-1, 1]`` to the bounds."""
        twin = self.actor_twin
        if twin.version != self.weights_version:
            twin.load(self.get_weights(), self.weights_version)
        obs = self.preprocess(timestep.observation)
        if explore and self.global_timestep < self.config.training.learning_starts:
            squashed = self.acting_rng.uniform(-1.0, 1.0, (obs.shape[0], self.num_actions))
        else:
            squashed = twin.act(obs, explore)
            if explore:
                squashed = self.exploration(squashed, timestep)
        actions = self.action_low + (squashed + 1.0) * self.action_half_range
        return actions.astype(np.float32, copy=False), state, {}

    def export_head(self, explore: bool) -> SquashedActorHead:
        """The acting part of an exported graph: the actor, squashed and rescaled to the bounds. Only a
        Gaussian actor (SAC) samples; TD3's and DDPG's exploration noise is the trainer's, not the
        actor's, so their ``--explore`` is refused (as on torch)."""
        if explore and not self.gaussian_actor:
            raise explore_refused(
                f"{self.config.algorithm}'s exploration noise is added outside its actor "
                "(training.exploration_noise), so an exported graph cannot carry it"
            )
        return SquashedActorHead(
            self.model.actor, self.action_space, self.gaussian_actor, explore, LOG_STD_MIN, LOG_STD_MAX
        )

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """``tanh(mean)`` rescaled to the bounds, through the framework (for tests against the twin)."""
        out = self.model.actor(tf.constant(self.preprocess(observations)))[:, : self.num_actions]
        return (self.action_low + (np.tanh(out.numpy()) + 1.0) * self.action_half_range).astype(np.float32)

    # --- learning -----------------------------------------------------------------------------
    def noise_shapes(self, batch_size: int) -> list[tuple[int, ...]]:
        """Shapes of the standard-normal draws one gradient step's loss takes (none by default)."""
        return []

    def update_actor_now(self) -> bool:
        """Whether this gradient step updates the actor and the targets (TD3 delays them)."""
        return True

    def _compile(self) -> None:
        super()._compile()
        self._learn_steps: dict[Any, Callable] = {}  # loss settings are baked into the traces

    def _learn_step_impl(
        self, tensors: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool
    ) -> dict[str, tf.Tensor]:
        """Loss, gradients, clipping, the update and (``update_actor``) the Polyak step, in one graph.

        A non-finite loss or gradient norm skips the update (weights, optimizer state and targets stay).
        """
        with tf.GradientTape() as tape:
            loss, stats, td_errors = self.loss(tensors, noise, update_actor)
        # None for a variable this step's loss does not reach (TD3's actor between delayed updates):
        # the optimizer then leaves it and its moments alone, as torch's does for a parameter without grad.
        grads = tape.gradient(loss, self.variables, unconnected_gradients=tf.UnconnectedGradients.NONE)
        grad_norm = tf.linalg.global_norm(grads)  # ignores the Nones
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))
        tau = float(self.config.training.tau)
        clip = self.config.training.grad_clip

        def apply() -> tf.Tensor:
            clipped = grads
            if clip is not None:  # as torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6))
                coef = tf.minimum(clip / (grad_norm + 1e-6), 1.0)
                clipped = [None if g is None else g * coef for g in grads]
            self.optimizer.apply(clipped)
            if update_actor:
                self._polyak(tau)
            return tf.constant(True)

        applied = tf.cond(finite, apply, lambda: tf.constant(False))
        return {
            **stats,
            "total_loss": loss,
            "grad_gnorm": grad_norm,
            "td_errors": td_errors,
            "applied": applied,
        }

    def _learn_step_for(self, tensors: dict[str, tf.Tensor], noise: list[tf.Tensor], update_actor: bool):
        key = (_columns_key(tensors), len(noise), update_actor)
        step = self._learn_steps.get(key)
        if step is None:
            signature = [{k: _spec(v) for k, v in tensors.items()}, [_spec(n) for n in noise]]

            def fn(tensors, noise):
                return self._learn_step_impl(tensors, list(noise), update_actor)

            step = self._learn_steps[key] = self.function(fn, signature)
        return step

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on the replayed minibatch, then the Polyak update of the targets."""
        training = self.config.training
        self.optimizer.lr = lr = self._current_lr()
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        n = len(batch)
        noise = [
            tf.constant(self.noise_rng.standard_normal(shape, dtype=np.float32))
            for shape in self.noise_shapes(n)
        ]
        update_actor = self.update_actor_now()
        out = self._learn_step_for(tensors, noise, update_actor)(tensors, noise)
        self.last_noise = self.keep_noise(noise)
        self.td_errors = out.pop("td_errors").numpy()
        if bool(out.pop("applied")):
            self.nonfinite.record(True, training.max_nonfinite_updates)
            self.num_grad_updates += 1
            self.weights_version += 1
        else:
            self.nonfinite.record(
                False,
                training.max_nonfinite_updates,
                f" (last: loss {float(out['total_loss']):g}, gradient norm {float(out['grad_gnorm']):g})",
            )
            self.td_errors = np.full(n, np.nan, dtype=np.float32)
        stats = {key: float(value) for key, value in out.items()}
        stats.update(
            cur_lr=lr,
            num_grad_updates=float(self.num_grad_updates),
            num_nonfinite_updates=float(self.nonfinite.total),
        )
        return stats

    def compute_td_errors(self, batch: SampleBatch) -> np.ndarray:
        """``|TD error|`` per row of ``batch`` (mean over the critics) under the current networks,
        without learning: Ape-X's initial priorities, computed by the rollout worker (Horgan et al.
        2018). The critic part of :meth:`loss`, run eagerly without a gradient tape."""
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        noise = [
            tf.constant(self.noise_rng.standard_normal(shape, dtype=np.float32))
            for shape in self.noise_shapes(len(batch))
        ]
        _, _, td_errors = self.loss(tensors, noise, False)
        return np.asarray(td_errors, dtype=np.float32)

    def keep_noise(self, noise: list[tf.Tensor]) -> Any:
        """What :attr:`last_noise` holds after a step (the loss tests read the draws from it)."""
        return tuple(noise)

    def critic_loss(
        self, q_taken: tf.Tensor, targets: tf.Tensor, batch: dict[str, tf.Tensor]
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``0.5 x sum over critics of mean((Q_k - target)^2)`` (rows weighted by prioritized replay's
        importance weights), and ``|TD error|`` per row, averaged over the critics."""
        td = q_taken - targets  # [K, B]
        per_row = 0.5 * tf.reduce_sum(tf.square(td), axis=0)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        return tf.reduce_mean(per_row), tf.reduce_mean(tf.abs(tf.stop_gradient(td)), axis=0)

    # --- the target networks (TargetNetworkState's contract) -------------------------------------
    def _polyak(self, tau: float) -> None:
        for target, online in self._target_pairs:
            target.assign(target + tau * (online - target))  # torch's lerp_

    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target`` for :attr:`target_parts`; ``tau=1`` copies."""
        for target, online in self._target_pairs:
            target.assign(online if tau >= 1.0 else target + tau * (online - target))

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target copies' weights, named and laid out like :meth:`get_weights`."""
        return {name: var.numpy().copy() for name, var in self.target_variables}

    def check_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Raise, naming the weight, if ``weights`` do not fit the target copies (changes nothing)."""
        for name, var in self.target_variables:
            if name not in weights:
                raise ValueError(f"target weights are missing '{name}'")
            shape = tuple(np.shape(weights[name]))
            if shape != tuple(var.shape):
                raise ValueError(f"target weight '{name}' has shape {shape}, expected {tuple(var.shape)}")

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.check_target_weights(weights)
        self.assign_weights(self.target_variables, weights)

    # --- checkpoints: the learner's noise generator rides with the policy state -------------------
    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.meta["tf_noise_rng"] = self.noise_rng.bit_generator.state
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "tf_noise_rng" in state.meta:
            self.noise_rng.bit_generator.state = state.meta["tf_noise_rng"]

    def reseed(self, seed: int) -> None:
        super().reseed(seed)  # new numpy generators, acting_rng and noise_rng among them
        self.actor_twin.rng = self.acting_rng


#: the variable-name prefix of each part that can have a target copy
_SCOPES = {"actor": "policy/", "critic": "q/"}
