"""Data-parallel learning for torch policies: N learners, one update.

With ``learners.num_learners: N >= 2`` each learner actor holds a replica of every policy and the
same whole batch (one object-store copy on a node). Every replica draws the same minibatch rows
(its ``rng`` is seeded alike), takes only its shard of them (:meth:`DataParallelGroup.shard`), and
the gradients are all-reduced before the optimizer step, each shard's weighted by its share of the
minibatch. A loss that is a mean over rows (or over valid rows) then gets exactly the gradient of
one learner on the whole minibatch, so N learners make the same update as one, to float tolerance.

What is not a mean over rows is made global here too: the statistics a loss reports (weighted
the same way), the non-finite guard (the all-reduced loss and gradient norm are the same on every
replica, so all skip or all step), and per-minibatch statistics computed through
:func:`minibatch_sum` (advantage normalization), which sums over the whole minibatch while a
group is active. Everything else a policy keeps (its generators, counters, target networks,
schedules) stays equal on every replica because every replica runs the same code on the same
global numbers.

When each learner reads its own rows instead (offline learners, each on its own shard of the
dataset: :meth:`DataParallelGroup.own_rows`), a learner's batch is its part of a minibatch that is
the union of every learner's rows in rank order; it learns on all of it, weighted by its rows'
share, and what the loss computes over the whole minibatch goes through collectives
(:func:`minibatch_sum`), since no learner holds the others' rows.

The process group is ``torch.distributed``: gloo on CPU, NCCL when the learners are on CUDA.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["DataParallelGroup", "MinibatchView", "active_group", "minibatch_column", "minibatch_sum"]

_ACTIVE: contextvars.ContextVar[DataParallelGroup | None] = contextvars.ContextVar(
    "rlgear_data_parallel_group", default=None
)


def active_group() -> DataParallelGroup | None:
    """The group whose step is running in this thread (None outside a data-parallel step)."""
    return _ACTIVE.get()


class DataParallelGroup:
    """This process's place in a group of ``world_size`` learners.

    Args:
        rank, world_size: this learner's index and the number of learners.
        address, port: where learner 0 listens for the group's rendezvous (``127.0.0.1`` when all
            learners share a node, else learner 0's node address).
        device: the learners' torch device; NCCL on CUDA, gloo otherwise.
        timeout_s: how long a collective waits for the others before failing (a dead peer).
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        address: str,
        port: int,
        device: str = "cpu",
        timeout_s: float = 120.0,
    ):
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.device = torch.device(device)
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if dist.is_initialized():  # a replacement group in a reused process: leave the old one first
            dist.destroy_process_group()
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{int(port)}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    # --- which rows ----------------------------------------------------------------
    #: While :meth:`own_rows` runs: ``(offset, count, total)``, this learner's rows are rows
    #: ``offset .. offset + count`` of a minibatch of ``total`` rows that no learner holds whole.
    own: tuple[int, int, int] | None = None

    @contextlib.contextmanager
    def own_rows(self, offset: int, count: int, total: int) -> Iterator[DataParallelGroup]:
        """Each learner's batch is only its own rows of the minibatch (it read them itself): a
        policy learns on all of them with share ``count / total`` instead of cutting a shard, and
        per-row outputs (TD errors) stay its own."""
        if not 0 < count <= total or not 0 <= offset <= total - count:
            raise ValueError(f"own rows {offset}..{offset + count} of a {total}-row minibatch")
        previous, self.own = self.own, (int(offset), int(count), int(total))
        try:
            yield self
        finally:
            self.own = previous

    def shards(self, rows: np.ndarray, rows_per_sequence: int = 1) -> list[np.ndarray]:
        """``rows`` cut into ``world_size`` contiguous shards, sequences (``rows_per_sequence``
        rows each) kept whole. A shard may be empty when there are fewer sequences than learners."""
        sequences = (
            np.asarray(rows).reshape(-1, rows_per_sequence) if rows_per_sequence > 1 else np.asarray(rows)
        )
        parts = np.array_split(sequences, self.world_size)
        return [part.reshape(-1) for part in parts]

    # --- collectives ---------------------------------------------------------------
    def all_reduce_step(
        self,
        params: Sequence[torch.Tensor],
        loss: torch.Tensor,
        stats: dict[str, torch.Tensor],
        share: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Sum ``share x`` (gradients, loss, stats) over the group, in one all-reduce.

        ``share`` is this shard's weight in the minibatch (its rows, or valid rows, over the
        minibatch's); the sums are then the whole minibatch's means. Gradients are written back
        into ``param.grad``.
        """
        # Parameters without a gradient (TD3's actor between its delayed updates) stay without one,
        # as with one learner: the optimizer skips them. Every learner runs the same code path, so
        # every learner leaves out the same ones.
        grads = [p.grad for p in params if p.grad is not None]
        keys = list(stats)
        scalars = torch.stack(
            [loss.detach().reshape(())] + [stats[k].detach().reshape(()).to(loss.dtype) for k in keys]
        )
        dtype = grads[0].dtype if grads else scalars.dtype
        flat = torch.cat([g.reshape(-1) for g in grads] + [scalars.to(dtype)])
        flat.mul_(share)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for grad in grads:
            size = grad.numel()
            grad.copy_(flat[offset : offset + size].view_as(grad))
            offset += size
        reduced = flat[offset:]
        return reduced[0], {k: reduced[i + 1] for i, k in enumerate(keys)}

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The elementwise sum of ``tensor`` over the group (a new tensor)."""
        out = tensor.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def all_reduce_numpy(self, array: np.ndarray) -> np.ndarray:
        """The elementwise sum of a numpy array over the group (per-row outputs that each learner
        filled for its shard only, such as DQN's TD errors)."""
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self.device)
        return self.all_reduce_sum(tensor).cpu().numpy()

    def broadcast_parameters(self, params: Sequence[torch.Tensor]) -> None:
        """Learner 0's values of ``params`` on every learner."""
        with torch.no_grad():
            for param in params:
                dist.broadcast(param.data, src=0)

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    @contextlib.contextmanager
    def active(self, minibatch: MinibatchView | None = None) -> Iterator[DataParallelGroup]:
        """Mark a data-parallel step as running (read by :func:`minibatch_sum` and
        :func:`minibatch_column`); ``minibatch`` is what this learner knows of the whole minibatch."""
        token = _ACTIVE.set(self)
        previous, self.minibatch = self.minibatch, minibatch
        try:
            yield self
        finally:
            self.minibatch = previous
            _ACTIVE.reset(token)

    #: The running step's whole minibatch, as this learner sees it (None outside a step).
    minibatch: MinibatchView | None = None


class MinibatchView:
    """The whole minibatch of a data-parallel step: every learner holds the whole batch, so a
    statistic of a loss input column over the minibatch (advantage normalization's mean and
    variance) is computed locally, the same number on every learner, with no collective.

    Args:
        tensors: the batch's columns (every row of the batch).
        rows: the minibatch's rows in them.
        shard: the columns of this learner's shard, as the loss receives them.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], rows: torch.Tensor, shard: dict[str, torch.Tensor]):
        self.tensors, self.rows, self.shard = tensors, rows, shard

    def column_of(self, tensor: torch.Tensor | None) -> torch.Tensor | None:
        """The whole minibatch's rows of the column whose shard is ``tensor`` (the very tensor the
        loss received); None when ``tensor`` is not one of the shard's columns (something the loss
        computed), which a caller then sums over the group instead."""
        if tensor is None:
            return None
        for key, value in self.shard.items():
            if value is tensor:
                return self.tensors[key][self.rows]
        return None


def minibatch_column(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """The whole minibatch's rows of loss input ``tensor`` in a data-parallel step (see
    :class:`MinibatchView`); None when unknown (no step, or not an input column)."""
    group = active_group()
    view = None if group is None else group.minibatch
    return None if view is None else view.column_of(tensor)


def minibatch_sum(x: torch.Tensor) -> torch.Tensor:
    """``x`` (a sum over this learner's rows) summed over every learner's shard while a
    data-parallel step runs; ``x`` itself otherwise. Per-minibatch statistics (advantage
    normalization's mean and variance) built from such sums are the whole minibatch's."""
    group = active_group()
    return x if group is None else group.all_reduce_sum(x)
