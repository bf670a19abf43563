"""One training run of ``bench/marl.py`` in a fresh process (one torch thread).

Trains the algorithm's config (``bench/marl.py`` builds it: the base file with the task's env, the seed
and the budget) and, every ``eval_every`` env steps, plays ``--eval-episodes`` greedy episodes with
rlgear's own evaluation (``Trainer.evaluate``: separate envs, reset with seeds fixed by the run's seed,
each env a fixed share of the episodes). The score of an episode is its return summed over the learning
agents (rlgear's multi-agent ``episode_return``). Evaluation time is taken out of the wall clock.

Prints one ``MARL_EVAL {json}`` line per evaluation and a final ``MARL_RESULT {json}`` line.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # marl.py's tables, and _marl_envs for env.name "_marl_envs:..."

from marl import build_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--eval-episodes", type=int, required=True)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from rlgear.discovery import registry

    raw = build_config(args.algo, args.task, args.seed, args.budget)
    training = raw.setdefault("training", {})
    training["evaluation_interval"] = 0  # evaluated here, on the env-step schedule
    training["min_env_steps_per_iteration"] = 0
    raw["logging"] = {
        "dir": tempfile.mkdtemp(prefix="rlgear-marl-"),
        "tensorboard": False,
        "progress": "none",
    }
    raw.pop("checkpoint", None)
    trainer = registry.load_algorithm(raw["algorithm"])(raw)
    curve: list[dict[str, float]] = []
    eval_s = 0.0

    def record() -> None:
        nonlocal eval_s
        start = time.perf_counter()
        stats = trainer.evaluate(args.eval_episodes)
        eval_s += time.perf_counter() - start
        point = {
            "env_steps": int(trainer.timesteps_total),
            "wall_s": time.perf_counter() - PROCESS_START - eval_s,
            "return_mean": float(stats["evaluation/episode_return_mean"]),
            "len_mean": float(stats.get("evaluation/episode_len_mean", float("nan"))),
            "episodes": int(stats["evaluation/episodes"]),
        }
        curve.append(point)
        print("MARL_EVAL " + json.dumps(point), flush=True)

    try:
        next_eval = args.eval_every
        train_return: list[tuple[int, float]] = []
        while trainer.timesteps_total < args.budget:
            result = trainer.train()
            value = result.get("episode_return_mean")
            if value is not None and value == value:
                train_return.append((int(trainer.timesteps_total), float(value)))
            if trainer.timesteps_total >= next_eval:
                record()
                next_eval = (trainer.timesteps_total // args.eval_every + 1) * args.eval_every
        if not curve or curve[-1]["env_steps"] != trainer.timesteps_total:
            record()
        out = {
            "env_steps": int(trainer.timesteps_total),
            "wall_s": time.perf_counter() - PROCESS_START - eval_s,
            "eval_s": eval_s,
            "curve": curve,
            "train_curve": train_return,
        }
        print("MARL_RESULT " + json.dumps(out), flush=True)
    finally:
        trainer.stop()


if __name__ == "__main__":
    main()
