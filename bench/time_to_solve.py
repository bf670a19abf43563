"""Time to solve CartPole-v1 with configs/ppo-cartpole.yaml: wall clock, env steps, peak RSS.

For each seed, launches ``rlgear train`` as a user would and stops at the
first of two criteria, each measured in its own run:

* ``eval``: greedy evaluation (10 episodes, every iteration) mean return >= 475,
  the usual "solved" check (SB3's EvalCallback style). The evaluation episodes
  are not counted as env steps but their time is in the wall clock.
* ``train``: the training-episode mean over the last 100 episodes >= 475
  (``episode_return_mean``), which lags the policy by ~50k steps by construction.

Reports medians over seeds. Targets from the issue: <= 20 s from launch and
<= 26k env steps (SB3's median measured on this machine: 26k steps, 42 s,
320 MB), peak RSS <= 320 MB.

Extra ``--set KEY=VALUE`` options go to every run, e.g. how often the config
solves on two remote workers (peak RSS is then the driver's alone)::

    python bench/time_to_solve.py --criteria train --seeds 0 1 2 3 \
        --set workers.num_workers=2 --set workers.num_envs_per_worker=4

Usage: python bench/time_to_solve.py [--seeds 0 1 2] [--criteria eval train] [--set KEY=VALUE ...]
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

CRITERIA = {
    "eval": [
        "--set", "training.evaluation_interval=1",
        "--set", "stop={evaluation/episode_return_mean: 475, timesteps_total: 150000}",
    ],
    "train": ["--set", "stop={episode_return_mean: 475, timesteps_total: 150000}"],
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--criteria", nargs="+", default=list(CRITERIA), choices=list(CRITERIA))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    report = {}
    for criterion in args.criteria:
        runs = []
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                run = launch(
                    [
                        "train", "configs/ppo-cartpole.yaml", "--progress", "none",
                        "--set", f"seed={seed}", "--set", f"logging.dir={tmp}",
                        "--set", "checkpoint.every=0", *CRITERIA[criterion],
                        *(arg for override in args.overrides for arg in ("--set", override)),
                    ]
                )  # fmt: skip
                result = last_result(Path(tmp))
            key = "evaluation/episode_return_mean" if criterion == "eval" else "episode_return_mean"
            runs.append(
                {
                    "seed": seed,
                    "solved": (result.get(key) or 0) >= 475,
                    "env_steps": result["timesteps_total"],
                    "wall_s_from_launch": round(run["wall_s"], 1),
                    "train_time_s": round(result["time_total_s"], 1),
                    "peak_rss_mb": round(run["peak_rss_mb"]),
                }
            )
        report[criterion] = {
            "median_env_steps": statistics.median(r["env_steps"] for r in runs),
            "median_wall_s_from_launch": statistics.median(r["wall_s_from_launch"] for r in runs),
            "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "all_solved": all(r["solved"] for r in runs),
            "solved": f"{sum(r['solved'] for r in runs)} of {len(runs)}",
            "runs": runs,
        }
    report["overrides"] = args.overrides
    report["targets"] = {"wall_s": 20, "env_steps": 26000, "peak_rss_mb": 320}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
