"""Each algorithm's wall clock and env steps to its CartPole-v1 threshold, next to PPO's.

Runs ``rlgear train configs/<algo>-cartpole.yaml`` in fresh processes (as a
user would) for each seed and reports medians. Thresholds are the issue's
learning-test targets: ``ppo`` and ``a2c`` mean training return >= 475,
``pg`` >= 400, ``dqn`` greedy evaluation >= 475 (DQN's training return is
measured with exploration on), ``impala`` and ``a3c`` >= 400 with two remote
workers on a local Ray. Budgets: ppo 150k, dqn 100k, pg/a2c 500k, impala/a3c 1M.

Usage: python bench/algorithms.py [--algorithms ppo dqn pg a2c impala a3c] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import last_result, launch

TARGETS = {
    "ppo": ("episode_return_mean", 475, 150_000, []),
    "a2c": ("episode_return_mean", 475, 500_000, []),
    "pg": ("episode_return_mean", 400, 500_000, []),
    "dqn": ("evaluation/episode_return_mean", 475, 100_000, ["--set", "training.evaluation_interval=1"]),
    # two remote workers on a local Ray (the configs' workers.num_workers: 2)
    "impala": ("episode_return_mean", 400, 1_000_000, []),
    "a3c": ("episode_return_mean", 400, 1_000_000, []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    report = {}
    for algorithm in args.algorithms:
        key, threshold, budget, extra = TARGETS[algorithm]
        runs = []
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                run = launch(
                    [
                        "train", f"configs/{algorithm}-cartpole.yaml", "--progress", "none",
                        "--set", f"seed={seed}", "--set", f"logging.dir={tmp}",
                        "--set", "checkpoint.every=0", "--set", "checkpoint.at_end=false",
                        "--set", "logging.tensorboard=false",
                        "--set", f"stop={{{key}: {threshold}, timesteps_total: {budget}}}", *extra,
                    ]
                )  # fmt: skip
                result = last_result(Path(tmp))
            runs.append(
                {
                    "seed": seed,
                    "solved": (result.get(key) or float("-inf")) >= threshold,
                    "env_steps": result["timesteps_total"],
                    "wall_s_from_launch": round(run["wall_s"], 1),
                }
            )
        report[algorithm] = {
            "criterion": f"{key} >= {threshold} within {budget} env steps",
            "median_env_steps": statistics.median(r["env_steps"] for r in runs),
            "median_wall_s_from_launch": statistics.median(r["wall_s_from_launch"] for r in runs),
            "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
            "runs": runs,
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
