"""es and ars: env-steps/s and wall clock to solve CartPole-v1 with 0, 1 and 2 remote workers.

Each algorithm trains its tuned config (configs/es-cartpole.yaml, configs/ars-cartpole.yaml) until
its stop criterion (episode_return_mean >= 475, the mean of the last 8 unperturbed episodes), once
per worker count, all in one process and one Ray session (4 logical CPUs, so the 1- and 2-worker
runs can both start; only one run trains at a time). With 0 workers the driver's own evaluator
scores the perturbations; with N it only updates theta and the N actors score them.

Reported per run: env steps and wall clock of training to the stop (``train_s``, start-up excluded),
the start-up (``setup_s``: Ray actors, envs, noise tables), env-steps/s over training, and the
ratios of the 1- and 2-worker runs against the in-process one. The seed is the same for every run,
but runs with different worker counts do not take the same path (each worker's envs have their own
seeds), so env steps to solve differ too: compare env-steps/s for scaling, wall clock for what a
user waits.

Usage: python bench/es_ars.py [--seeds 0 1] [--out bench/results/es_ars.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import ROOT, source_revision

WORKER_COUNTS = (0, 1, 2)
CONFIGS = {"es": "es-cartpole.yaml", "ars": "ars-cartpole.yaml"}


def solve(algorithm: str, num_workers: int, seed: int) -> dict[str, Any]:
    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.run.runner import should_stop

    cls = registry.load_algorithm(algorithm)
    config = config_mod.load(
        ROOT / "configs" / CONFIGS[algorithm],
        [
            f"workers.num_workers={num_workers}",
            f"seed={seed}",
            "logging.tensorboard=false",
            "logging.progress=none",
            "workers.ray.worker_start_timeout_s=600",
        ],
        training_class=cls.config_class,
    )
    start = time.perf_counter()
    trainer = cls(config)
    setup_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        while True:
            result = trainer.train()
            if should_stop(result, config.stop):
                break
        train_s = time.perf_counter() - start
    finally:
        trainer.stop()
    steps = result["timesteps_total"]
    return {
        "solved": result["episode_return_mean"] >= 475,
        "episode_return_mean": result["episode_return_mean"],
        "env_steps": steps,
        "iterations": result["training_iteration"],
        "train_s": round(train_s, 2),
        "setup_s": round(setup_s, 2),
        "env_steps_per_s": round(steps / train_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "es_ars.json"))
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
    from rlgear.distributed.ray_session import init_ray, shutdown_ray

    init_ray(num_cpus=4)
    runs: dict[str, Any] = {}
    try:
        for algorithm in CONFIGS:
            for num_workers in WORKER_COUNTS:
                for seed in args.seeds:
                    key = f"{algorithm}/workers_{num_workers}/seed_{seed}"
                    runs[key] = solve(algorithm, num_workers, seed)
                    print(key, json.dumps(runs[key]), flush=True)
    finally:
        shutdown_ray()
    ratios: dict[str, Any] = {}
    for algorithm in CONFIGS:
        for num_workers in WORKER_COUNTS[1:]:
            for seed in args.seeds:
                base = runs[f"{algorithm}/workers_0/seed_{seed}"]
                run = runs[f"{algorithm}/workers_{num_workers}/seed_{seed}"]
                ratios[f"{algorithm}/workers_{num_workers}_vs_0/seed_{seed}"] = {
                    "env_steps_per_s": round(run["env_steps_per_s"] / base["env_steps_per_s"], 2),
                    "train_s": round(run["train_s"] / base["train_s"], 2),
                }
    pooled: dict[str, Any] = {}  # over the seeds: total env steps / total training seconds
    for algorithm in CONFIGS:
        for num_workers in WORKER_COUNTS:
            chosen = [runs[f"{algorithm}/workers_{num_workers}/seed_{seed}"] for seed in args.seeds]
            pooled[f"{algorithm}/workers_{num_workers}"] = {
                "env_steps_per_s": round(
                    sum(r["env_steps"] for r in chosen) / sum(r["train_s"] for r in chosen), 1
                ),
                "median_train_s": float(np.median([r["train_s"] for r in chosen])),
                "median_env_steps": float(np.median([r["env_steps"] for r in chosen])),
                "all_solved": all(r["solved"] for r in chosen),
            }
        base = pooled[f"{algorithm}/workers_0"]
        for num_workers in WORKER_COUNTS[1:]:
            run = pooled[f"{algorithm}/workers_{num_workers}"]
            ratios[f"{algorithm}/workers_{num_workers}_vs_0/pooled"] = {
                "env_steps_per_s": round(run["env_steps_per_s"] / base["env_steps_per_s"], 2),
                "median_train_s": round(run["median_train_s"] / base["median_train_s"], 2),
            }
    out = {
        "source": source_revision(),
        "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "runs": runs,
        "pooled": pooled,
        "ratios": ratios,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
