"""simple_spread PPO side by side: rlgear (configs/ppo-simple-spread.yaml) vs SB3 PPO via SuperSuit.

Issue 13's benchmark: in one run, the same env (``mpe2``'s ``simple_spread_v3``, 3 agents,
discrete actions, ``max_cycles=25``), the same env-step budget per side and one shared network
on both sides (SuperSuit's recipe makes every agent a slot of one SB3 vec env; rlgear's config
maps every agent to one policy), 8 envs each, both in this process one after the other. The SB3
side is ``bench/multi_agent_sb3.py``'s ``sb3_ppo`` loop, imported, with its hyperparameters
(lr 1e-3, 256 steps x 8 envs x 3 agents a rollout, minibatch 256, 10 epochs); rlgear's are the
config's (lr 3e-4, 1,600 env steps = 4,800 agent rows a batch, minibatch 400, 10 epochs).

Both curves are the mean episode return summed over the agents against env steps and wall
clock (SB3: the episodes ended in each rollout; rlgear: ``episode_return_mean``, its moving
window of the last ``training.metrics_window`` episodes). The summary compares the returns at
equal env steps (the last point of each curve at or before a mark), the best return of each,
and the wall clock each side took to reach the learning test's target (random play + half the
gap to the best measured return, from bench/results/multi_agent_sb3.json).

Usage: nice python bench/multi_agent.py [--env-steps 200000] [--seed 0]
       [--out bench/results/multi_agent.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision
from multi_agent_sb3 import MAX_CYCLES, NUM_ENVS, sb3_ppo

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "ppo-simple-spread.yaml"
BASELINES = ROOT / "bench" / "results" / "multi_agent_sb3.json"


def learning_test_target() -> float:
    measured = json.loads(BASELINES.read_text())
    random_return = measured["random"]["mean_return"]
    return random_return + 0.5 * (measured["sb3_ppo"]["best_rollout_mean_return"] - random_return)


def rlgear_ppo(env_steps: int, seed: int, logdir: Path) -> dict[str, Any]:
    """Train configs/ppo-simple-spread.yaml for ``env_steps``; the curve after every iteration."""
    import rlgear

    curve: list[dict[str, float]] = []
    start = time.perf_counter()

    class Curve:
        @rlgear.hookimpl
        def on_trainer_init(self, trainer):
            """The clock starts once the trainer is built, as the SB3 side's starts after PPO(...)."""
            nonlocal start
            start = time.perf_counter()

        @rlgear.hookimpl
        def on_train_result(self, trainer, result):
            curve.append(
                {
                    "env_steps": int(result["timesteps_total"]),
                    "wall_s": round(time.perf_counter() - start, 2),
                    "mean_return": float(result["episode_return_mean"]),
                }
            )

    rlgear.train(
        CONFIG,
        overrides=[
            f"seed={seed}",
            f"logging.dir={logdir}",
            "logging.tensorboard=false",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
            f"stop={{timesteps_total: {env_steps}}}",
        ],
        hooks=[Curve()],
    )
    return {
        "config": str(CONFIG.relative_to(ROOT)),
        "num_envs": NUM_ENVS,
        "parameters": "shared (one policy for every agent: the config's default)",
        "curve": curve,
        "wall_s": curve[-1]["wall_s"],
        "env_steps": curve[-1]["env_steps"],
        "best_mean_return": max(p["mean_return"] for p in curve),
    }


def at_steps(curve: list[dict[str, float]], env_steps: int) -> dict[str, float] | None:
    """The last point of ``curve`` at or before ``env_steps``."""
    points = [p for p in curve if p["env_steps"] <= env_steps]
    return points[-1] if points else None


def first_reaching(curve: list[dict[str, float]], target: float) -> dict[str, float] | None:
    return next((p for p in curve if p["mean_return"] >= target), None)


def summary(rl: dict[str, Any], sb3: dict[str, Any], env_steps: int, target: float) -> dict[str, Any]:
    marks = [env_steps * k // 4 for k in (1, 2, 3, 4)]
    at_equal_steps = []
    for mark in marks:
        ours, theirs = at_steps(rl["curve"], mark), at_steps(sb3["curve"], mark)
        at_equal_steps.append(
            {
                "env_steps": mark,
                "rlgear_mean_return": ours and ours["mean_return"],
                "rlgear_wall_s": ours and ours["wall_s"],
                "sb3_mean_return": theirs and theirs["mean_return"],
                "sb3_wall_s": theirs and theirs["wall_s"],
            }
        )
    ours, theirs = first_reaching(rl["curve"], target), first_reaching(sb3["curve"], target)
    return {
        "at_equal_env_steps": at_equal_steps,
        "target": target,
        "rlgear_reaches_target": ours,
        "sb3_reaches_target": theirs,
        "wall_clock_ratio_to_target": (ours["wall_s"] / theirs["wall_s"]) if ours and theirs else None,
        "wall_clock_ratio_whole_budget": rl["wall_s"] / sb3["wall_s"],
        "best_mean_return": {"rlgear": rl["best_mean_return"], "sb3": sb3["best_rollout_mean_return"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "multi_agent.json")
    parser.add_argument("--logdir", type=Path, default=Path("/tmp/rlgear-bench-multi-agent"))
    args = parser.parse_args()
    result: dict[str, Any] = {
        "revision": source_revision(),
        "env": f"mpe2:simple_spread_v3 (max_cycles={MAX_CYCLES}, continuous_actions=False)",
        "seed": args.seed,
        "env_steps_per_side": args.env_steps,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["rlgear_ppo"] = rlgear_ppo(args.env_steps, args.seed, args.logdir)
    print(
        f"rlgear: {result['rlgear_ppo']['env_steps']} env steps in {result['rlgear_ppo']['wall_s']} s",
        flush=True,
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    sb3_ppo(args.env_steps, args.seed, args.out, result)  # writes result["sb3_ppo"] as it goes
    print(f"sb3: {result['sb3_ppo']['env_steps']} env steps in {result['sb3_ppo']['wall_s']} s", flush=True)
    result["summary"] = summary(
        result["rlgear_ppo"], result["sb3_ppo"], args.env_steps, learning_test_target()
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
