"""Remote workers: sampling throughput, start-up time and memory.

1. Env-steps/s of synchronous sampling rounds (PPO's path: every worker
   samples, the driver waits for all) with 0 remote workers (the in-process
   evaluator), 1 and 2 remote workers, 8 CartPole-v1 envs each, 64x64 policy,
   plus asynchronous sampling (AsyncSampler, 2 requests in flight) with 2
   workers, drained at the end of each timed round. All WorkerSets live in one Ray session and take turns in short
   rounds, so load from other processes hits every setting alike; the
   figures are total steps over total time per setting, and the ratios are
   against the in-process evaluator. The Ray session gets 4 logical CPUs so
   that the 1- and 2-worker sets can both exist (idle actors use no CPU);
   only one set samples at a time.
2. Seconds from launching ``rlgear train`` (a fresh process, num_workers 2)
   to its first result line, which includes starting Ray and the actors.
3. Peak RSS of the driver and of one remote worker after sampling.

Usage: python bench/workers.py [--rounds 8] [--steps 8192] [--skip-launch]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import launch

NUM_ENVS = 8


def make_workers(num_workers: int, steps: int) -> Any:
    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.distributed.worker_set import WorkerSet

    ppo = registry.load_algorithm("ppo")
    config = config_mod.resolve(
        {
            "algorithm": "ppo",
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {
                "num_workers": num_workers,
                "num_envs_per_worker": NUM_ENVS,
                "rollout_fragment_length": 256,
            },
            "training": {"train_batch_size": steps},
            "logging": {"tensorboard": False},
        },
        training_class=ppo.config_class,
    )
    return WorkerSet(
        config, ppo.policy_class("torch"), registry.load_env_adapter("gymnasium"), ppo.postprocess
    )


def sync_round(workers: Any, steps: int) -> int:
    from rlgear.distributed.rollout_ops import synchronous_parallel_sample

    return synchronous_parallel_sample(workers, steps)[1]


def async_round(workers: Any, steps: int) -> int:
    """Async sampling for ``steps`` env steps, then the requests still in flight are drained.

    Draining (and counting) them inside the timed round keeps the workers idle
    while the other settings are measured, so no work is done off the clock.
    """
    from rlgear.distributed.async_ops import AsyncSampler

    sampler = AsyncSampler(workers, max_requests_in_flight_per_worker=2)
    done = 0
    while done < steps:
        done += sum(count for _, count, _ in sampler.get_ready())
    done += sum(count for _, (_, count) in sampler._pool.wait(None, wait_for_all=True))
    return done


def throughput(rounds: int, steps: int) -> dict[str, Any]:
    import ray

    from rlgear.distributed.ray_session import init_ray, shutdown_ray

    init_ray(num_cpus=4)
    sets = {n: make_workers(n, steps) for n in (0, 1, 2)}
    runs = {
        "in_process": lambda: sync_round(sets[0], steps),
        "remote_1_sync": lambda: sync_round(sets[1], steps),
        "remote_2_sync": lambda: sync_round(sets[2], steps),
        "remote_2_async": lambda: async_round(sets[2], steps),
    }
    for run in runs.values():  # warm-up: actors start, numpy twins load
        run()
    totals = {name: [0, 0.0] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            totals[name][0] += run()
            totals[name][1] += time.perf_counter() - start
    rate = {name: s / t for name, (s, t) in totals.items()}
    worker_rss = ray.get(
        sets[2].remote_worker(1).apply.remote(lambda _: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    )
    driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for workers in sets.values():
        workers.stop()
    shutdown_ray()
    base = rate["in_process"]
    return {
        "env_steps_per_s": {k: round(v) for k, v in rate.items()},
        "ratio_to_in_process": {k: round(v / base, 2) for k, v in rate.items()},
        "peak_rss_mb": {
            "driver (3 worker sets)": round(driver_rss / 1024),
            "worker": round(worker_rss / 1024),
        },
    }


def launch_to_first_result() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run = launch(
            [
                "train", "configs/ppo-cartpole.yaml", "--progress", "plain",
                "--set", f"logging.dir={tmp}", "--set", "stop={training_iteration: 1}",
                "--set", "workers.num_workers=2", "--set", "workers.num_envs_per_worker=8",
                "--set", "checkpoint.at_end=false",
            ],
            first_line_prefix="iter",
        )  # fmt: skip
    return {
        "launch_to_first_result_s": round(run["first_line_s"], 2),
        "wall_s_incl_ray_shutdown": round(run["wall_s"], 2),
        "driver_peak_rss_mb": round(run["peak_rss_mb"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8192, help="env steps per round and setting")
    parser.add_argument("--skip-launch", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
    out: dict[str, Any] = {"cpus": os.cpu_count(), **throughput(args.rounds, args.steps)}
    if not args.skip_launch:
        out["rlgear_train_num_workers_2"] = launch_to_first_result()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
