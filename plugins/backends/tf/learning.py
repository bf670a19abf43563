"""How a TF policy takes gradient steps: the compiled per-minibatch step and the one-pass default.

:class:`TFLearning` is one part of :class:`~rlgear.plugins.backends.tf.policy.TFPolicy`. The
learn step (gather a minibatch, loss, gradients, global-norm clipping with
``training.grad_clip``, the optimizer update, and a skip when the loss or the gradient norm is
not finite) is one ``tf.function`` traced once per set of batch columns: its input signature
has a dynamic batch dimension, so the last, partial minibatch and a new batch size reuse the
graph. :meth:`~TFLearning.learn_on_minibatches` runs it once per minibatch of row indices it is
given and reads the steps' results once, at the end. Which rows, in how many epochs, is not the
backend's business: ``learn_on_batch`` here is one step on the whole batch (rows in an order
drawn from the policy's ``rng``, the same draws as ``TorchPolicy``); PPO, A2C, PG, IMPALA and
APPO mix in the on-policy SGD family's :class:`~rlgear.plugins.families.onpolicy.MinibatchSGD`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from rlgear.blocks.minibatch_rows import shuffled_rows
from rlgear.plugins.backends.tf.compiled import _columns_key, _spec
from rlgear.plugins.backends.tf.runtime import tf
from rlgear.policy import NonFiniteGuard
from rlgear.sample_batch import SampleBatch


class TFLearning:
    """Gradient steps on ``loss()``; mixed into ``TFPolicy``, which sets the attributes and provides
    ``loss``, ``to_tensors``, ``_current_lr`` and ``function``."""

    config: Any
    optimizer: Any
    variables: list[Any]
    rng: np.random.Generator
    recurrent: bool
    max_seq_len: int
    nonfinite: NonFiniteGuard
    num_grad_updates: int
    weights_version: int
    loss_columns: ClassVar[tuple[str, ...]]
    rows_are_sequences: ClassVar[bool]
    row_outputs: ClassVar[tuple[str, ...]]
    _sgd_steps: dict[Any, Callable]

    @property
    def rows_per_sequence(self) -> int:
        """Rows a minibatch keeps together: ``max_seq_len`` when the batch is padded sequences of a
        recurrent policy, else 1 (a feed-forward policy, or one whose rows are whole sequences)."""
        return self.max_seq_len if self.recurrent and not self.rows_are_sequences else 1

    def on_row_outputs(self, rows: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        """Receive the ``row_outputs`` of the minibatch made of batch rows ``rows``."""

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

    def learn_on_minibatches(self, batch: SampleBatch, minibatches: Iterable[np.ndarray]) -> dict[str, float]:
        """One compiled step per array of row indices in ``minibatches`` (read lazily, in order).

        Returns each stat's mean over the steps applied, with ``cur_lr``, ``num_grad_updates`` and
        ``num_nonfinite_updates``. The learning rate is set once, before the first step; the
        steps' skip flags are read after the last one (no host sync per step), so the non-finite
        guard counts them then.
        """
        training = self.config.training
        lr = self._current_lr()
        self.optimizer.lr = lr
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        step = self._sgd_step_for(tensors)
        results = []
        for minibatch in minibatches:
            rows = minibatch.astype(np.int32)
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

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on the whole batch, its rows (whole sequences, for a recurrent policy)
        in an order drawn from ``self.rng``.

        Epochs of minibatches are the on-policy SGD family's:
        ``class MyPolicy(MinibatchSGD, TFPolicy)``, with
        ``from rlgear.plugins.families.onpolicy import MinibatchSGD``.
        """
        training = self.config.training
        if hasattr(training, "num_sgd_iter") or hasattr(training, "sgd_minibatch_size"):
            # Deprecated in 0.3, goes in 0.4: before 0.3 this class ran the epoch loop for these keys.
            # (.importlinter lists this one import as the exception to "backends import no family".)
            from rlgear.plugins.families.onpolicy.legacy import learn_with_legacy_keys

            return learn_with_legacy_keys(self, batch, "TFPolicy")
        return self.learn_on_minibatches(batch, [shuffled_rows(self.rng, len(batch), self.rows_per_sequence)])
