"""Box-World (``rlgear/BoxWorld-v0``): env speed, a random policy's results, the shortest solutions.

For each level (solution_length, num_distractors, distractor_length) it measures, on the raw env
(``BoxWorld``, no gymnasium wrappers), one process:

- ``step_us``: microseconds per ``step`` (random actions; resets excluded), per observation mode;
- ``reset_us``: microseconds per ``reset`` (level generation included);
- a uniform random policy over ``--episodes`` episodes (seeds 0 .. episodes - 1): success rate, the
  share of episodes ended by a distractor box, truncated at ``max_steps``, and the mean return;
- the shortest solution's length in steps (the scripted BFS solver of tests/test_boxworld.py, which
  plays from the entity list): mean and max over the same seeds.

Usage:
  python bench/boxworld.py                      # the default level and a few others, 1000 episodes
  python bench/boxworld.py --episodes 200 --levels 3,2,1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the solver lives beside the env's tests

from rlgear.plugins.envs.boxworld import BoxWorld
from tests.test_boxworld import solve


def step_speed(level: tuple[int, int, int], mode: str, steps: int = 100_000) -> float:
    env = BoxWorld(*(12, *level), observation_mode=mode)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, steps).tolist()
    spent = 0.0
    for action in actions:
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        spent += time.perf_counter() - start
        if terminated or truncated:
            env.reset()
    return 1e6 * spent / steps


def run_level(level: tuple[int, int, int], episodes: int) -> dict:
    env = BoxWorld(*(12, *level))
    rng = np.random.default_rng(0)
    wins = distractors = truncations = 0
    returns = []
    start = time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
    reset_us = 1e6 * (time.perf_counter() - start) / episodes
    for seed in range(episodes):
        env.reset(seed=seed)
        total = 0.0
        while True:
            _, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
            total += reward
            if terminated or truncated:
                break
        wins += info["is_success"]
        distractors += terminated and not info["is_success"]
        truncations += truncated
        returns.append(total)
    lengths = []
    solver_env = BoxWorld(*(12, *level), max_steps=10_000, observation_mode="entities")
    for seed in range(episodes):
        solver_env.reset(seed=seed)
        lengths.append(solve(solver_env)[1])
    return {
        "level": level,
        "reset_us": reset_us,
        "step_us_pixels": step_speed(level, "pixels"),
        "step_us_entities": step_speed(level, "entities"),
        "success": wins / episodes,
        "distractor_end": distractors / episodes,
        "truncated": truncations / episodes,
        "mean_return": float(np.mean(returns)),
        "solution_steps_mean": float(np.mean(lengths)),
        "solution_steps_max": int(np.max(lengths)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument(
        "--levels", nargs="+", default=["3,2,1", "1,0,1", "2,0,1", "4,4,1"],
        help="solution_length,num_distractors,distractor_length (size 12, max_steps 120)",
    )  # fmt: skip
    args = parser.parse_args()
    print(
        "| level (L, D, Ld) | step µs pixels | step µs entities | reset µs | random success | "
        "distractor end | truncated | mean return | shortest solution mean / max |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for text in args.levels:
        r = run_level(tuple(int(v) for v in text.split(",")), args.episodes)
        print(
            f"| {r['level']} | {r['step_us_pixels']:.1f} | {r['step_us_entities']:.1f} | {r['reset_us']:.0f} | "
            f"{r['success']:.3f} | {r['distractor_end']:.3f} | {r['truncated']:.3f} | {r['mean_return']:.3f} | "
            f"{r['solution_steps_mean']:.1f} / {r['solution_steps_max']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
