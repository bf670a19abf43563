"""Atari: rlgear against Stable-Baselines3 on the same protocol, budget and machine, side by side (issue 34).

PPO on Pong and Breakout (2M frames = 500k agent steps, 3 seeds): rlgear runs
``configs/ppo-{pong,breakout}.yaml``; SB3 runs rl-baselines3-zoo's ``ppo.yml`` ``atari`` entry
(8 envs x 128 steps, 4 epochs of 256, lr 2.5e-4 and clip 0.1 falling linearly over the zoo's
10M steps, vf 0.5, entropy 0.01, CnnPolicy = the Nature CNN) on the very same envs: Machado et
al. 2018's protocol as rlgear's ``env.preset: atari`` builds it (gymnasium's AtariPreprocessing and
FrameStackObservation, sticky actions 0.25; SB3's own AtariWrapper would differ: no sticky
actions, life loss as episode end), rewards clipped to their sign in the learner (SB3: a sign
wrapper above its Monitor, so both report the game's score). Each run is a fresh process on
one torch thread; the libraries alternate within each (task, seed) pair.

Measured in the same run, per task: the end-to-end frames/s of each library (budget x 4 frames
over the wall clock from process start to the end of training) and, once per task, the raw
ALE floor: one preset env stepped with random actions in one process (frames/s), so each
library's throughput is also given as a fraction of it. Learning curves are the mean return of
the last 100 training episodes (the game's score) against frames; a run's final score is that
mean at the end. The report gives rliable's IQM over seeds with a 95% stratified-bootstrap
interval, the targets' verdicts (returns at or above SB3's or inside its interval; throughput
at least 1.5x SB3's) and PNG curves.

Every finished run is appended to ``bench/results/atari/runs.jsonl`` at once and skipped when the
script runs again (resumable), keyed by a digest of its settings (the rlgear config file, the
SB3 entry), as ``bench/suite.py`` does.

The fourth column, ``rlgear_envpool``, is rlgear on the same config through its envpool adapter
(the same protocol mapped to envpool's options, the pool stepping in C++ threads): what a user gets
by switching the adapter. The third column, ``cleanrl``, is CleanRL's ``ppo_atari.py`` recipe (its settings, the Nature CNN,
clipped value loss, per-minibatch advantage normalization) as a plain PyTorch loop written for this
benchmark (``bench/_cleanrl_recipe.py``: CleanRL is a set of scripts, not a library), on the same
preset envs, one torch thread, the learning rate annealed over the zoo's 10M steps as SB3's is.

Usage:
  python bench/atari.py --quick                  # smoke run: 1 seed, 2048 agent steps per run
  python bench/atari.py --throughput             # frames/s side by side: 1 seed, 100k frames per run
  python bench/atari.py                          # the full plan (days on 2 CPU cores; resumable)
  python bench/atari.py --report --plots docs/benchmarks

Needs: pip install -e ".[torch,bench,atari]".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

RESULTS = HERE / "results" / "atari"
LIBS = ("rlgear", "sb3", "cleanrl", "rlgear_envpool")
FRAMES_PER_STEP = 4
BUDGET = 500_000  # agent steps = 2M frames
QUICK_BUDGET = 2048
THROUGHPUT_BUDGET = 25_000  # agent steps = 100k frames: long enough for a steady frames/s
SEEDS = [0, 1, 2]
FLOOR_STEPS = 20_000  # random-action steps of the raw ALE floor (QUICK: 2000)
#: task -> (gymnasium id, rlgear config)
TASKS = {
    "ppo-Pong": ("ALE/Pong-v5", "ppo-pong.yaml"),
    "ppo-Breakout": ("ALE/Breakout-v5", "ppo-breakout.yaml"),
}
#: rl-baselines3-zoo hyperparams/ppo.yml, `atari` (the lin_ schedules fall to 0 over its 10M steps)
SB3_ZOO = {
    "n_envs": 8,
    "zoo_timesteps": 10_000_000,
    "kwargs": {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "vf_coef": 0.5, "ent_coef": 0.01},
    "learning_rate": 2.5e-4,
    "clip_range": 0.1,
}


def settings_digest(task: str, lib: str) -> str:
    if lib in ("rlgear", "rlgear_envpool"):
        text = (ROOT / "configs" / TASKS[task][1]).read_text() + ("envpool" if lib != "rlgear" else "")
    elif lib == "sb3":
        text = json.dumps(SB3_ZOO, sort_keys=True)
    elif lib == "cleanrl":
        from _cleanrl_recipe import RECIPE

        text = json.dumps(RECIPE, sort_keys=True)
    else:
        text = TASKS[task][0]
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------- the children


def _preset_env(env_id: str) -> Any:
    """One env of rlgear's ``env.preset: atari`` (the protocol both libraries run)."""
    from rlgear.plugins.envs.gymnasium_env import _make_env

    return _make_env(env_id, {}, None, (), "atari")


def child_rlgear(task: str, seed: int, budget: int, t0: float, envpool: bool = False) -> dict[str, Any]:
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    raw = config_mod.read_yaml(ROOT / "configs" / TASKS[task][1])
    if envpool:  # the same protocol through envpool's C++ pool (docs/atari-mujoco.md maps the options)
        raw["env"] = {
            **raw["env"],
            "adapter": "envpool",
            "name": envpool_name(task),
            "vectorization": "native",
        }
    raw["seed"] = seed
    raw["stop"] = {"timesteps_total": budget}
    raw["logging"] = {
        "dir": tempfile.mkdtemp(prefix="rlgear-atari-"),
        "tensorboard": False,
        "progress": "none",
    }
    trainer = registry.load_algorithm(raw["algorithm"])(raw)
    curve = []
    try:
        while trainer.timesteps_total < budget:
            result = trainer.train()
            curve.append(
                {
                    "frames": int(result["timesteps_total"]) * FRAMES_PER_STEP,
                    "wall_s": time.perf_counter() - t0,
                    "return_mean": result.get("episode_return_mean"),
                    "episodes": int(result.get("episodes_total", 0)),
                }
            )
        return {"env_steps": int(trainer.timesteps_total), "curve": curve}
    finally:
        trainer.stop()


def envpool_name(task: str) -> str:
    """envpool's id of a task's game: ``ALE/Pong-v5`` -> ``Pong-v5``."""
    return TASKS[task][0].removeprefix("ALE/")


def child_rlgear_envpool(task: str, seed: int, budget: int, t0: float) -> dict[str, Any]:
    return child_rlgear(task, seed, budget, t0, envpool=True)


def child_sb3(task: str, seed: int, budget: int, t0: float) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    env_id = TASKS[task][0]

    def sign_of_rewards(env: gym.Env) -> gym.Env:  # above Monitor: the episode returns stay the game's
        return gym.wrappers.TransformReward(env, np.sign)

    env = make_vec_env(
        lambda: _preset_env(env_id), n_envs=SB3_ZOO["n_envs"], seed=seed, wrapper_class=sign_of_rewards
    )
    fraction = budget / SB3_ZOO["zoo_timesteps"]  # SB3's schedules run over learn()'s total: the zoo's 10M

    def linear(start: float) -> Any:
        return lambda remaining: start * max(0.0, 1.0 - (1.0 - remaining) * fraction)

    model = PPO(
        "CnnPolicy",
        env,
        learning_rate=linear(SB3_ZOO["learning_rate"]),
        clip_range=linear(SB3_ZOO["clip_range"]),
        seed=seed,
        device="cpu",
        verbose=0,
        **SB3_ZOO["kwargs"],
    )
    curve: list[dict[str, Any]] = []

    class Curve(BaseCallback):
        def _on_rollout_end(self) -> None:
            returns = [info["r"] for info in self.model.ep_info_buffer]
            curve.append(
                {
                    "frames": int(self.num_timesteps) * FRAMES_PER_STEP,
                    "wall_s": time.perf_counter() - t0,
                    "return_mean": float(np.mean(returns)) if returns else None,
                    "episodes": len(returns),
                }
            )

        def _on_step(self) -> bool:
            return True

    model.learn(total_timesteps=budget, callback=Curve())
    curve.append(
        {
            **curve[-1],
            "frames": int(model.num_timesteps) * FRAMES_PER_STEP,
            "wall_s": time.perf_counter() - t0,
        }
    )
    return {"env_steps": int(model.num_timesteps), "curve": curve}


def child_cleanrl(task: str, seed: int, budget: int, t0: float) -> dict[str, Any]:
    """CleanRL's ppo_atari recipe, a plain PyTorch loop (bench/_cleanrl_recipe.py) on the same envs."""
    import torch
    from _cleanrl_recipe import train

    torch.set_num_threads(1)
    env_id = TASKS[task][0]
    curve: list[dict[str, Any]] = []

    def on_update(point: dict[str, Any]) -> None:
        curve.append(
            {
                "frames": point["env_steps"] * FRAMES_PER_STEP,
                "wall_s": point["time"] - t0,
                "return_mean": point["return_mean"],
                "episodes": point["episodes"],
            }
        )

    steps = train(lambda: _preset_env(env_id), budget, seed, on_update)
    return {"env_steps": steps, "curve": curve}


def child_floor(task: str, seed: int, steps: int, t0: float) -> dict[str, Any]:
    """Raw ALE stepping: one preset env, random actions, no learning (frames/s)."""
    env = _preset_env(TASKS[task][0])
    env.action_space.seed(seed)
    env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    seconds = time.perf_counter() - start
    env.close()
    return {"env_steps": steps, "frames_per_s": steps * FRAMES_PER_STEP / seconds, "curve": []}


def child_main(argv: list[str]) -> None:
    t0 = time.perf_counter()
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", choices=[*LIBS, "ale"], required=True)
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=int, required=True)
    args = parser.parse_args(argv)
    runners = {"rlgear": child_rlgear, "rlgear_envpool": child_rlgear_envpool, "sb3": child_sb3}
    runner = {**runners, "cleanrl": child_cleanrl, "ale": child_floor}[args.lib]
    result = runner(args.task, args.seed, args.budget, t0)
    if args.lib != "ale":
        result["wall_s"] = time.perf_counter() - t0
        result["frames_per_s"] = result["env_steps"] * FRAMES_PER_STEP / result["wall_s"]
    print("ATARI_RESULT " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------- the driver


def load_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(
    tasks: list[str], seeds: list[int], libs: list[str], quick: bool, path: Path, budget: int | None = None
) -> None:
    import suite

    done = {(r["task"], r["lib"], r["seed"], r["budget"], r["settings"]) for r in load_results(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    budget = budget or (QUICK_BUDGET if quick else BUDGET)
    plan = [(task, seeds[0], "ale") for task in tasks]  # the floor first: the same run, the same machine
    plan += [(t, s, lib) for s in seeds for t in tasks for lib in (libs if s % 2 == 0 else libs[::-1])]
    for task, seed, lib in plan:
        steps = (2_000 if quick else FLOOR_STEPS) if lib == "ale" else budget
        settings = settings_digest(task, lib)
        if (task, lib, seed, steps, settings) in done:
            continue
        print(f"{lib:6s} {task:13s} seed {seed} steps {steps} ...", end=" ", flush=True)
        args = [
            __file__,
            "--child",
            "--lib",
            lib,
            "--task",
            task,
            "--seed",
            str(seed),
            "--budget",
            str(steps),
        ]
        result = suite.run_process(args, "ATARI_RESULT ", f"{lib} {task} seed {seed}")
        row = {"task": task, "lib": lib, "seed": seed, "budget": steps, "settings": settings, **result}
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{result['frames_per_s']:.0f} frames/s", flush=True)


def final_score(row: dict[str, Any]) -> float:
    values = [p["return_mean"] for p in row["curve"] if p["return_mean"] is not None]
    return float(values[-1]) if values else float("nan")


def report(path: Path, plots: Path | None) -> str:
    import suite

    rows = [r for r in load_results(path) if r["settings"] == settings_digest(r["task"], r["lib"])]
    lines = [
        "| task | budget (frames) | lib | seeds | final return IQM [95% CI] | frames/s (median) | "
        "of the raw ALE floor | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        floor = [r["frames_per_s"] for r in rows if r["task"] == task and r["lib"] == "ale"]
        stats = {}
        for lib in LIBS:
            runs = [r for r in rows if r["task"] == task and r["lib"] == lib]
            if not runs:
                continue
            finals = np.array([final_score(r) for r in runs])
            iqm, low, high = suite.iqm_and_ci(finals) if len(runs) > 1 else (float(finals[0]),) * 3
            fps = float(np.median([r["frames_per_s"] for r in runs]))
            stats[lib] = (runs, iqm, low, high, fps)
        for lib, (runs, iqm, low, high, fps) in stats.items():
            verdict = ""
            if lib in ("rlgear", "rlgear_envpool") and "sb3" in stats:
                _, s_iqm, s_low, _, s_fps = stats["sb3"]
                if runs[0]["budget"] <= THROUGHPUT_BUDGET:
                    returns = "throughput run, returns not compared"
                elif np.isnan(iqm) or np.isnan(s_iqm):
                    returns = "no finished episodes to compare"
                else:
                    returns = "return ok" if iqm >= s_iqm or iqm >= s_low else "**return below**"
                verdict = returns + (
                    ", throughput ok" if fps >= 1.5 * s_fps else ", **throughput below 1.5x SB3**"
                )
                if "cleanrl" in stats:  # no target against the plain loop: the ratio says what rlgear costs
                    verdict += f"; {fps / stats['cleanrl'][4]:.2f}x CleanRL's frames/s"
            share = f"{fps / floor[0]:.2f}" if floor else "-"
            lines.append(
                f"| {task} | {runs[0]['budget'] * FRAMES_PER_STEP / 1e6:.3g}M | {lib} | {len(runs)} | "
                f"{iqm:.1f} [{low:.1f}, {high:.1f}] | {fps:.0f} | {share} | {verdict} |"
            )
        if floor:
            lines.append(f"| {task} | - | raw ALE, random actions | 1 | - | {floor[0]:.0f} | 1.00 | |")
        if plots is not None and stats:
            plot(task, {lib: s[0] for lib, s in stats.items()}, plots / f"atari-{task}.png")
    return "\n".join(lines)


COLORS = {"rlgear": "tab:blue", "rlgear_envpool": "tab:purple", "sb3": "tab:orange", "cleanrl": "tab:green"}


def plot(task: str, runs_of: dict[str, list[dict[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for lib, runs in runs_of.items():
        for i, r in enumerate(runs):
            points = [(p["frames"], p["return_mean"]) for p in r["curve"] if p["return_mean"] is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, color=COLORS.get(lib, "tab:gray"), alpha=0.8,
                        label=lib if i == 0 else None)  # fmt: skip
    ax.set_title(f"{task}: mean of the last 100 training episodes")
    ax.set_xlabel("frames")
    ax.set_ylabel("return (game score)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    if "--child" in sys.argv:
        child_main([a for a in sys.argv[1:] if a != "--child"])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 seed, 2048 agent steps per run: a smoke run")
    parser.add_argument(
        "--throughput",
        action="store_true",
        help=f"1 seed, {THROUGHPUT_BUDGET:,} agent steps per run: the frames/s of each library (and the "
        "raw ALE floor) on this machine, side by side; no learning claim",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument(
        "--libs", nargs="+", choices=LIBS, help="default: all for --throughput, else rlgear, sb3 and cleanrl"
    )
    parser.add_argument(
        "--results", type=Path, help="JSONL results file (default under bench/results/atari/)"
    )
    parser.add_argument("--report", action="store_true", help="only aggregate the results file")
    parser.add_argument("--plots", type=Path, help="write learning-curve PNGs to this folder")
    args = parser.parse_args()
    short = args.quick or args.throughput
    seeds = [0] if short and args.seeds == SEEDS else args.seeds
    name = "runs-quick.jsonl" if args.quick else "runs-throughput.jsonl" if args.throughput else "runs.jsonl"
    path = args.results or RESULTS / name
    libs = args.libs or (list(LIBS) if args.throughput else ["rlgear", "sb3", "cleanrl"])
    if not args.report:  # suite.run_process: one torch thread, no plugin autoload
        run(args.tasks, seeds, libs, args.quick, path, THROUGHPUT_BUDGET if args.throughput else None)
    print(report(path, args.plots))


if __name__ == "__main__":
    main()
