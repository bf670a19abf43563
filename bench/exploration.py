"""Exploration plugins against their absence on a hard-exploration env (issue 35).

``rlgear/DeepChain-v0`` (plugins/envs/deep_chain.py): a chain of ``length`` steps where one of two
actions per depth goes deeper and the other drops the agent into an absorbing "fell off" state;
every episode lasts ``length`` steps and only the end pays (1). A
uniform random policy reaches it once in ``2 ** length`` episodes, so dithering exploration
(epsilon-greedy, a policy's entropy) practically never sees a reward.

For every algorithm (dqn, ppo), exploration method (``none``, ``rnd``, ``icm``), chain length and
seed, one run trains the algorithm's DeepChain config (``configs/<algorithm>-<method>-deepchain.yaml``;
``none`` is the rnd file with ``exploration: null``, so everything else is equal) for a fixed env-step
budget, with a greedy evaluation episode after every iteration (about 1000 env steps; the env is
deterministic, so one greedy episode is the greedy policy's success, 0 or 1). Each run records:

- ``solved``: a greedy evaluation reached the end within the budget, and ``steps_to_solve``;
- ``steps_to_first_reward``: the env steps of the first iteration in which any training episode
  reached the end (iteration granularity), None if none did. The report's "first reward" is the
  earlier of that and ``steps_to_solve``: a greedy evaluation episode that reaches the end also
  gets the reward, and it often does so before a (more random) training episode does;
- ``wall_s``: the run's wall clock (one process, one torch thread).

Runs are appended to a JSONL file as they finish and the ones already in it are skipped, so the
benchmark can be stopped and resumed. The report (printed, and with ``--doc`` written between the
``exploration-table`` markers of docs/benchmarks.md) gives per (algorithm, length, method) the success
rate over seeds, the median env steps to the first reward and to solving (over the runs that got
there), and the mean wall clock.

Usage:
  python bench/exploration.py                                  # dqn and ppo x none/rnd/icm, lengths 20 and 30, 5 seeds
  python bench/exploration.py --algorithms dqn --methods none rnd --lengths 20 --seeds 0
  python bench/exploration.py --report --doc docs/benchmarks.md

Needs: pip install -e ".[torch]".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIGS = ROOT / "configs"
RESULTS = HERE / "results" / "exploration.jsonl"
ALGORITHMS = ("dqn", "ppo")
METHODS = ("none", "rnd", "icm")
#: Env steps per run: 4x the budgets of tests/test_learning_exploration.py at length 20, so the
#: longer chain has room and a method that is merely slower still shows as solved.
BUDGETS = {"dqn": 40_000, "ppo": 80_000}


def config_file(algorithm: str, method: str) -> Path:
    return CONFIGS / f"{algorithm}-{'rnd' if method == 'none' else method}-deepchain.yaml"


def run_one(algorithm: str, method: str, length: int, seed: int, budget: int) -> dict[str, Any]:
    """Train one config until the greedy policy reaches the end of the chain or the budget is spent."""
    import torch

    from rlgear import config as config_mod
    from rlgear.discovery import registry

    torch.set_num_threads(1)
    trainer_cls = registry.load_algorithm(algorithm)
    overrides = [
        "logging.tensorboard=false",
        "logging.progress=none",
        f"seed={seed}",
        f"env.kwargs.length={length}",
        "training.evaluation_interval=1",
        "training.evaluation_episodes=1",
        f"stop={{evaluation/episode_return_mean: 1.0, timesteps_total: {budget}}}",
    ]
    if method == "none":
        overrides.append("exploration=null")
    config = config_mod.load(
        config_file(algorithm, method), overrides, training_class=trainer_cls.config_class
    )
    trainer = trainer_cls(config)
    start = time.perf_counter()
    first_reward = steps_to_solve = None
    steps = 0
    try:
        while steps < budget:
            result = trainer.train()
            steps = int(result["timesteps_total"])
            if first_reward is None and (result.get("episode_return_max") or 0.0) > 0.0:
                first_reward = steps
            if (result.get("evaluation/episode_return_mean") or 0.0) >= 1.0:
                steps_to_solve = steps
                break
    finally:
        trainer.stop()
    return {
        "algorithm": algorithm,
        "method": method,
        "length": length,
        "seed": seed,
        "budget": budget,
        "solved": steps_to_solve is not None,
        "steps_to_solve": steps_to_solve,
        "steps_to_first_reward": first_reward,
        "env_steps": steps,
        "wall_s": round(time.perf_counter() - start, 2),
    }


def load_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def key(run: dict[str, Any]) -> tuple[Any, ...]:
    return (run["algorithm"], run["method"], run["length"], run["seed"], run["budget"])


def first_reward(run: dict[str, Any]) -> int | None:
    """Env steps until the reward was first seen: in a training episode or a greedy evaluation."""
    seen = [s for s in (run["steps_to_first_reward"], run["steps_to_solve"]) if s is not None]
    return min(seen) if seen else None


def _median(values: list[int]) -> str:
    return f"{statistics.median(values) / 1000:.1f}k" if values else "-"


def report(runs: list[dict[str, Any]], doc: Path | None) -> str:
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["algorithm"], run["length"], run["method"]), []).append(run)
    lines = [
        "| algorithm | chain length | exploration | solved (seeds) | env steps to first reward "
        "(median) | env steps to solve (median) | budget | wall clock (mean) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = {name: i for i, name in enumerate(METHODS)}
    for (algorithm, length, method), group in sorted(
        groups.items(), key=lambda g: (g[0][0], g[0][1], order.get(g[0][2], 9))
    ):
        solved = [r for r in group if r["solved"]]
        first = [f for f in map(first_reward, group) if f is not None]
        lines.append(
            f"| {algorithm} | {length} | {method} | {len(solved)}/{len(group)} | {_median(first)} "
            f"({len(first)}/{len(group)} found it) | {_median([r['steps_to_solve'] for r in solved])} | "
            f"{group[0]['budget'] / 1000:.0f}k | {statistics.mean(r['wall_s'] for r in group):.0f} s |"
        )
    table = "\n".join(lines)
    if doc is not None:
        begin, end = "<!-- exploration-table:begin -->", "<!-- exploration-table:end -->"
        text = doc.read_text()
        if begin not in text or end not in text:
            sys.exit(f"{doc}: no {begin} ... {end} markers to write the table between")
        head, rest = text.split(begin, 1)
        doc.write_text(head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[20, 30])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, help="env steps per run (default: dqn 40k, ppo 80k)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSONL results file")
    parser.add_argument("--report", action="store_true", help="only aggregate the results file")
    parser.add_argument(
        "--doc", type=Path, help="write the table into this markdown file (docs/benchmarks.md)"
    )
    args = parser.parse_args()

    runs = load_runs(args.results)
    if not args.report:
        done = {key(run) for run in runs}
        plan = [
            (algorithm, method, length, seed, args.budget or BUDGETS[algorithm])
            for algorithm in args.algorithms
            for length in args.lengths
            for seed in args.seeds
            for method in args.methods
        ]
        missing = [item for item in plan if item not in done]
        for method in {m for _, m, *_ in missing}:
            for algorithm in args.algorithms:
                if not config_file(algorithm, method).exists():
                    sys.exit(f"{config_file(algorithm, method)}: no config for {algorithm} with {method}")
        args.results.parent.mkdir(parents=True, exist_ok=True)
        for i, (algorithm, method, length, seed, budget) in enumerate(missing, 1):
            print(
                f"[{i}/{len(missing)}] {algorithm} {method:4} length {length} seed {seed} ...",
                end=" ",
                flush=True,
            )
            run = run_one(algorithm, method, length, seed, budget)
            print(
                f"{'solved at ' + str(run['steps_to_solve']) if run['solved'] else 'not solved'}, "
                f"first reward {run['steps_to_first_reward']}, {run['wall_s']:.0f} s",
                flush=True,
            )
            with args.results.open("a") as f:
                f.write(json.dumps(run) + "\n")
            runs.append(run)
    print(report(runs, args.doc))


if __name__ == "__main__":
    main()
