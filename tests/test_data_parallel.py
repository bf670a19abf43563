"""The torch data-parallel group without Ray: two processes, gloo, checked against one process's numbers.

Each case runs the same minibatch through two learners (one process each, spawned here) and
checks what each learner ends up with against numpy on the whole minibatch: the shards, the
all-reduced gradients and stats, and advantage normalization by both of its paths (the loss's
input column, normalized from the whole minibatch every learner holds; a computed tensor,
normalized through collectives).
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROWS = 11  # odd: the shards differ in size (6 and 5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def whole_minibatch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "advantages": rng.normal(2.0, 3.0, ROWS).astype(np.float32),
        "seq_mask": (rng.random(ROWS) > 0.3).astype(np.float32),
        "x": rng.normal(size=(ROWS, 3)).astype(np.float32),
    }


def learner_process(rank: int, port: int, out) -> None:
    import torch

    from rlgear.plugins.backends.torch.data_parallel import DataParallelGroup, MinibatchView
    from rlgear.plugins.backends.torch.losses import normalize_advantages

    group = DataParallelGroup(rank, 2, "127.0.0.1", port, "cpu", timeout_s=60)
    columns = {k: torch.from_numpy(v) for k, v in whole_minibatch().items()}
    rows = np.arange(ROWS)[::-1].copy()  # a minibatch in some order
    shard_rows = group.shards(rows)[rank]
    index = torch.from_numpy(shard_rows)
    shard = {k: v[index] for k, v in columns.items()}
    calls = []
    summed = group.all_reduce_sum
    group.all_reduce_sum = lambda t: calls.append(1) or summed(t)
    with group.active(MinibatchView(columns, torch.from_numpy(rows), shard)):
        local = normalize_advantages(shard["advantages"], shard["seq_mask"])  # the input column
        local_collectives = len(calls)
        collective = normalize_advantages(shard["advantages"] * 1.0, shard["seq_mask"] * 1.0)  # computed
        unmasked = normalize_advantages(shard["advantages"] + 0.0)
    # one gradient step's all-reduce: loss = mean over rows of w . x, shares by rows
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    loss = (shard["x"] @ weight).mean()
    loss.backward()
    share = len(shard_rows) / ROWS
    reduced_loss, stats = group.all_reduce_step([weight], loss, {"loss_copy": loss.detach()}, share)
    out.put(
        (
            rank,
            shard_rows,
            local.numpy(),
            collective.numpy(),
            unmasked.numpy(),
            weight.grad.numpy().copy(),
            float(reduced_loss),
            float(stats["loss_copy"]),
            local_collectives,
            len(calls),
        )
    )
    group.close()


def test_two_learners_compute_what_one_learner_computes_on_the_whole_minibatch():
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    port = free_port()
    processes = [context.Process(target=learner_process, args=(rank, port, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    results = sorted((queue.get(timeout=120) for _ in processes), key=lambda r: r[0])
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    data = whole_minibatch()
    adv, mask, x = data["advantages"], data["seq_mask"], data["x"]
    mean = (adv * mask).sum() / mask.sum()
    std = np.sqrt((((adv - mean) * mask) ** 2).sum() / (mask.sum() - 1))
    expected_masked = (adv - mean) / (std + 1e-8)
    expected_unmasked = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    expected_grad = x.mean(axis=0)
    expected_loss = float((x @ np.array([1.0, -2.0, 0.5], np.float32)).mean())

    shards = [r[1] for r in results]
    assert sorted(np.concatenate(shards).tolist()) == list(range(ROWS))
    assert [len(s) for s in shards] == [6, 5]
    for _, rows, local, collective, unmasked, grad, loss, loss_copy, local_calls, all_calls in results:
        assert local_calls == 0  # the input column: normalized from the minibatch every learner holds
        assert all_calls == 4  # the computed tensors: two collectives each
        np.testing.assert_allclose(local, expected_masked[rows], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(collective, expected_masked[rows], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(unmasked, expected_unmasked[rows], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-6)
        assert loss == pytest.approx(expected_loss, rel=1e-5) and loss_copy == pytest.approx(
            expected_loss, rel=1e-5
        )


def test_shards_keep_sequences_whole_and_may_be_empty():
    from rlgear.plugins.backends.torch.data_parallel import DataParallelGroup

    group = DataParallelGroup.__new__(DataParallelGroup)  # only the row arithmetic: no process group
    group.world_size, group.rank = 3, 0
    rows = np.arange(4 * 5)  # 5 sequences of 4 rows
    shards = group.shards(rows, rows_per_sequence=4)
    assert [len(s) for s in shards] == [8, 8, 4]
    assert all(len(s) % 4 == 0 and (s[::4] % 4 == 0).all() for s in shards)
    assert [len(s) for s in group.shards(np.arange(4), rows_per_sequence=4)] == [4, 0, 0]
