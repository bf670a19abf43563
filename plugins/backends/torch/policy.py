"""TorchPolicy: the base class of every algorithm's torch policy, assembled from its parts.

A subclass supplies ``loss()`` (and ``loss_columns``); the base class owns the rest:

- this module: construction (the model from the run's ``model:`` section, the optimizer, the
  numpy generators) and what a loss calls (``model_outputs``, ``action_distribution``,
  ``to_tensors``);
- :mod:`~rlgear.plugins.backends.torch.acting`: feed-forward and recurrent acting, through the
  numpy twin or the model;
- :mod:`~rlgear.plugins.backends.torch.learning`: the gradient step on one minibatch and
  ``learn_on_batch``'s default, one step on the whole batch (epochs of minibatches are the
  on-policy SGD family's, :mod:`rlgear.plugins.families.onpolicy`);
- :mod:`~rlgear.plugins.backends.torch.gradients`: A3C's ``compute_gradients`` /
  ``apply_gradients``;
- :mod:`~rlgear.plugins.backends.torch.weights`: the framework-neutral weight layout and the
  checkpoint state;
- :mod:`~rlgear.plugins.backends.torch.device`: ``to_device`` (``learners.device``) and moving each
  learn call's batch to the device once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np
import torch

from rlgear.blocks.schedules import piecewise_linear
from rlgear.exploration import ExplorationHost
from rlgear.plugins.backends.torch.acting import TorchActing
from rlgear.plugins.backends.torch.device import TorchPlacement
from rlgear.plugins.backends.torch.distributions import distribution_class
from rlgear.plugins.backends.torch.gradients import TorchGradients
from rlgear.plugins.backends.torch.learning import TorchLearning, clip_gradients
from rlgear.plugins.backends.torch.models import build_model
from rlgear.plugins.backends.torch.optimizers import make_optimizer
from rlgear.plugins.backends.torch.weights import TorchWeights
from rlgear.policy import Policy, recurrent_model
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Discrete, MultiDiscrete, Space

__all__ = ["TorchPolicy", "clip_gradients"]


class TorchPolicy(
    ExplorationHost, TorchActing, TorchLearning, TorchGradients, TorchWeights, TorchPlacement, Policy
):
    """Actor-critic acting and gradient steps on ``loss()``.

    Subclasses set ``loss_columns`` (the batch columns ``loss`` reads) and implement
    ``loss(batch) -> (loss, stats)`` on one minibatch of tensors. ``learn_on_batch`` takes one
    step on the whole batch, clipped with ``training.grad_clip``; an on-policy algorithm that
    runs epochs of minibatches mixes in
    :class:`~rlgear.plugins.families.onpolicy.MinibatchSGD` before this class.
    """

    loss_columns: ClassVar[tuple[str, ...]] = (SampleBatch.OBS, SampleBatch.ACTIONS)
    #: True when every batch row is already a whole sequence ``[N, T, ...]`` (IMPALA), not a row of
    #: padded ``max_seq_len`` sequences: minibatches then pick rows as for a feed-forward policy.
    rows_are_sequences: ClassVar[bool] = False
    #: ``exploration.name``: the plugin's torch module is built (rlgear.exploration.ExplorationHost).
    exploration_backend: ClassVar[str] = "torch"

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.dist_class = distribution_class(action_space)  # TypeError for a space it cannot act in
        self.num_outputs = self.dist_class.required_inputs(action_space)
        self.recurrent = recurrent_model(config.model)
        self.max_seq_len = int(config.model.max_seq_len) if self.recurrent else 0
        self.model = self.make_model()
        self._weight_names = self._neutral_names()
        training = config.training
        self.optimizer = make_optimizer(
            training.optimizer,
            self.model.parameters(),
            self._current_lr(),
            training.optimizer_epsilon,
            training.optimizer_kwargs,
            getattr(config, "fail", None),
        )
        self.rng = np.random.default_rng(config.seed)
        self.num_grad_updates = 0
        # Bumped whenever the weights change, so the numpy twin knows when to refresh.
        self.weights_version = 0
        self.fast_actor = self._make_fast_actor()
        self._action_dtype = np.int64 if isinstance(action_space, Discrete | MultiDiscrete) else np.float32

    def make_model(self) -> torch.nn.Module:
        """The network (override for another architecture): the catalog MLP or ``model.custom``."""
        return build_model(self.observation_space, self.action_space, self.num_outputs, self.config.model)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The algorithm's loss on one minibatch of tensors; returns (loss, stats)."""
        raise TypeError(f"{type(self).__name__} must implement loss()")

    def action_distribution(self, dist_inputs: torch.Tensor, batch: dict[str, torch.Tensor]) -> Any:
        """The action distribution of ``dist_inputs``, masked by the batch's ``action_mask`` column
        when the env has masks (each row's mask is the one its action was chosen under)."""
        return self.dist_class(dist_inputs, batch.get(SampleBatch.ACTION_MASK))

    def model_outputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist_inputs, values)`` for the rows of a minibatch, from the model in use.

        A recurrent model runs over the batch's padded sequences (``max_seq_len`` rows
        each) from the state-in of each sequence's first row; losses then weigh rows
        by ``batch["seq_mask"]`` (see :func:`masked_mean`).
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

    def to_tensors(self, batch: SampleBatch, columns: Iterable[str]) -> dict[str, torch.Tensor]:
        """The batch columns ``loss`` reads as tensors on :attr:`device`, each moved there once
        (:meth:`host_tensors`, then :meth:`move_tensors`)."""
        return self.move_tensors(self.host_tensors(batch, columns))

    def host_tensors(self, batch: SampleBatch, columns: Iterable[str]) -> dict[str, torch.Tensor]:
        """The batch columns ``loss`` reads as CPU tensors, observations preprocessed (flat, one-hot).
        Override this (not :meth:`to_tensors`) to add columns: they then reach the device too."""
        tensors = {}
        for key in columns:
            if key not in batch:
                continue
            value = batch[key]
            if key == SampleBatch.OBS:
                tensors[key] = self.preprocess(value)
            else:
                tensors[key] = torch.from_numpy(np.ascontiguousarray(value))
        return tensors
