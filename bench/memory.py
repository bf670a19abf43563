"""Memory and relational models on tasks made for them (issue 33): what each costs and what it learns.

Two parts, each a grid of training runs, one process, one torch thread, appended to a JSON-lines
file as each run ends (``--out``); a run already there is skipped, so the benchmark resumes.

**memory**: PPO on DelayedCue (``rlgear.plugins.envs.delayed_cue``: a cue at the first step, a
query ``delay`` to ``delay + 4`` steps later that scores +1 for naming it, -1 otherwise; a
memoryless policy scores 0), ``delay`` in ``--delays``, with three models of the same width:

- ``attention``: ``model.attention`` (GTrXL), a [32] MLP, 2 blocks of 32 units, 2 heads,
  ``attention_memory`` 40 (every delay measured fits in it);
- ``lstm``: ``model.lstm``, a [32] MLP and a 32-unit cell;
- ``lstm_seq40``: the same LSTM learning on sequences of 40 steps, so that backpropagation through
  time spans every delay measured (the other recurrent models learn on 20);
- ``framestack``: the [32, 32] MLP on the last 4 observations (gymnasium's
  ``FrameStackObservation``), the usual memory substitute.

The recurrent models learn on sequences of ``max_seq_len`` 20 (``lstm_seq40``: 40) and carry their
state across them.
The same PPO settings for all (configs/ppo-attention-delayed-cue.yaml's: 8 envs x 32 steps, 10
epochs of one 256-row minibatch, lr 1e-3). A run stops when the mean return of the last 100
episodes reaches 0.9 (``steps_to_solve``) or at ``--budget`` env steps (unsolved: null).

**boxworld**: PPO on Box-World levels in pixels (``rlgear/BoxWorld-v0``, :data:`LEVELS`; ``small``: a
6x6 room, one box holding the gem and its loose key, 60 steps, where a random policy returns 1.83;
11 for the gem, so the mean return is 11 x the share of levels solved), two models behind the same conv trunk (2x2 stride-1
layers of 12 and 24 channels): ``relational`` (``model.relational``: 1 block of 2 heads and 32
units over the feature map's cells with their coordinates, max-pooled, then a [64] MLP) against
``conv`` (the conv trunk flattened into the [64] MLP). The figure is the return at the fixed
``--boxworld-budget`` and the env steps to first reach 8 (73% of levels), if it does. Both levels
get the same budget.

Each run records its cost per env step: ``sample_us`` (acting, env stepping and postprocessing:
the iteration's time outside the learner) and ``learn_us`` (the learner's updates), both divided by
the run's env steps. Hardware and load matter: compare rows of one file only.

Usage:
  python bench/memory.py                                   # both parts, seeds 0 1 2
  python bench/memory.py --parts memory --delays 4 8 16 32 --seeds 0 1 2 --budget 60000
  python bench/memory.py --parts boxworld --levels small medium --boxworld-budget 200000
  python bench/memory.py --summary                         # the tables from --out, no runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

OUT = Path(__file__).parent / "results" / "memory.jsonl"
SOLVED = 0.9  # DelayedCue: the mean return counted as solved
BOXWORLD_BAR = 8.0  # Box-World: 73% of the levels (a random policy: 1.83)
CONV = [[12, 2, 1], [24, 2, 1]]

MEMORY_MODELS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "attention": (
        {"hidden_sizes": [32], "attention": True, "attention_dim": 32, "attention_heads": 2,
         "attention_layers": 2, "attention_memory": 40, "max_seq_len": 20},
        [],
    ),
    "lstm": ({"hidden_sizes": [32], "lstm": True, "lstm_cell_size": 32, "max_seq_len": 20}, []),
    "lstm_seq40": ({"hidden_sizes": [32], "lstm": True, "lstm_cell_size": 32, "max_seq_len": 40}, []),
    "framestack": (
        {"hidden_sizes": [32, 32]},
        [{"name": "gymnasium.wrappers.FrameStackObservation", "kwargs": {"stack_size": 4}}],
    ),
}  # fmt: skip

BOXWORLD_MODELS: dict[str, dict[str, Any]] = {
    "relational": {"conv_filters": CONV, "hidden_sizes": [64], "relational": True, "relational_dim": 32,
                   "relational_heads": 2, "relational_blocks": 1},
    "conv": {"conv_filters": CONV, "hidden_sizes": [64]},
}  # fmt: skip


def memory_config(model: str, delay: int, seed: int, budget: int) -> dict[str, Any]:
    settings, wrappers = MEMORY_MODELS[model]
    return {
        "algorithm": "ppo",
        "seed": seed,
        "env": {
            "name": "rlgear.plugins.envs.delayed_cue:DelayedCue",
            "kwargs": {"delay": delay, "delay_jitter": 4},
            "wrappers": wrappers,
            "vectorization": "sync",
        },
        "workers": {"num_envs_per_worker": 8, "rollout_fragment_length": 32},
        "training": {"train_batch_size": 256, "sgd_minibatch_size": 256, "num_sgd_iter": 10, "lr": 0.001,
                     "gamma": 0.99, "gae_lambda": 0.95, "entropy_coeff": 0.0},
        "model": settings,
        "stop": {"episode_return_mean": SOLVED, "timesteps_total": budget},
    }  # fmt: skip


#: Box-World levels: name -> env kwargs (pixels). ``small``: tests/test_learning_relational.py's level;
#: ``medium``: an 8x8 room, a key chain of 2 to the gem and one distractor branch (opening it ends the
#: episode), 100 steps.
LEVELS: dict[str, dict[str, Any]] = {
    "small": {"size": 6, "solution_length": 1, "num_distractors": 0, "max_steps": 60},
    "medium": {
        "size": 8,
        "solution_length": 2,
        "num_distractors": 1,
        "distractor_length": 1,
        "max_steps": 100,
    },
}


def boxworld_config(model: str, level: str, seed: int, budget: int) -> dict[str, Any]:
    return {
        "algorithm": "ppo",
        "seed": seed,
        "env": {
            "name": "rlgear/BoxWorld-v0",
            "kwargs": {**LEVELS[level], "observation_mode": "pixels"},
            "vectorization": "sync",
        },
        "workers": {"num_envs_per_worker": 8, "rollout_fragment_length": 64},
        "training": {"train_batch_size": 512, "sgd_minibatch_size": 256, "num_sgd_iter": 8, "lr": 0.0005,
                     "gamma": 0.99, "gae_lambda": 0.95, "entropy_coeff": 0.01},
        "model": BOXWORLD_MODELS[model],
        "stop": {"timesteps_total": budget},
    }  # fmt: skip


def train(raw: dict[str, Any], bar: float) -> dict[str, Any]:
    """Train ``raw`` to its ``stop``; the learner's time is measured apart from the rest."""
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    stop = raw.pop("stop")
    with tempfile.TemporaryDirectory(prefix="rlgear-memory-") as folder:
        raw["logging"] = {"dir": folder, "tensorboard": False, "progress": "none"}
        cls = registry.load_algorithm(raw["algorithm"])
        trainer = cls(config_mod.resolve(raw, training_class=cls.config_class))
        learn_s = [0.0]
        update = trainer.learner.update

        def timed_update(batch: Any) -> Any:
            start = time.perf_counter()
            try:
                return update(batch)
            finally:
                learn_s[0] += time.perf_counter() - start

        trainer.learner.update = timed_update
        curve: list[tuple[int, float]] = []
        first_bar = None
        wall = time.perf_counter()
        try:
            while True:
                result = trainer.train()
                steps, ret = int(result["timesteps_total"]), float(result.get("episode_return_mean") or "nan")
                curve.append((steps, None if ret != ret else round(ret, 3)))
                if first_bar is None and ret >= bar:
                    first_bar = steps
                done_by_return = "episode_return_mean" in stop and ret >= stop["episode_return_mean"]
                if done_by_return or steps >= stop["timesteps_total"]:
                    break
        finally:
            trainer.stop()
        total_s = time.perf_counter() - wall
    return {
        "env_steps": steps,
        "final_return": None if ret != ret else round(ret, 3),  # NaN: no episode ended
        "steps_to_bar": first_bar,
        "wall_s": round(total_s, 1),
        "sample_us": round(1e6 * (total_s - learn_s[0]) / steps, 1),
        "learn_us": round(1e6 * learn_s[0] / steps, 1),
        "curve": curve[:: max(1, len(curve) // 60)],
    }


def done_keys(out: Path) -> set[tuple]:
    if not out.exists():
        return set()
    return {tuple(json.loads(line)["key"]) for line in out.read_text().splitlines() if line.strip()}


def planned(args: argparse.Namespace) -> list[tuple[tuple, dict[str, Any], float]]:
    runs = []
    if "memory" in args.parts:
        for delay in args.delays:
            for model in MEMORY_MODELS:
                for seed in args.seeds:
                    key = ("memory", model, delay, seed, args.budget)
                    runs.append((key, memory_config(model, delay, seed, args.budget), SOLVED))
    if "boxworld" in args.parts:
        for level in args.levels:
            for model in BOXWORLD_MODELS:
                for seed in args.seeds:
                    key = ("boxworld", model, level, seed, args.boxworld_budget)
                    runs.append(
                        (key, boxworld_config(model, level, seed, args.boxworld_budget), BOXWORLD_BAR)
                    )
    return runs


def summary(out: Path) -> str:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        part, model, level, _, budget = row["key"]
        groups.setdefault((part, level, model, budget), []).append(row)
    lines = ["| part | delay / level | model | budget | seeds | solved | steps to bar (median) | "
             "final return (mean) | sample us/step | learn us/step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (part, level, model, budget), group in sorted(groups.items()):
        reached = [r["steps_to_bar"] for r in group if r["steps_to_bar"] is not None]
        median = f"{statistics.median(reached):,.0f}" if reached else "-"
        lines.append(
            f"| {part} | {level} | {model} | {budget:,} | {len(group)} | {len(reached)}/{len(group)} | {median} | "
            f"{statistics.mean([r['final_return'] for r in group if r['final_return'] is not None] or [0]):.2f} | "
            f"{statistics.median(r['sample_us'] for r in group):.0f} | "
            f"{statistics.median(r['learn_us'] for r in group):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["memory", "boxworld"], choices=["memory", "boxworld"])
    parser.add_argument("--delays", nargs="+", type=int, default=[4, 8, 16, 32])
    parser.add_argument("--levels", nargs="+", default=["small", "medium"], choices=sorted(LEVELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=60_000, help="env steps per DelayedCue run")
    parser.add_argument("--boxworld-budget", type=int, default=200_000, help="env steps per Box-World run")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summary", action="store_true", help="print the tables of --out and exit")
    args = parser.parse_args()
    if args.summary:
        print(summary(args.out))
        return
    import torch

    torch.set_num_threads(1)
    have = done_keys(args.out)
    runs = planned(args)
    revision = source_revision()
    for index, (key, raw, bar) in enumerate(runs, 1):
        if tuple(key) in have:
            continue
        print(f"[{index}/{len(runs)}] {' '.join(map(str, key))} ...", end=" ", flush=True)
        row = {"key": list(key), "revision": revision, **train(raw, bar)}
        print(f"return {row['final_return']} at {row['env_steps']:,} steps, to bar {row['steps_to_bar']}, "
              f"{row['wall_s']:.0f} s (sample {row['sample_us']:.0f} us, learn {row['learn_us']:.0f} us a step)")  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
    print(summary(args.out))


if __name__ == "__main__":
    main()
