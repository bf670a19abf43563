"""TFPolicy: the base class of every algorithm's TensorFlow policy, assembled from its parts.

A subclass supplies ``loss()`` (and ``loss_columns``), as with ``TorchPolicy``; the base class
owns the rest:

- this module: construction (the model from the run's ``model:`` section, its variables under
  neutral names, the optimizer, the numpy generators), compiling the policy's functions, and
  what a loss calls (``model_outputs``, ``action_distribution``, ``to_tensors``);
- :mod:`~rlgear.plugins.backends.tf.compiled`: ``tf.function`` with a fixed signature, or eager
  execution for debugging (``training.eager``, ``RLGEAR_TF_EAGER``);
- :mod:`~rlgear.plugins.backends.tf.acting`: feed-forward and recurrent acting, through the
  numpy twin or one compiled graph;
- :mod:`~rlgear.plugins.backends.tf.learning`: the compiled gradient step on one minibatch and
  ``learn_on_batch``'s default, one step on the whole batch (epochs of minibatches are the
  on-policy SGD family's, :mod:`rlgear.plugins.families.onpolicy`);
- :mod:`~rlgear.plugins.backends.tf.gradients`: A3C's ``compute_gradients`` /
  ``apply_gradients``;
- :mod:`~rlgear.plugins.backends.tf.weights`: weights and the checkpoint state;
- :mod:`~rlgear.plugins.backends.tf.device`: ``to_device`` (``learners.device``): every compiled
  function traced and run under ``tf.device``.

Values that change during a run (learning rate, PPO's clip range) live in variables, not in the
traces. Weights leave as numpy under the torch backend's names and shapes (TF kernels are
``[in, out]`` already), so checkpoints move between the backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from rlgear.blocks.schedules import piecewise_linear
from rlgear.exploration import ExplorationHost
from rlgear.plugins.backends.tf.acting import TFActing, _mask_width
from rlgear.plugins.backends.tf.compiled import EAGER_ENV, Compiled, _columns_key, _spec, eager_requested
from rlgear.plugins.backends.tf.device import TFPlacement
from rlgear.plugins.backends.tf.distributions import action_noise_width, distribution_class
from rlgear.plugins.backends.tf.gradients import TFGradients
from rlgear.plugins.backends.tf.learning import TFLearning
from rlgear.plugins.backends.tf.models import build_model, named_variables
from rlgear.plugins.backends.tf.optimizers import make_optimizer
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.plugins.backends.tf.weights import TFWeights
from rlgear.policy import Policy, action_dim, recurrent_model
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Space, flat_dim

# Moved to compiled.py; importable from here as before.
__all__ = ["EAGER_ENV", "Compiled", "TFPolicy", "_columns_key", "_spec", "eager_requested"]


class TFPolicy(ExplorationHost, TFActing, TFLearning, TFGradients, TFWeights, TFPlacement, Policy):
    """Actor-critic acting and compiled gradient steps on ``loss()``.

    Subclasses set ``loss_columns`` (the batch columns ``loss`` reads) and
    implement ``loss(batch) -> (loss, stats)`` with TF ops only (it runs inside
    ``tf.function``: read changing hyperparameters from variables). Stats named
    in ``row_outputs`` are per-row tensors handed to :meth:`on_row_outputs`
    instead of being averaged. ``learn_on_batch`` takes one step on the whole batch,
    clipped with ``training.grad_clip``, its rows in an order drawn from the same numpy
    generator as ``TorchPolicy``'s (equal seeds give equal minibatches); an on-policy
    algorithm that runs epochs of minibatches mixes in
    :class:`~rlgear.plugins.families.onpolicy.MinibatchSGD` before this class.
    """

    loss_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS, SampleBatch.ACTIONS)
    #: True when every batch row is already a whole sequence ``[N, T, ...]`` (IMPALA), not a row of
    #: padded ``max_seq_len`` sequences: minibatches then pick rows as for a feed-forward policy.
    rows_are_sequences: ClassVar[bool] = False
    #: batch columns holding observations (flattened and one-hot encoded like ``obs``)
    observation_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS,)
    #: per-row loss outputs (not averaged), passed to ``on_row_outputs``
    row_outputs: ClassVar[tuple[str, ...]] = ()
    #: ``exploration.name``: the plugin's tf module is built (rlgear.exploration.ExplorationHost).
    exploration_backend: ClassVar[str] = "tf"

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.dist_class = distribution_class(action_space)  # TypeError for a space it cannot act in
        self.num_outputs = self.dist_class.required_inputs(action_space)
        seed = config.seed
        # Initial weights come from numpy (one stream per policy seed), not TF's global RNG.
        self.init_rng = np.random.default_rng(None if seed is None else [seed, 0x7F])
        self.recurrent = recurrent_model(config.model)
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
        """``fn`` under ``tf.function`` (fixed signature, no retracing), or ``fn`` itself when eager;
        traced and run on the policy's device once :meth:`to_device` set one."""
        if self.eager:
            return self.on_device(fn)
        return self.on_device(Compiled(fn, input_signature, jit_compile))

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
            # + reward, the state arrays (h, c or memory, mask), previous action
            width += 1 + sum(self.state_widths()) + action_dim(self.action_space)
            self._recurrent_act = self.function(
                self._recurrent_act_packed, [tf.TensorSpec([None, width], tf.float32)], jit
            )

    def update_config(self, config: Any) -> None:
        super().update_config(config)
        self._compile()  # loss coefficients are baked into the traces

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
