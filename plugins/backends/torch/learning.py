"""How a torch policy takes gradient steps: the per-minibatch step and the one-pass default.

:class:`TorchLearning` is one part of :class:`~rlgear.plugins.backends.torch.policy.TorchPolicy`.
It owns the gradient step on one minibatch (loss, backward, global-norm clipping with
``training.grad_clip``, the non-finite guard, the optimizer step) and
:meth:`~TorchLearning.learn_on_minibatches`, which takes one such step per minibatch of row
indices it is given and averages the statistics. Which rows, in how many epochs, is not the
backend's business: ``learn_on_batch`` here is one step on the whole batch (its rows in an
order drawn from the policy's ``rng``), for algorithms that are not minibatch SGD (DQN, A3C's
learner); PPO, A2C, PG, IMPALA and APPO mix in the on-policy SGD family's
:class:`~rlgear.plugins.families.onpolicy.MinibatchSGD`, which drives
``learn_on_minibatches`` through its epochs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np
import torch

from rlgear.blocks.minibatch_rows import shuffled_rows
from rlgear.plugins.backends.torch.data_parallel import DataParallelGroup, MinibatchView
from rlgear.policy import NonFiniteGuard
from rlgear.sample_batch import SampleBatch


def clip_gradients(params: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """The global L2 norm of the gradients; above ``max_norm``, scale them down to it.

    The rule of ``torch.nn.utils.clip_grad_norm_`` (scale by ``min(1, max_norm / (norm + 1e-6))``)
    in three foreach kernels: on small networks its per-call Python bookkeeping cost about as much
    as the arithmetic, once per minibatch.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


class TorchLearning:
    """Gradient steps on ``loss()``; mixed into ``TorchPolicy``, which sets the attributes and provides
    ``loss``, ``to_tensors`` and ``_current_lr``."""

    config: Any
    optimizer: Any
    rng: np.random.Generator
    recurrent: bool
    max_seq_len: int
    nonfinite: NonFiniteGuard
    num_grad_updates: int
    weights_version: int
    device: torch.device
    loss_columns: ClassVar[tuple[str, ...]]
    rows_are_sequences: ClassVar[bool]
    #: This learner's place among data-parallel learners (set by the learner actor that holds the
    #: policy when ``learners.num_learners >= 2``); None: the policy learns alone.
    data_parallel: DataParallelGroup | None = None
    #: This learner's share of the last data-parallel minibatch (0: it had no rows of its own).
    last_shard_share: float = 1.0

    @property
    def rows_per_sequence(self) -> int:
        """Rows a minibatch keeps together: ``max_seq_len`` when the batch is padded sequences of a
        recurrent policy, else 1 (a feed-forward policy, or one whose rows are whole sequences)."""
        return self.max_seq_len if self.recurrent and not self.rows_are_sequences else 1

    def minibatch_weight(self, tensors: dict[str, torch.Tensor], rows: np.ndarray) -> float:
        """How much rows ``rows`` weigh in a loss that is a mean over the minibatch: their valid rows
        (``seq_mask``) for a recurrent policy, else their number. Data-parallel learners weigh
        their shards' gradients by it; a loss averaging over something else overrides it (V-trace:
        the learned steps)."""
        mask = tensors.get(SampleBatch.SEQ_MASK)
        if mask is None:
            return float(len(rows))
        return float(mask[torch.from_numpy(rows).to(mask.device)].sum())

    def data_parallel_shard(
        self, tensors: dict[str, torch.Tensor], rows: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """This learner's shard of minibatch ``rows`` and its share of the minibatch's weight
        (:meth:`minibatch_weight`); ``(rows, 1.0)`` without a data-parallel group.

        A learner whose shard is empty (fewer sequences than learners) computes the loss on the
        first sequence with share 0, so that it still takes part in the all-reduce. A learner that
        read its own rows (:meth:`DataParallelGroup.own_rows`) keeps them all, with their share.
        """
        group = self.data_parallel
        if group is None:
            return rows, 1.0
        if group.own is not None:  # the learner read its own rows: all of them are its shard
            _, count, total = group.own
            self.last_shard_share = count / total
            return rows, self.last_shard_share
        shards = group.shards(rows, self.rows_per_sequence)
        weights = [self.minibatch_weight(tensors, shard) if len(shard) else 0.0 for shard in shards]
        total = sum(weights)
        mine = shards[group.rank]
        if len(mine) == 0 or total <= 0:
            self.last_shard_share = 0.0
            return np.asarray(rows)[: self.rows_per_sequence], 0.0
        self.last_shard_share = weights[group.rank] / total
        return mine, self.last_shard_share

    def sgd_step(self, tensors: dict[str, torch.Tensor], rows: np.ndarray) -> dict[str, torch.Tensor] | None:
        """One gradient step on rows ``rows`` of ``tensors``; its stats (tensors), or None if skipped.

        The stats are the loss's, plus ``total_loss`` and ``grad_gnorm`` (the global norm before
        clipping). A non-finite loss or gradient norm skips the step: the weights and the optimizer
        state stay as they were, and ``nonfinite`` counts it (the run stops after
        ``training.max_nonfinite_updates`` in a row). With data-parallel learners
        (:mod:`~rlgear.plugins.backends.torch.data_parallel`) the loss runs on this learner's shard
        of ``rows`` and the gradients, loss and stats are the whole minibatch's after the all-reduce.
        """
        training = self.config.training
        group = self.data_parallel
        minibatch = rows
        rows, share = self.data_parallel_shard(tensors, rows)
        index = torch.from_numpy(rows).to(self.device)  # a few bytes per minibatch; the columns moved once
        shard = {k: v[index] for k, v in tensors.items()}
        if group is None:
            loss, stats = self.loss(shard)
        elif group.own is not None:  # nobody holds the whole minibatch: its statistics are collectives
            with group.active(None):
                loss, stats = self.loss(shard)
        else:
            whole = MinibatchView(tensors, torch.from_numpy(minibatch).to(self.device), shard)
            with group.active(whole):
                loss, stats = self.loss(shard)
        self.optimizer.zero_grad()
        loss.backward()
        if group is not None:
            loss, stats = group.all_reduce_step(self.optimizer.params, loss, stats, share)
        grad_norm = clip_gradients(self.optimizer.params, training.grad_clip)
        # One check per step: the norm is NaN or infinite whenever any gradient is.
        if not bool(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)):
            self.optimizer.zero_grad()  # skipped: weights and optimizer state stay as they were
            self.nonfinite.record(
                False,
                training.max_nonfinite_updates,
                f" (last: loss {float(loss.detach()):g}, gradient norm {float(grad_norm):g})",
            )
            return None
        self.nonfinite.record(True, training.max_nonfinite_updates)
        self.optimizer.step()
        self.num_grad_updates += 1
        self.weights_version += 1
        return {**stats, "total_loss": loss.detach(), "grad_gnorm": grad_norm}

    def learn_on_minibatches(self, batch: SampleBatch, minibatches: Iterable[np.ndarray]) -> dict[str, float]:
        """One :meth:`sgd_step` per array of row indices in ``minibatches`` (read lazily, in order).

        Returns each stat's mean over the steps taken, with ``cur_lr``, ``num_grad_updates`` and
        ``num_nonfinite_updates``. The learning rate (``lr`` or ``lr_schedule`` at the global
        timestep) is set once, before the first step.
        """
        lr = self._current_lr()
        self.optimizer.lr = lr
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        # Stats stay tensors until the end: one stack per stat, not a small op per stat per step.
        history: dict[str, list[torch.Tensor]] = {}
        for rows in minibatches:
            stats = self.sgd_step(tensors, rows)
            if stats is None:
                continue
            for key, value in stats.items():
                history.setdefault(key, []).append(value)
        out = {key: float(torch.stack(values).mean()) for key, values in history.items()}
        out["cur_lr"] = lr
        out["num_grad_updates"] = float(self.num_grad_updates)
        out["num_nonfinite_updates"] = float(self.nonfinite.total)
        return out

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on the whole batch, its rows (whole sequences, for a recurrent policy)
        in an order drawn from ``self.rng``.

        Epochs of minibatches are the on-policy SGD family's:
        ``class MyPolicy(MinibatchSGD, TorchPolicy)``, with
        ``from rlgear.plugins.families.onpolicy import MinibatchSGD``.
        """
        training = self.config.training
        if hasattr(training, "num_sgd_iter") or hasattr(training, "sgd_minibatch_size"):
            # Deprecated in 0.3, goes in 0.4: before 0.3 this class ran the epoch loop for these keys.
            # (.importlinter lists this one import as the exception to "backends import no family".)
            from rlgear.plugins.families.onpolicy.legacy import learn_with_legacy_keys

            return learn_with_legacy_keys(self, batch, "TorchPolicy")
        return self.learn_on_minibatches(batch, [shuffled_rows(self.rng, len(batch), self.rows_per_sequence)])
