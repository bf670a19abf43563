"""Asynchronous gradients (A3C) on TF: computed on a worker, applied by the learner.

:class:`TFGradients` is one part of :class:`~rlgear.plugins.backends.tf.policy.TFPolicy`.
``compute_gradients`` and ``apply_gradients`` are compiled like the learn step and share its
gradient and clipping code (:mod:`~rlgear.plugins.backends.tf.learning`); gradients travel as
numpy under the weights' names, so they cross processes and backends as weights do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.plugins.backends.tf.compiled import _columns_key, _spec
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import NonFiniteGuard, all_finite
from rlgear.sample_batch import SampleBatch


class TFGradients:
    """``compute_gradients`` / ``apply_gradients``; mixed into ``TFPolicy`` (which sets the attributes)."""

    config: Any
    optimizer: Any
    named_variables: list[tuple[str, Any]]
    nonfinite: NonFiniteGuard
    num_grad_updates: int
    weights_version: int
    row_outputs: tuple[str, ...]
    _gradient_fns: dict[Any, Callable]
    _apply_clipped: Callable

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
