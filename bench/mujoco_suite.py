"""MuJoCo: rlgear against Stable-Baselines3, side by side on the same machine in the same run (issue 34).

sac and td3 on HalfCheetah-v5 and Hopper-v5 (300k env steps, 5 seeds), ppo on Hopper-v5
(1M env steps, 3 seeds); rlgear runs its files in ``configs/`` and SB3 rl-baselines3-zoo's
hyperparameters for the same env and algorithm (``bench/suite_tasks.py``: ``MUJOCO_TASKS``).
The protocol is ``bench/suite.py``'s, run by its machinery: each run in a fresh process on
one torch thread, the two libraries alternating within each (task, seed) pair, greedy
evaluations on separate envs (10 episodes, the same seeds and code for both; rlgear's ppo
evaluates through the NormalizeObservation statistics of its env.wrappers_vector, SB3's
through VecNormalize's), every finished run appended to a JSONL file at once and skipped when
the script runs again (resumable; a changed config or zoo entry is run again: the settings
digest), and the env's own cost (random actions, no learning) as a floor under both wall clocks.
``--report`` gives rliable's interquartile mean over seeds of each run's final score (the mean
of its last 3 evaluations) with a 95% stratified-bootstrap interval, steps to a threshold, wall
clock, and learning-curve PNGs.

Targets (the issue): returns at or above SB3's or inside its interval; end-to-end throughput at least
1.5x SB3's (the report's verdict: wall clock at most 0.67x SB3's).

Usage:
  python bench/mujoco_suite.py --quick --tasks sac-Hopper-v5     # a smoke run: 1 seed, a few thousand steps
  python bench/mujoco_suite.py                                   # the full plan (many hours; resumable)
  python bench/mujoco_suite.py --report --doc docs/benchmarks.md --plots docs/benchmarks

Needs: pip install -e ".[torch,bench,mujoco]"; MUJOCO_GL=egl is set for headless machines.

Not named bench/mujoco.py (the issue's name): bench's scripts and their child processes put bench/
first on sys.path, where a mujoco.py would shadow the mujoco package itself.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("MUJOCO_GL", "egl")

import suite  # noqa: E402
from suite_tasks import MUJOCO_TASKS  # noqa: E402

RESULTS = HERE / "results" / "mujoco"
#: The issue's seeds: 5 for the off-policy runs (300k steps), 3 for ppo (1M steps).
SEEDS = {"sac": [0, 1, 2, 3, 4], "td3": [0, 1, 2, 3, 4], "ppo": [0, 1, 2]}
TASKS_BY_NAME = {task.name: task for task in MUJOCO_TASKS}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 seed and small budgets: a smoke run")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: 5 (sac, td3) or 3 (ppo)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS_BY_NAME), help="default: every task")
    parser.add_argument("--libs", nargs="+", choices=suite.LIBS, default=list(suite.LIBS))
    parser.add_argument(
        "--results", type=Path, help="JSONL results file (default under bench/results/mujoco/)"
    )
    parser.add_argument("--report", action="store_true", help="only aggregate the results file")
    parser.add_argument("--doc", type=Path, help="update the MuJoCo table in this markdown file")
    parser.add_argument("--plots", type=Path, help="write learning-curve PNGs to this folder")
    args = parser.parse_args()

    path = args.results or RESULTS / ("runs-quick.jsonl" if args.quick else "runs.jsonl")
    tasks = [TASKS_BY_NAME[name] for name in args.tasks] if args.tasks else MUJOCO_TASKS
    if not args.report:
        for task in tasks:
            seeds = args.seeds or ([0] if args.quick else SEEDS[task.algorithm])
            suite.run_suite([task], seeds, args.libs, args.quick, path)
    # the targets: returns at or above SB3's or inside its interval; throughput >= 1.5x SB3's
    # (wall clock <= 1/1.5 of SB3's for the same env steps)
    table = suite.report(
        path,
        args.doc,
        args.plots,
        tasks=MUJOCO_TASKS,
        marker="mujoco-table",
        elsewhere_tasks=[],
        wall_ratio_target=1 / 1.5,
    )
    print(table)


if __name__ == "__main__":
    main()
