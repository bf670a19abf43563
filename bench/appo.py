"""APPO vs IMPALA vs PPO on CartPole-v1 with two remote workers: env steps and wall clock to 475.

Each algorithm runs its tuned config (``configs/<algo>-cartpole.yaml``) as a user would
(``rlgear train`` in a fresh process), on two remote workers of a local Ray, until its mean
training return (last 100 episodes) reaches 475 or the budget runs out, one seed after
another, the three algorithms interleaved per seed so that load from other processes hits
them alike. PPO's config is the in-process one moved onto 2 workers x 4 envs (the same 8
envs, as tests/test_ray_learning.py runs it); APPO and IMPALA use their configs' 2 workers x
8 envs. ``time_total_s`` is the trainer's clock (setup excluded), ``wall_s_from_launch``
includes starting Python, Ray and the workers.

Usage: python bench/appo.py [--seeds 0 1 2] [--budget 1000000] [--out bench/results/appo.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import last_result, launch, source_revision

THRESHOLD = 475
EXTRA = {
    "appo": [],
    "impala": [],
    "ppo": ["--set", "workers.num_workers=2", "--set", "workers.num_envs_per_worker=4"],
}


def run(algorithm: str, seed: int, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        launched = launch(
            [
                "train", f"configs/{algorithm}-cartpole.yaml", "--progress", "none",
                "--set", f"seed={seed}", "--set", f"logging.dir={tmp}",
                "--set", "checkpoint.every=0", "--set", "checkpoint.at_end=false",
                "--set", "logging.tensorboard=false",
                "--set", "training.evaluation_interval=0",  # the same criterion for all: training episodes
                "--set", f"stop={{episode_return_mean: {THRESHOLD}, timesteps_total: {budget}}}",
                *EXTRA[algorithm],
            ]
        )  # fmt: skip
        result = last_result(Path(tmp))
    return {
        "seed": seed,
        "solved": result["episode_return_mean"] >= THRESHOLD,
        "env_steps": result["timesteps_total"],
        "episode_return_mean": round(result["episode_return_mean"], 1),
        "time_total_s": round(result["time_total_s"], 1),
        "wall_s_from_launch": round(launched["wall_s"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=list(EXTRA), choices=list(EXTRA))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--out", type=Path, default=Path("bench/results/appo.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {a: [] for a in args.algorithms}
    for seed in args.seeds:
        for algorithm in args.algorithms:
            runs[algorithm].append(run(algorithm, seed, args.budget))
            print(algorithm, runs[algorithm][-1], flush=True)
    report = {
        "criterion": f"episode_return_mean >= {THRESHOLD} within {args.budget} env steps, 2 remote workers",
        "revision": source_revision(),
        "algorithms": {
            algorithm: {
                "solved": f"{sum(r['solved'] for r in rs)}/{len(rs)}",
                "median_env_steps": statistics.median(r["env_steps"] for r in rs),
                "median_time_total_s": statistics.median(r["time_total_s"] for r in rs),
                "median_wall_s_from_launch": statistics.median(r["wall_s_from_launch"] for r in rs),
                "runs": rs,
            }
            for algorithm, rs in runs.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
