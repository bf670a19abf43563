"""TFPolicy: the base class of every algorithm's TensorFlow policy.

It owns the model, the optimizer and the minibatch SGD loop; a subclass
supplies only ``loss()``, as with ``TorchPolicy``. The learn step (gather a
minibatch, loss, gradients, global-norm clipping, optimizer update) is one
``tf.function`` traced once per set of batch columns: its input signature has
a dynamic batch dimension, so the last, partial minibatch and a new batch size
reuse the same graph. Values that change during a run (learning rate, PPO's
clip range) live in variables, not in the trace. ``compute_gradients`` and
``apply_gradients`` (A3C's split of that step between a worker and the
learner) are compiled the same way and share its gradient and clipping code.

``training.eager: true`` (or ``RLGEAR_TF_EAGER=1`` in the environment) runs
the same Python code eagerly instead, where errors point at the line that
failed and ``print``/breakpoints work.

Weights leave as numpy under the torch backend's names and shapes (TF kernels
are ``[in, out]`` already), so checkpoints move between the backends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from rlgear.blocks.inference import POLICY_HEAD, NumpyActorCritic, fill_action_logp
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.blocks.schedules import piecewise_linear
from rlgear.config.conv import conv_layers
from rlgear.plugins.backends.tf.distributions import action_noise_width, distribution_class
from rlgear.plugins.backends.tf.models import ActorCriticMLP, build_model, named_variables
from rlgear.plugins.backends.tf.optimizers import make_optimizer
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import Policy, PolicyState, action_dim, all_finite, flatten_observations
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, MultiDiscrete, Space, flat_action_dim, flat_dim
from rlgear.timestep import TimeStep

#: Environment variable that forces eager execution of TF policies (for debugging).
EAGER_ENV = "RLGEAR_TF_EAGER"


def eager_requested(config: Any) -> bool:
    """``training.eager``, or ``RLGEAR_TF_EAGER`` set to a true value."""
    env = os.environ.get(EAGER_ENV, "").strip().lower()
    return bool(getattr(config.training, "eager", False)) or env in ("1", "true", "yes", "on")


def _spec(value: tf.Tensor) -> tf.TensorSpec:
    return tf.TensorSpec([None, *value.shape[1:]], value.dtype)


def _columns_key(tensors: dict[str, tf.Tensor]) -> tuple:
    """What a compiled function of these batch columns is traced for: names, dtypes, shapes past dim 0."""
    return tuple(sorted((k, v.dtype.name, tuple(v.shape[1:])) for k, v in tensors.items()))


class Compiled:
    """``fn`` under ``tf.function`` with a fixed input signature, called through its concrete function.

    Calling the concrete function skips the polymorphic dispatch of
    ``tf.function``. When the signature is a flat list of tensors (acting),
    calls go one step further, to ``ConcreteFunction._call_flat``, which also
    skips the binding and canonicalisation of arguments: for the small graphs
    RL acting runs, that binding costs more than executing the graph (TF
    2.21, CPU: 8-row actor-critic step 210 -> 135 us per call). It is TF's
    private API, so it is used only when it exists and only for arguments
    that are tensors of the signature's dtype and rank (checked in a few
    attribute reads); anything else goes through the public call, which
    raises TF's own error for a wrong input. Tracing happens on the first
    call, so functions a run never uses cost nothing.
    """

    def __init__(self, fn: Callable, input_signature: Any, jit_compile: bool = False):
        self.function = tf.function(fn, input_signature=input_signature, jit_compile=jit_compile)
        flat = isinstance(input_signature, list | tuple) and all(
            isinstance(spec, tf.TensorSpec) for spec in input_signature
        )
        self._flat_specs = [(spec.dtype, spec.shape.rank) for spec in input_signature] if flat else None
        self._concrete: Any = None
        self._call_flat: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._concrete is None:
            self._concrete = self.function.get_concrete_function()
            if self._flat_specs is not None:
                self._call_flat = getattr(self._concrete, "_call_flat", None)
        if self._call_flat is not None and self._fits_flat_signature(args):
            return self._call_flat(list(args), self._concrete.captured_inputs)
        return self._concrete(*args)

    def _fits_flat_signature(self, args: tuple[Any, ...]) -> bool:
        specs = self._flat_specs
        return len(args) == len(specs) and all(
            isinstance(arg, tf.Tensor) and arg.dtype == dtype and arg.shape.rank == rank
            for arg, (dtype, rank) in zip(args, specs, strict=True)
        )


def _mask_width(space: Space) -> int:
    """Width of an action mask for ``space`` (0: masks are not supported)."""
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, MultiDiscrete):
        return sum(space.nvec)
    return 0


class TFPolicy(Policy):
    """Actor-critic acting + minibatch SGD on ``loss()``.

    Subclasses set ``loss_columns`` (the batch columns ``loss`` reads) and
    implement ``loss(batch) -> (loss, stats)`` with TF ops only (it runs inside
    ``tf.function``: read changing hyperparameters from variables). Stats named
    in ``row_outputs`` are per-row tensors handed to :meth:`on_row_outputs`
    instead of being averaged. The SGD loop reads ``training.num_sgd_iter``
    (default 1), ``training.sgd_minibatch_size`` (default: the whole batch) and
    ``training.grad_clip``, and draws minibatch order from the same numpy
    generator as ``TorchPolicy`` (so equal seeds give equal minibatches).
    """

    loss_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS, SampleBatch.ACTIONS)
    #: True when every batch row is already a whole sequence ``[N, T, ...]`` (IMPALA), not a row of
    #: padded ``max_seq_len`` sequences: minibatches then pick rows as for a feed-forward policy.
    rows_are_sequences: ClassVar[bool] = False
    #: batch columns holding observations (flattened and one-hot encoded like ``obs``)
    observation_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS,)
    #: per-row loss outputs (not averaged), passed to ``on_row_outputs``
    row_outputs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.dist_class = distribution_class(action_space)  # TypeError for a space it cannot act in
        self.num_outputs = self.dist_class.required_inputs(action_space)
        seed = config.seed
        # Initial weights come from numpy (one stream per policy seed), not TF's global RNG.
        self.init_rng = np.random.default_rng(None if seed is None else [seed, 0x7F])
        self.recurrent = bool(getattr(config.model, "lstm", False))
        self.max_seq_len = int(config.model.max_seq_len) if self.recurrent else 0
        self.model = self.make_model()
        self.named_variables = named_variables(self.model)
        names = [name for name, _ in self.named_variables]
        if len(set(names)) != len(names):
            raise ValueError(f"the model's weight names are not unique: {names}")
        self.variables = [v for _, v in self.named_variables]
        training = config.training
        self.optimizer = make_optimizer(
            training.optimizer,
            self.variables,
            self._current_lr(),
            training.optimizer_epsilon,
            training.optimizer_kwargs,
            getattr(config, "fail", None),
        )
        self.rng = np.random.default_rng(seed)  # minibatch order, as TorchPolicy's
        # Sampling noise of the TF acting path (model.numpy_inference: false).
        self.acting_rng = np.random.default_rng(None if seed is None else seed + 1)
        self.num_grad_updates = 0
        # Bumped whenever the weights change, so the numpy twin knows when to refresh.
        self.weights_version = 0
        self.fast_actor = self._make_fast_actor()
        self._obs_spec = tf.TensorSpec([None, flat_dim(observation_space)], tf.float32)
        self._compile()

    def make_model(self) -> Any:
        """The network (override for another architecture): the catalog MLP or ``model.custom``."""
        return build_model(
            self.observation_space, self.action_space, self.num_outputs, self.config.model, self.init_rng
        )

    # --- compilation --------------------------------------------------------
    @property
    def eager(self) -> bool:
        return eager_requested(self.config)

    def function(self, fn: Callable, input_signature: Any = None, jit_compile: bool = False) -> Callable:
        """``fn`` under ``tf.function`` (fixed signature, no retracing), or ``fn`` itself when eager."""
        if self.eager:
            return fn
        return Compiled(fn, input_signature, jit_compile)

    def _compile(self) -> None:
        """(Re)build the compiled functions; config values read by ``loss`` are fixed at trace time."""
        self._sgd_steps: dict[Any, Callable] = {}
        self._gradient_fns: dict[Any, Callable] = {}
        grad_specs = [tf.TensorSpec(v.shape, v.dtype) for v in self.variables]
        self._apply_clipped = self.function(self._apply_clipped_impl, [grad_specs])
        # Acting runs a few dozen tiny ops per call, where TF's per-op dispatch dominates:
        # XLA fuses them into one kernel launch (compiled once per batch size, i.e. once
        # per run). Custom models may use ops XLA lacks, so only the catalog's are fused.
        jit = not self.config.model.custom
        width = flat_dim(self.observation_space) + action_noise_width(self.action_space)
        if not self.recurrent:
            self._forward = self.function(self.model.__call__, [self._obs_spec], jit)
            # One function for exploring and greedy acting (greedy = sampling with greedy_noise):
            # a second graph without the noise input ran 3-4x slower per call (TF 2.21, CPU).
            self._act = self.function(self._act_packed, [tf.TensorSpec([None, width], tf.float32)], jit)
            # With action masks (traced on first use only): the mask rides as 0/1 columns after the noise.
            mask_width = _mask_width(self.action_space)
            self._act_masked = (
                self.function(self._act_packed, [tf.TensorSpec([None, width + mask_width], tf.float32)], jit)
                if mask_width
                else None
            )
        else:
            cell = int(self.config.model.lstm_cell_size)
            width += 1 + 2 * cell + action_dim(self.action_space)  # + reward, h, c, previous action
            self._recurrent_act = self.function(
                self._recurrent_act_packed, [tf.TensorSpec([None, width], tf.float32)], jit
            )

    def update_config(self, config: Any) -> None:
        super().update_config(config)
        self._compile()  # loss coefficients are baked into the traces

    # --- acting -------------------------------------------------------------
    def _make_fast_actor(self) -> NumpyActorCritic | None:
        model_config = self.config.model
        seed = None if self.config.seed is None else self.config.seed + 1
        twin_acts = isinstance(self.action_space, Discrete | Box)  # composite actions act in the framework
        if self.recurrent:
            return (
                NumpyLSTMActorCritic(
                    self.action_space, model_config, seed, conv_layers(self.observation_space, model_config)
                )
                if model_config.numpy_inference and twin_acts
                else None
            )
        if not (model_config.numpy_inference and isinstance(self.model, ActorCriticMLP) and twin_acts):
            return None
        conv = None if self.model.encoder is None else conv_layers(self.observation_space, model_config)
        return NumpyActorCritic(
            self.action_space, len(model_config.hidden_sizes), model_config.activation,
            bool(model_config.vf_share_layers), seed, conv,
        )  # fmt: skip

    def preprocess(self, observations: np.ndarray) -> np.ndarray:
        """Flat float32 ``[B, F]`` observations (one-hot for Discrete), as the model takes them."""
        return flatten_observations(self.observation_space, observations)

    def _act_impl(
        self, obs: tf.Tensor, noise: tf.Tensor, mask: tf.Tensor | None = None
    ) -> dict[str, tf.Tensor]:
        """Actions sampled with ``noise`` (among those ``mask`` allows), their log-probabilities and values."""
        dist_inputs, values = self.model(obs)
        dist = self.dist_class(dist_inputs, mask)
        actions = dist.sample(noise)
        out = {"actions": actions, SampleBatch.ACTION_LOGP: dist.logp(actions)}
        if values is not None:
            out[SampleBatch.VF_PREDS] = values
        return out

    def _act_packed(self, obs_and_noise: tf.Tensor) -> tf.Tensor:
        """:meth:`_act_impl` with one input and one output, the cheapest shape of a TF call.

        In: observations then noise, ``[B, F + noise width]`` (then the action mask as 0/1
        columns, for envs with masks). Out: the action
        columns (one for Discrete, exact as float32 below 2**24 actions), the
        log-probability, then the value if the model has one. Each extra
        input or output tensor costs a conversion and a binding: for 8
        observations, packing took 18% off a call (TF 2.21, CPU).
        """
        features = flat_dim(self.observation_space)
        noise_end = features + action_noise_width(self.action_space)
        mask = obs_and_noise[:, noise_end:] > 0.5 if obs_and_noise.shape[1] > noise_end else None
        out = self._act_impl(obs_and_noise[:, :features], obs_and_noise[:, features:noise_end], mask)
        batch = tf.shape(obs_and_noise)[0]
        columns = [
            tf.reshape(tf.cast(out["actions"], tf.float32), [batch, -1]),
            out[SampleBatch.ACTION_LOGP][:, None],
        ]
        if SampleBatch.VF_PREDS in out:
            columns.append(out[SampleBatch.VF_PREDS][:, None])
        return tf.concat(columns, axis=1)

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        if not self.recurrent:
            return []
        cell = int(self.config.model.lstm_cell_size)
        return [np.zeros((batch_size, cell), np.float32), np.zeros((batch_size, cell), np.float32)]

    def _recurrent_act_packed(self, packed: tf.Tensor) -> tf.Tensor:
        """One LSTM step and a sample, one tensor in and out (as :meth:`_act_packed`).

        In: observations, noise, previous reward, h, c, previous action (``[B, ...]`` columns, in that
        order). Out: action columns, log-probability, value, h', c'.
        """
        features = flat_dim(self.observation_space)
        noise_width = action_dim(self.action_space)
        cell = int(self.config.model.lstm_cell_size)
        obs, rest = packed[:, :features], packed[:, features:]
        noise, reward = rest[:, :noise_width], rest[:, noise_width]
        h = rest[:, noise_width + 1 : noise_width + 1 + cell]
        c = rest[:, noise_width + 1 + cell : noise_width + 1 + 2 * cell]
        prev_action = rest[:, noise_width + 1 + 2 * cell :]
        if isinstance(self.action_space, Discrete):
            prev_action = prev_action[:, 0]
        dist_inputs, values, (h, c) = self.model(obs, [h, c], prev_action, reward, 1)
        dist = self.dist_class(dist_inputs)
        actions = dist.sample(noise)
        batch = tf.shape(packed)[0]
        columns = [tf.reshape(tf.cast(actions, tf.float32), [batch, -1]), dist.logp(actions)[:, None]]
        return tf.concat([*columns, values[:, None], h, c], axis=1)

    def _compute_recurrent_actions(
        self, timestep: TimeStep, state: list[np.ndarray] | None, explore: bool
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        obs = self.preprocess(timestep.observation)
        n = obs.shape[0]
        if state is None:
            state = self.get_initial_state(n)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            actions, logp, values, new_state = fast.act(
                obs, state, explore, timestep.prev_action, timestep.reward, timestep.action_mask
            )
            return actions, new_state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        if timestep.action_mask is not None:
            raise ValueError(
                "a recurrent policy on the tf backend acts on masked actions with its numpy twin only: "
                "set model.numpy_inference: true (the default), or use the torch backend"
            )
        if explore:
            noise = self.dist_class.draw_noise(self.acting_rng, n, self.action_space)
        else:
            noise = self.dist_class.greedy_noise(n, self.action_space)
        inputs = [
            obs, noise, np.asarray(timestep.reward, np.float32).reshape(n, 1), *state,
            np.asarray(timestep.prev_action, np.float32).reshape(n, -1),
        ]  # fmt: skip
        packed = self._recurrent_act(tf.constant(np.concatenate(inputs, axis=1).astype(np.float32))).numpy()
        k = 1 if isinstance(self.action_space, Discrete) else self.action_space.size
        actions = (
            packed[:, 0].astype(np.int64)
            if k == 1 and isinstance(self.action_space, Discrete)
            else packed[:, :k]
        )
        cell = int(self.config.model.lstm_cell_size)
        new_state = [packed[:, k + 2 : k + 2 + cell].copy(), packed[:, k + 2 + cell :].copy()]
        return (
            actions,
            new_state,
            {SampleBatch.ACTION_LOGP: packed[:, k], SampleBatch.VF_PREDS: packed[:, k + 1]},
        )

    def recurrent_step(
        self, timestep: TimeStep, state: list[np.ndarray]
    ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """One step of the framework's LSTM model: ``(dist_inputs, values, new_state)`` (for tests)."""
        return self.model(
            tf.constant(self.preprocess(timestep.observation)),
            [tf.constant(np.asarray(s, np.float32)) for s in state],
            tf.constant(np.asarray(timestep.prev_action)),
            tf.constant(np.asarray(timestep.reward, np.float32)),
            1,
        )

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        """``action_logp`` of the rows the numpy twin acted on (it records the policy head instead)."""
        fill_action_logp(self.fast_actor, columns)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        if self.recurrent:
            return self._compute_recurrent_actions(timestep, state, explore)
        obs = self.preprocess(timestep.observation)
        fast = self.fast_actor
        if fast is not None:
            if fast.version != self.weights_version:
                fast.load(self.get_weights(), self.weights_version)
            actions, head, values = fast.act_deferred(obs, explore, timestep.action_mask)
            if self.defer_extras:  # the sampler: log-probabilities per fragment (finish_fragment)
                return actions, state, {POLICY_HEAD: head, SampleBatch.VF_PREDS: values}
            logp = fast.logp(head, actions, timestep.action_mask)
            return actions, state, {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: values}
        if explore:
            noise = self.dist_class.draw_noise(self.acting_rng, obs.shape[0], self.action_space)
        else:
            noise = self.dist_class.greedy_noise(obs.shape[0], self.action_space)
        mask = timestep.action_mask
        # tf.constant: cheaper than tf.convert_to_tensor for a numpy array
        if mask is None:
            packed = self._act(tf.constant(np.concatenate([obs, noise], axis=1))).numpy()
        else:
            if self._act_masked is None:
                raise ValueError(
                    f"an action mask needs Discrete or MultiDiscrete actions, not {self.action_space!r}"
                )
            columns = [obs, noise, mask.astype(np.float32)]
            packed = self._act_masked(tf.constant(np.concatenate(columns, axis=1))).numpy()
        space = self.action_space
        if isinstance(space, Discrete):
            k, actions = 1, packed[:, 0].astype(np.int64)
        elif isinstance(space, MultiDiscrete):
            k = len(space.nvec)
            actions = np.rint(packed[:, :k]).astype(np.int64)
        else:
            k = space.size if isinstance(space, Box) else flat_action_dim(space)
            actions = packed[:, :k]
        extras = {SampleBatch.ACTION_LOGP: packed[:, k]}
        if packed.shape[1] > k + 1:
            extras[SampleBatch.VF_PREDS] = packed[:, k + 1]
        return actions, state, extras

    def action_distribution_inputs(self, observations: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or means and log stds (Box): for tests and cross-backend parity."""
        if self.recurrent:
            raise TypeError(
                "a recurrent policy's outputs depend on its state: use recurrent_step(timestep, state)"
            )
        dist_inputs, _ = self._forward(tf.convert_to_tensor(self.preprocess(observations)))
        return dist_inputs.numpy()

    # --- learning -----------------------------------------------------------
    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The algorithm's loss on one minibatch of tensors; returns (loss, stats)."""
        raise TypeError(f"{type(self).__name__} must implement loss()")

    def action_distribution(self, dist_inputs: tf.Tensor, batch: dict[str, tf.Tensor]) -> Any:
        """The action distribution of ``dist_inputs``, masked by the batch's ``action_mask`` column
        when the env has masks (each row's mask is the one its action was chosen under)."""
        return self.dist_class(dist_inputs, batch.get(SampleBatch.ACTION_MASK))

    def model_outputs(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """``(dist_inputs, values)`` for the rows of a minibatch (as ``TorchPolicy.model_outputs``).

        A recurrent model runs over the padded sequences (``max_seq_len`` rows each) from the
        state-in of each sequence's first row; losses weigh rows by ``batch["seq_mask"]``.
        """
        if not self.recurrent:
            return self.model(batch[SampleBatch.OBS])
        length = self.max_seq_len
        dist_inputs, values, _ = self.model(
            batch[SampleBatch.OBS],
            [batch[SampleBatch.state_in(k)][::length] for k in range(2)],
            batch.get(SampleBatch.PREV_ACTIONS),
            batch.get(SampleBatch.REWARDS),
            length,
        )
        return dist_inputs, values

    def on_row_outputs(self, rows: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        """Receive the ``row_outputs`` of the minibatch made of batch rows ``rows``."""

    def _current_lr(self) -> float:
        training = self.config.training
        if training.lr_schedule:
            return piecewise_linear(training.lr_schedule, self.global_timestep)
        return float(training.lr)

    def to_tensors(self, batch: SampleBatch, columns: Iterable[str]) -> dict[str, tf.Tensor]:
        """The batch columns ``loss`` reads, as tensors (float64 columns become float32)."""
        tensors = {}
        for key in columns:
            if key not in batch:
                continue
            value = batch[key]
            if key in self.observation_columns:
                value = self.preprocess(value)
            value = np.asarray(value)
            if value.dtype == np.float64:
                value = value.astype(np.float32)
            tensors[key] = tf.convert_to_tensor(value)
        return tensors

    def _loss_and_gradients(
        self, batch: dict[str, tf.Tensor]
    ) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
        """Unclipped gradients of ``loss(batch)``, one per variable, and the loss's stats.

        The stats gain ``total_loss`` and ``grad_gnorm`` (the global norm before clipping).
        """
        with tf.GradientTape() as tape:
            loss, stats = self.loss(batch)
        grads = tape.gradient(loss, self.variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return grads, {**stats, "total_loss": loss, "grad_gnorm": tf.linalg.global_norm(grads)}

    def _clip_gradients(self, grads: list[tf.Tensor], grad_norm: tf.Tensor) -> list[tf.Tensor]:
        """``grads`` scaled to global norm ``training.grad_clip`` at most (read at trace time)."""
        clip = self.config.training.grad_clip
        if clip is None:
            return grads
        # As torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
        coef = tf.minimum(clip / (grad_norm + 1e-6), 1.0)
        return [g * coef for g in grads]

    def _sgd_step_impl(self, tensors: dict[str, tf.Tensor], rows: tf.Tensor) -> dict[str, tf.Tensor]:
        """One gradient step on ``tensors[rows]``; returns the stats before the update.

        A non-finite loss or gradient norm skips the step inside the graph (no
        host round trip); ``update_applied`` says which it was.
        """
        minibatch = {key: tf.gather(value, rows) for key, value in tensors.items()}
        grads, stats = self._loss_and_gradients(minibatch)
        finite = tf.logical_and(
            tf.math.is_finite(stats["total_loss"]), tf.math.is_finite(stats["grad_gnorm"])
        )

        def apply() -> tf.Tensor:
            self.optimizer.apply(self._clip_gradients(grads, stats["grad_gnorm"]))
            return tf.constant(True)

        return {**stats, "update_applied": tf.cond(finite, apply, lambda: tf.constant(False))}

    def _sgd_step_for(self, tensors: dict[str, tf.Tensor]) -> Callable:
        key = _columns_key(tensors)
        step = self._sgd_steps.get(key)
        if step is None:
            signature = [{k: _spec(v) for k, v in tensors.items()}, tf.TensorSpec([None], tf.int32)]
            step = self._sgd_steps[key] = self.function(self._sgd_step_impl, signature)
        return step

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        training = self.config.training
        lr = self._current_lr()
        self.optimizer.lr = lr
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        step = self._sgd_step_for(tensors)
        n = len(batch)
        epochs = int(getattr(training, "num_sgd_iter", 1))
        minibatch = int(getattr(training, "sgd_minibatch_size", 0) or n)
        # Recurrent: shuffle whole sequences; a minibatch holds round(size / max_seq_len) of them (>= 1).
        padded = self.recurrent and not self.rows_are_sequences
        length = self.max_seq_len if padded else 1
        units = n // length
        per_minibatch = max(1, round(minibatch / length)) if padded else minibatch
        within = np.arange(length, dtype=np.int32)
        results = []
        for _ in range(epochs):
            order = self.rng.permutation(units).astype(np.int32)
            for start in range(0, units, per_minibatch):
                rows = order[start : start + per_minibatch]
                if padded:
                    rows = (rows[:, None] * length + within).reshape(-1)
                out = step(tensors, tf.convert_to_tensor(rows))
                self.num_grad_updates += 1
                self.weights_version += 1
                if self.row_outputs:
                    self.on_row_outputs(rows, {k: out.pop(k).numpy() for k in self.row_outputs})
                results.append(out)
        applied = []
        for out in results:  # read the flags once, after the loop: no host sync per step
            if bool(out.pop("update_applied")):
                self.nonfinite.record(True, training.max_nonfinite_updates)
                applied.append(out)
            else:
                self.nonfinite.record(
                    False,
                    training.max_nonfinite_updates,
                    f" (last: loss {float(out['total_loss']):g}, gradient norm {float(out['grad_gnorm']):g})",
                )
        count = max(len(applied), 1)
        keys = results[0] if results else {}
        stats = {key: sum(float(r[key]) for r in applied) / count for key in keys}
        stats["cur_lr"] = lr
        stats["num_grad_updates"] = float(self.num_grad_updates)
        stats["num_nonfinite_updates"] = float(self.nonfinite.total)
        return stats

    # --- asynchronous gradients (A3C): computed on a worker, applied by the learner ---
    def _gradients_for(self, tensors: dict[str, tf.Tensor]) -> Callable:
        key = _columns_key(tensors)
        fn = self._gradient_fns.get(key)
        if fn is None:
            signature = [{k: _spec(v) for k, v in tensors.items()}]
            fn = self._gradient_fns[key] = self.function(self._loss_and_gradients, signature)
        return fn

    def compute_gradients(self, batch: SampleBatch) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Gradients of ``loss()`` on the whole batch, without changing the weights.

        As ``TorchPolicy.compute_gradients``: numpy under the names and layout
        of :meth:`get_weights`, not clipped (:meth:`apply_gradients` clips with
        ``training.grad_clip``, where the learner applies them). A variable the
        loss does not reach gets a zero gradient. ``row_outputs`` go to
        :meth:`on_row_outputs` with every row of the batch.
        """
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        grads, stats = self._gradients_for(tensors)(tensors)
        if self.row_outputs:
            self.on_row_outputs(np.arange(len(batch)), {k: stats.pop(k).numpy() for k in self.row_outputs})
        named = {name: np.array(grad) for (name, _), grad in zip(self.named_variables, grads, strict=True)}
        return named, {key: float(value) for key, value in stats.items()}

    def _apply_clipped_impl(self, grads: list[tf.Tensor]) -> None:
        self.optimizer.apply(self._clip_gradients(grads, tf.linalg.global_norm(grads)))

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> None:
        """One optimizer step with ``grads`` from :meth:`compute_gradients` (clipped per ``grad_clip``).

        Every variable's gradient must be present with the weight's shape; the
        check runs before anything changes.
        """
        self.check_weights(grads, "gradient")
        finite = all_finite(grads)
        self.nonfinite.record(
            finite, self.config.training.max_nonfinite_updates, " (gradients from a worker)"
        )
        if not finite:
            return
        self.optimizer.lr = self._current_lr()
        self._apply_clipped(
            [
                tf.convert_to_tensor(np.asarray(grads[name], dtype=var.dtype.as_numpy_dtype))
                for name, var in self.named_variables
            ]
        )
        self.num_grad_updates += 1
        self.weights_version += 1

    # --- weights and state --------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: var.numpy().copy() for name, var in self.named_variables}

    def check_weights(self, weights: dict[str, np.ndarray], kind: str = "weight") -> None:
        """Raise ValueError naming the first weight that is missing or has the wrong shape.

        ``kind`` names what the arrays are in the message (``"gradient"`` for :meth:`apply_gradients`).
        """
        missing = [name for name, _ in self.named_variables if name not in weights]
        if missing:
            raise ValueError(f"{kind}s are missing {missing}; they do not fit this model")
        for name, var in self.named_variables:
            shape = tuple(np.shape(weights[name]))
            if shape != tuple(var.shape):
                raise ValueError(f"{kind} '{name}' has shape {shape}, the model expects {tuple(var.shape)}")

    def assign_weights(self, named: list[tuple[str, tf.Variable]], weights: dict[str, np.ndarray]) -> None:
        for name, var in named:
            var.assign(np.asarray(weights[name], dtype=var.dtype.as_numpy_dtype))

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.check_weights(weights)  # all checks first: a bad dict changes nothing
        self.assign_weights(self.named_variables, weights)
        self.weights_version += 1

    def get_state(self) -> PolicyState:
        arrays = {f"weights/{k}": v for k, v in self.get_weights().items()}
        for key, value in self.optimizer.state_arrays().items():
            arrays[f"optimizer/{key}"] = value
        meta = {
            "optimizer": self.optimizer.state_meta(),
            "global_timestep": self.global_timestep,
            "num_grad_updates": self.num_grad_updates,
            "num_nonfinite_updates": self.nonfinite.total,
            "rng": self.rng.bit_generator.state,
            "tf_acting_rng": self.acting_rng.bit_generator.state,
        }
        if self.fast_actor is not None:
            meta["twin_rng"] = self.fast_actor.rng_state()  # "acting_rng" is the target-network mixin's
        return PolicyState(arrays=arrays, meta=meta)

    def set_state(self, state: PolicyState) -> None:
        weights = {k.removeprefix("weights/"): v for k, v in state.arrays.items() if k.startswith("weights/")}
        optimizer_arrays = {
            k.removeprefix("optimizer/"): v for k, v in state.arrays.items() if k.startswith("optimizer/")
        }
        self.check_weights(weights)  # check everything before changing anything
        if "optimizer" in state.meta:
            self.optimizer.check_state(optimizer_arrays, state.meta["optimizer"])
        self.set_weights(weights)
        if "optimizer" in state.meta:
            self.optimizer.load_state(optimizer_arrays, state.meta["optimizer"])
        self.global_timestep = int(state.meta.get("global_timestep", 0))
        self.num_grad_updates = int(state.meta.get("num_grad_updates", 0))
        self.nonfinite.total = int(state.meta.get("num_nonfinite_updates", 0))
        if "rng" in state.meta:
            self.rng.bit_generator.state = state.meta["rng"]
        if "tf_acting_rng" in state.meta:
            self.acting_rng.bit_generator.state = state.meta["tf_acting_rng"]
        if self.fast_actor is not None:  # checkpoints before "twin_rng" kept it as "acting_rng"
            saved = state.meta.get("twin_rng", state.meta.get("acting_rng"))
            if saved is not None:
                self.fast_actor.set_rng_state(saved)
