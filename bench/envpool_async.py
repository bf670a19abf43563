"""envpool's async mode against its sync mode: sampling throughput of rlgear's evaluator (issue 34).

The evaluator of ``configs/ppo-pong.yaml`` (PPO, the Nature CNN acting in torch on one thread,
8 envs) on envpool's ``Pong-v5`` with the Atari preset, sampling fragments (acting, env stepping,
recording, GAE; no learning) with ``env.kwargs.batch_size`` = 8 (sync: every env steps at once),
4 and 2 (async: the policy acts on the envs that came back while the others step). Runners take
turns per round so that a busy neighbour hits all alike; the figure is env steps (x4 frames) per
second over all rounds. Async mode can only win where spare cores step the envs while the policy
acts: report the machine's cores and load with the figures.

Usage: python bench/envpool_async.py [--rounds 5] [--fragments 2] [--out bench/results/envpool_async.json]
Needs: pip install -e ".[torch,atari,envpool]"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

HERE = Path(__file__).resolve().parent

BATCHES = (8, 4, 2)


def make_worker(batch_size: int):
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    cls = registry.load_algorithm("ppo")
    overrides = ["env.name=Pong-v5", "env.adapter=envpool", "env.vectorization=native",
                 "logging.tensorboard=false", "logging.progress=none"]  # fmt: skip
    if batch_size < 8:
        overrides.append(f"env.kwargs={{batch_size: {batch_size}}}")
    config = config_mod.load(
        HERE.parent / "configs" / "ppo-pong.yaml", overrides, training_class=cls.config_class
    )
    trainer = cls(config)
    return trainer, trainer.workers.local_worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fragments", type=int, default=2, help="sample() calls per runner per round")
    parser.add_argument("--out", default=str(HERE / "results" / "envpool_async.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    runners = {batch: make_worker(batch) for batch in BATCHES}
    for _, worker in runners.values():
        worker.sample_with_count()  # warm-up
    totals = {batch: [0, 0.0] for batch in BATCHES}
    for _ in range(args.rounds):
        for batch, (_, worker) in runners.items():
            start = time.perf_counter()
            for _ in range(args.fragments):
                totals[batch][0] += worker.sample_with_count()[1]
            totals[batch][1] += time.perf_counter() - start
    for trainer, _ in runners.values():
        trainer.stop()
    rate = {batch: steps / seconds for batch, (steps, seconds) in totals.items()}
    result = {
        "revision": source_revision(),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "rounds": args.rounds,
        "env_steps_per_s": {f"batch_size_{b}": round(r) for b, r in rate.items()},
        "frames_per_s": {f"batch_size_{b}": round(4 * r) for b, r in rate.items()},
        "async_vs_sync": {f"batch_size_{b}": round(rate[b] / rate[8], 2) for b in BATCHES if b != 8},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
