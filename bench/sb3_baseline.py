"""Same-run baseline: Stable-Baselines3 PPO on CartPole-v1, measured like bench/time_to_solve.py.

Run it next to ``bench/time_to_solve.py`` and report rlgear's figures as ratios
against these, so both are measured on the same machine under the same load.

For each seed, launches a fresh process of the SB3 virtualenv's interpreter
(``--python``) running ``bench/_sb3_child.py``, which trains
``PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed))`` with
rl-baselines3-zoo's tuned CartPole-v1 hyperparameters (n_steps=32,
batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0, lr
0.001 -> 0 and clip_range 0.2 -> 0 linearly over the first 100k env steps, at
most 150k env steps; configs/ppo-cartpole.yaml departs from these as docs/benchmarks.md
says) on one torch thread
(``torch.set_num_threads(1)``; rlgear also uses one, ``workers.num_cpus_for_driver``),
and stops at the first of two criteria, each measured in its own run:

* ``eval``: EvalCallback + StopTrainingOnRewardThreshold: every 2048 env steps,
  10 deterministic episodes on a separate env (``evaluate_policy``), stop when
  the mean >= 475. Evaluation steps are not counted; their time is in the wall clock.
* ``train``: SB3's own rollout/ep_rew_mean (mean of ``model.ep_info_buffer``,
  the last 100 training episodes) >= 475, checked every 2048 env steps.

Differences from rlgear's protocol: SB3's callbacks run during rollout
collection, so a check at 2048*k env steps sees the policy before the update
on the last 256 of those steps (rlgear evaluates after it); rlgear evaluates on
8 envs, SB3 on 1; ``train_time_s`` is not available, ``learn_time_s`` (inside
``model.learn``, evaluations included) is reported instead.

``wall_s_from_launch`` and ``peak_rss_mb`` are measured by this process
(``Popen`` to ``os.wait4``, as bench/_run.py does for rlgear);
``wall_s_from_process_start`` is the child's own figure, without teardown.

Setup (a separate venv, so rlgear's stays clean):
  python3 -m venv /work/venv-sb3
  /work/venv-sb3/bin/pip install torch==2.13.0 stable-baselines3 gymnasium==1.4.0

Usage: python bench/sb3_baseline.py [--seeds 0 1 2] [--python /work/venv-sb3/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_sb3_child.py"
RESULT_PREFIX = "SB3_RESULT "
CRITERIA = ["eval", "train"]


def launch_child(python: str, seed: int, criterion: str) -> dict[str, Any]:
    """Run one SB3 training in a fresh process; return its result plus wall time and peak RSS."""
    args = [python, str(CHILD), "--seed", str(seed), "--criterion", criterion]
    start = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=HERE.parent,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    results = [line[len(RESULT_PREFIX) :] for line in lines if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    return {**json.loads(results[-1]), "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--criteria", nargs="+", default=CRITERIA, choices=CRITERIA)
    parser.add_argument("--python", default="/work/venv-sb3/bin/python", help="the SB3 venv's python")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    versions: dict[str, str] = {}
    for criterion in args.criteria:
        runs = []
        for seed in args.seeds:
            run = launch_child(args.python, seed, criterion)
            versions = run["versions"]
            runs.append(
                {
                    "seed": seed,
                    "solved": run["solved"],
                    "env_steps": run["env_steps"],
                    "wall_s_from_launch": round(run["wall_s"], 1),
                    "wall_s_from_process_start": round(run["wall_s_from_process_start"], 1),
                    "learn_time_s": round(run["learn_time_s"], 1),
                    "peak_rss_mb": round(run["peak_rss_mb"]),
                    "final_mean_return": run["metric"],
                }
            )
        report[criterion] = {
            "median_env_steps": statistics.median(r["env_steps"] for r in runs),
            "median_wall_s_from_launch": statistics.median(r["wall_s_from_launch"] for r in runs),
            "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "all_solved": all(r["solved"] for r in runs),
            "runs": runs,
        }
    report["versions"] = versions
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
