"""Learner updates per second on the CPU and on each GPU (``learners.device``), and where an update's time goes.

Three workloads, each a real rlgear torch policy built with ``Learner.build(config, policy class,
spaces)`` (no env) and updated on a fixed random batch of the size its config trains on:

- ``ppo-conv-minatar``: PPO with ``configs/ppo-minatar-breakout.yaml``'s network (MinAtar's 10x10x4
  bool images, Discrete(3), one 16-channel 3x3 conv layer, 128 shared units); one update is that
  file's 1024 rows x 4 epochs of 256-row minibatches (16 gradient steps);
- ``sac-mlp-halfcheetah``: SAC with 256x256 actor and twin critics on HalfCheetah's shapes (17-dim
  observations, 6-dim actions); one update is one gradient step on a 256-row replay minibatch;
- ``ppo-lstm-cartpole``: PPO with ``model.lstm`` (128 cells, 32-step sequences) on CartPole's
  shapes; one update is 1024 rows x 4 epochs of 256-row minibatches (8 sequences each).

How to read the JSON (``bench/results/gpu-<device name>.json``): per workload and device,
``updates_per_s`` is ``learner.update(batch)`` calls per second, back to back, the batch starting
in host memory each time as it does in a run (so the host-to-device copy is in it), timed over
``--seconds`` after warm-up calls. ``split_ms`` is one update taken apart with the device
synchronized around each phase: ``transfer`` (the batch columns to the device, once per update),
``forward_backward`` (loss and gradients, summed over the update's gradient steps) and
``optimizer_step`` (clipping, the optimizer step and SAC's target update). The phases add up to
more than ``1000 / updates_per_s`` on a GPU, where the unsynchronized update overlaps them.
``auto`` follows these figures: a GPU for conv and LSTM models, the CPU for MLPs (docs/learners.md).

``learner_scaling`` (with 2 or more GPUs): the same workloads on 1 and on ``--num-learners``
data-parallel learners, one process and one GPU each (NCCL), a fixed number of updates:
``speedup`` is the ratio of updates/s. ``--scaling-device cpu`` runs it on the CPU (gloo) instead,
a check of the code path on a machine without GPUs.

Usage: python bench/gpu.py [--seconds 20] [--threads 1] [--out bench/results]
       python bench/gpu.py --quick   (CPU only, a few updates: a smoke run for CI, under a minute)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._run import source_revision  # noqa: E402

#: What is measured, in order (see the module docstring).
WORKLOADS = ("ppo-conv-minatar", "sac-mlp-halfcheetah", "ppo-lstm-cartpole")


def workload_spec(name: str) -> dict[str, Any]:
    """The config sections, spaces and batch rows of workload ``name``."""
    from rlgear.spaces import Box, Discrete

    if name == "ppo-conv-minatar":
        return {
            "algorithm": "ppo",
            "model": {"conv_filters": [[16, 3, 1]], "hidden_sizes": [128], "activation": "relu",
                      "vf_share_layers": True},
            "training": {"train_batch_size": 1024, "sgd_minibatch_size": 256, "num_sgd_iter": 4,
                         "grad_clip": 0.5, "lr": 0.001},
            "spaces": (Box(np.zeros((10, 10, 4)), np.ones((10, 10, 4)), np.bool_), Discrete(3)),
            "rows": 1024,
        }  # fmt: skip
    if name == "sac-mlp-halfcheetah":
        return {
            "algorithm": "sac",
            "model": {"hidden_sizes": [256, 256], "activation": "relu"},
            "training": {"train_batch_size": 256},
            "spaces": (
                Box(np.full(17, -np.inf), np.full(17, np.inf)),
                Box(np.full(6, -1.0), np.full(6, 1.0)),
            ),
            "rows": 256,
        }
    if name == "ppo-lstm-cartpole":
        return {
            "algorithm": "ppo",
            "model": {"lstm": True, "lstm_cell_size": 128, "max_seq_len": 32, "hidden_sizes": [64],
                      "activation": "relu"},
            "training": {"train_batch_size": 1024, "sgd_minibatch_size": 256, "num_sgd_iter": 4},
            "spaces": (Box(np.full(4, -np.inf), np.full(4, np.inf)), Discrete(2)),
            "rows": 1024,
        }  # fmt: skip
    raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")


def random_batch(spec: dict[str, Any], policy: Any, seed: int = 0) -> Any:
    """A postprocessed batch of the workload's size and dtypes, random values (what the update reads)."""
    from rlgear.sample_batch import SampleBatch as SB

    rng = np.random.default_rng(seed)
    rows = spec["rows"]
    obs_space, action_space = spec["spaces"]

    def observations() -> np.ndarray:
        if obs_space.dtype == np.bool_:
            return rng.random((rows, *obs_space.shape)) < 0.1
        return rng.normal(size=(rows, *obs_space.shape)).astype(np.float32)

    columns: dict[str, np.ndarray] = {SB.OBS: observations()}
    if spec["algorithm"] == "sac":
        columns.update({
            SB.ACTIONS: rng.uniform(-1, 1, (rows, *action_space.shape)).astype(np.float32),
            SB.REWARDS: rng.normal(size=rows).astype(np.float32),
            SB.DISCOUNTS: np.full(rows, 0.99, np.float32),
            SB.NEXT_OBS: observations(),
        })  # fmt: skip
        return SB(columns)
    columns.update({
        SB.ACTIONS: rng.integers(action_space.n, size=rows),
        SB.ACTION_LOGP: np.full(rows, -np.log(action_space.n), np.float32),
        SB.ADVANTAGES: rng.normal(size=rows).astype(np.float32),
        SB.VALUE_TARGETS: rng.normal(size=rows).astype(np.float32),
        SB.VF_PREDS: rng.normal(size=rows).astype(np.float32),
    })  # fmt: skip
    if policy.recurrent:  # padded sequences of max_seq_len rows, each with its state-in
        cell = int(policy.config.model.lstm_cell_size)
        columns[SB.SEQ_MASK] = np.ones(rows, np.float32)
        columns[SB.state_in(0)] = np.zeros((rows, cell), np.float32)
        columns[SB.state_in(1)] = np.zeros((rows, cell), np.float32)
    return SB(columns)


def build_learner(name: str, device: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(learner, batch, spec)`` of workload ``name`` on ``device``, from the config alone."""
    from rlgear import Learner
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    spec = workload_spec(name)
    trainer_cls = registry.load_algorithm(spec["algorithm"])
    raw = {
        "algorithm": spec["algorithm"], "backend": "torch", "seed": 0, "env": {"name": "CartPole-v1"},
        "model": spec["model"], "training": spec["training"],
        "logging": {"dir": tempfile.gettempdir(), "tensorboard": False, "progress": "none"},
    }  # fmt: skip
    config = config_mod.resolve(raw, training_class=trainer_cls.config_class)
    learner = Learner.build(config, trainer_cls.policy_class("torch"), spec["spaces"], "", device)
    return learner, random_batch(spec, learner.policy), spec


def updates_per_second(
    learner: Any, batch: Any, device: str, seconds: float, warmup: int, min_calls: int
) -> dict:
    """``learner.update(batch)`` back to back for ``seconds`` (at least ``min_calls`` calls)."""
    from rlgear.plugins.backends.torch.device import synchronize

    for _ in range(warmup):  # first calls: CUDA context, cuDNN autotuning, allocator growth
        learner.update(batch)
    synchronize(device)
    calls, start = 0, time.perf_counter()
    while calls < min_calls or time.perf_counter() - start < seconds:
        stats = learner.update(batch)
        calls += 1
    synchronize(device)
    elapsed = time.perf_counter() - start
    if not all(np.isfinite(v) for v in stats.values()):
        raise RuntimeError(f"non-finite learner stats on {device}: {stats}")
    return {
        "calls": calls,
        "seconds": elapsed,
        "updates_per_s": calls / elapsed,
        "update_ms": 1e3 * elapsed / calls,
    }


def time_split(policy: Any, batch: Any, repeats: int) -> dict[str, float]:
    """One update's phases in ms (the median over ``repeats`` updates), synchronized around each:
    the batch to the device, forward and backward, and the optimizer step."""
    import torch

    from rlgear.plugins.backends.torch.device import synchronize
    from rlgear.plugins.backends.torch.learning import clip_gradients

    device, training = policy.device, policy.config.training
    # SAC: one gradient step on the whole replay minibatch, then the target update; PPO: its schedule
    replay = not hasattr(policy, "sgd_schedule")
    phases: dict[str, list[float]] = {"transfer": [], "forward_backward": [], "optimizer_step": []}

    def timed(phase: str, fn: Any) -> Any:
        synchronize(device)
        start = time.perf_counter()
        out = fn()
        synchronize(device)
        totals[phase] += 1e3 * (time.perf_counter() - start)
        return out

    for _ in range(repeats):
        totals = dict.fromkeys(phases, 0.0)
        tensors = timed(
            "transfer", lambda: policy.to_tensors(batch, policy.learner_columns(policy.loss_columns))
        )
        if replay:
            steps: list[Any] = [None]
        else:
            steps = list(policy.sgd_schedule().minibatches(policy.rng, len(batch), policy.rows_per_sequence))
        for rows in steps:

            def forward_backward(rows: Any = rows, tensors: dict = tensors) -> None:
                if rows is None:
                    loss = policy.loss(tensors, True)[0]
                else:
                    index = torch.from_numpy(rows).to(device)
                    loss = policy.loss({k: v[index] for k, v in tensors.items()})[0]
                policy.optimizer.zero_grad()
                loss.backward()

            def step() -> None:
                clip_gradients(policy.optimizer.params, training.grad_clip)
                policy.optimizer.step()
                if replay:
                    policy.update_target(training.tau)

            timed("forward_backward", forward_backward)
            timed("optimizer_step", step)
        for phase, value in totals.items():
            phases[phase].append(value)
    return {phase: float(np.median(values)) for phase, values in phases.items()}


def _scaling_worker(
    rank: int, world: int, port: int, name: str, device_kind: str, calls: int, threads: int, out: Any
) -> None:
    """One of ``world`` data-parallel learners (a process of its own, as a learner actor is):
    ``calls`` timed updates on its shard of every minibatch, gradients all-reduced."""
    import torch

    from rlgear.plugins.backends.torch.data_parallel import DataParallelGroup
    from rlgear.plugins.backends.torch.device import synchronize

    torch.set_num_threads(threads)
    device = f"cuda:{rank}" if device_kind == "cuda" else "cpu"
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
    learner, batch, _ = build_learner(name, device)
    group = DataParallelGroup(rank, world, "127.0.0.1", port, device)
    for policy in learner.policy_map.values():
        policy.data_parallel = group
    learner.update(batch)  # warm-up (and the group's first collective)
    synchronize(device)
    group.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        learner.update(batch)
    synchronize(device)
    group.barrier()
    elapsed = time.perf_counter() - start
    group.close()
    out.put((rank, elapsed))


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def learner_scaling(args: argparse.Namespace, workloads: list[str]) -> dict[str, Any] | None:
    """1 vs ``--num-learners`` data-parallel learners, each in a process of its own with its own
    device (``cuda:<rank>``; on the CPU with ``--scaling-device cpu``, gloo), the same fixed
    number of updates: what ``learners.num_learners`` does, without Ray (this machine may not have
    it). None without that many GPUs (nothing is measured then, and the JSON says so)."""
    import torch
    import torch.multiprocessing as mp

    world = args.num_learners
    kind = args.scaling_device
    if world < 2 or (kind == "cuda" and torch.cuda.device_count() < world):
        return None
    calls = 2 if args.quick else args.scaling_calls
    context = mp.get_context("spawn")
    rows = []
    for name in workloads:
        rates = {}
        for learners in (1, world):
            queue = context.Queue()
            port = _free_port()
            processes = [
                context.Process(
                    target=_scaling_worker,
                    args=(rank, learners, port, name, kind, calls, args.threads, queue),
                )
                for rank in range(learners)
            ]
            for process in processes:
                process.start()
            elapsed = max(queue.get(timeout=600)[1] for _ in processes)
            for process in processes:
                process.join(timeout=60)
            rates[learners] = calls / elapsed
        rows.append(
            {
                "workload": name,
                "device": kind,
                "calls": calls,
                "updates_per_s_1": rates[1],
                f"updates_per_s_{world}": rates[world],
                "speedup": rates[world] / rates[1],
            }
        )
        print(f"{name:22s} {kind} x{world}: {rates[world]:.2f} updates/s vs {rates[1]:.2f} alone "
              f"({rates[world] / rates[1]:.2f}x)", flush=True)  # fmt: skip
    return {"num_learners": world, "results": rows}


def device_name(devices: list[str]) -> str:
    """The GPU's name when one is measured, else the CPU model (what the result file is named after)."""
    import torch

    if any(d.startswith("cuda") for d in devices):
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="CPU only, a few updates per workload (CI smoke run)"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per workload and device")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (rlgear's default: 1)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--devices", nargs="+", help="default: cpu and every CUDA device torch sees")
    parser.add_argument(
        "--num-learners", type=int, default=2,
        help="data-parallel learners compared with one (each on its own GPU; default 2, where there are 2)",
    )  # fmt: skip
    parser.add_argument(
        "--scaling-device", choices=("cuda", "cpu"), default="cuda",
        help="learner scaling on one GPU per learner, or on the CPU (gloo; a check of the code path)",
    )  # fmt: skip
    parser.add_argument("--scaling-calls", type=int, default=20, help="timed updates per scaling run")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of gpu-<device name>.json")
    args = parser.parse_args()
    os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")

    import torch

    from rlgear.plugins.backends.torch.device import torch_devices

    torch.set_num_threads(args.threads)
    here = torch_devices()
    devices = args.devices or (
        ["cpu"] if args.quick else [d for d in here if d == "cpu" or d.startswith("cuda")]
    )
    seconds = 0.0 if args.quick else args.seconds
    warmup, min_calls, repeats = (1, 2, 1) if args.quick else (3, 5, 5)
    results = []
    for name in args.workloads:
        for device in devices:
            learner, batch, spec = build_learner(name, device)
            rate = updates_per_second(learner, batch, device, seconds, warmup, min_calls)
            split = time_split(learner.policy, batch, repeats)
            row = {"workload": name, "device": device, "batch_rows": spec["rows"], **rate, "split_ms": split}
            results.append(row)
            print(f"{name:22s} {device:7s} {rate['updates_per_s']:9.2f} updates/s  "
                  + "  ".join(f"{k} {v:.2f} ms" for k, v in split.items()), flush=True)  # fmt: skip
    name = device_name(devices)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": source_revision(),
        "device_name": name,
        "cpu": device_name(["cpu"]),
        "devices_here": here,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": args.threads,
        "quick": args.quick,
        "seconds_per_measurement": seconds,
        "results": results,
        "learner_scaling": learner_scaling(args, args.workloads),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"gpu-{slug(name)}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
