"""rlgear's multi-agent algorithms on mpe2's MPE tasks (issue 36, item 5), side by side in the same run.

Tasks (mpe2, discrete actions, ``max_cycles: 25``):

- ``simple_spread_v3``: 3 cooperative agents cover 3 landmarks.
- ``simple_tag_v3``: the 3 adversaries (predators) learn as one team; the good agent (the prey) is a
  fixed policy, uniformly random actions (mpe2 has no default prey policy), played inside the env
  (``bench/_marl_envs.py``) and hidden from the learner. The score is the adversaries' return.
- ``simple_reference_v3``: 2 cooperative agents, each with 50 actions (move x say).

Algorithms: ``mappo``, ``qmix``, ``vdn`` against the independent learners ``ippo`` (rlgear ``ppo``, one
policy shared by the agents) and ``idqn`` (rlgear ``dqn``, one shared policy, each agent's transitions
its own); and, on the tasks' continuous-action variants (mpe2's ``continuous_actions: true``, each
agent a ``Box(0, 1)`` of forces; ``CONTINUOUS``), ``maddpg`` against ``ippo_continuous`` (the same
``ppo`` file, a Gaussian policy). Every algorithm's hyperparameters are its
``configs/<algo>-simple-spread.yaml`` with the task's env swapped in (``idqn``: ``IDQN_CONFIG`` below,
there is no dqn file for MPE). Adding an algorithm is one line of ``ALGORITHMS``.

Score: rlgear's greedy evaluation (``Trainer.evaluate``: separate envs reset with seeds fixed by the
run's seed, 10 episodes a fixed share per env) every budget/20 env steps; a run's final score is the mean
of its last 3 evaluations (``bench/suite.py``'s ``final_score``), the episode return summed over the
learning agents. ``--report``: rliable IQM over seeds with 95% stratified-bootstrap CIs, a markdown table
(written between markers into ``docs/benchmarks.md`` with ``--doc``), learning-curve PNGs (``--plots``),
and the published figures of ``PUBLISHED`` in a separate column (different budget and env version).

Each run is a fresh process on one torch thread (``bench/_marl_child.py``), appended to the JSONL
results file at once; runs already there are skipped (resumable), and a run records a digest of its
config, so a changed config reruns.

Budget arithmetic (smoke timings, 2026-11-29, seed 0 on simple_spread_v3, on a machine whose 2 cores
were busy with two other benchmarks, so the costs are on the high side): the wall clock at 3k and at 12k
env steps gives the marginal cost per 1k env steps (process start, ~3 s, and evaluations, 20 of 10
episodes, ~0.5-4 s, apart): mappo 0.43 s, qmix 1.91 s, vdn 1.47 s, ippo 0.47 s, idqn 0.28 s; 4.56 s per
1k env steps for the five algorithms together. The full benchmark is 3 tasks x 5 seeds x 5 algorithms =
75 runs; at the default 500k env steps a run: 15 x 500 x 4.56 s = 34,200 s, plus 75 x ~7 s of start and
evaluation = ~34,700 s = 9.6 core-hours (10 core-hours = 36,000 s). simple_tag (3 learners) costs about
what simple_spread does, simple_reference (2 learners) less. One (task, seed) of qmix: ~16 min.
maddpg and ippo_continuous (added later) make 30 more runs; their marginal cost per 1k env steps is
not measured yet (``--quick --algos maddpg ippo_continuous``, 2026-11-29, loaded machine: 3k-env-step
runs of 11-22 s and 8-16 s wall, evaluations and process start included).

Usage:
  python bench/marl.py --quick --results /tmp/marl-quick.jsonl     # 1 seed, 3k env steps: smoke (~2 min)
  python bench/marl.py                                             # the full benchmark (hours; resumable)
  python bench/marl.py --tasks simple_spread_v3 --algos mappo qmix --seeds 0 1 2 3 4 --budget 500000
  python bench/marl.py --report --doc docs/benchmarks.md --plots docs/benchmarks/marl

Needs: pip install -e ".[torch,bench]" plus mpe2 (pettingzoo), rliable and matplotlib.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from suite import FINAL_EVALUATIONS, code_version, final_score, iqm_and_ci, load_results, run_process  # noqa: E402

RESULTS = HERE / "results" / "marl"
EVAL_EPISODES = 10
EVALUATIONS = 20  # greedy evaluations over the budget
QUICK_BUDGET = 3_000
DEFAULT_BUDGET = 500_000  # ~9.6 core-hours for the whole benchmark: the docstring's arithmetic

#: Tasks: env.name for rlgear's pettingzoo adapter, the env kwargs, and what the score sums.
TASKS: dict[str, dict[str, Any]] = {
    "simple_spread_v3": {
        "name": "mpe2:simple_spread_v3",
        "kwargs": {"max_cycles": 25, "continuous_actions": False},
        "score": "return summed over the 3 agents",
    },
    "simple_tag_v3": {
        "name": "_marl_envs:simple_tag_fixed_prey",  # bench/_marl_envs.py: the prey plays at random
        "kwargs": {"max_cycles": 25, "continuous_actions": False},
        "score": "adversaries' return summed (prey: uniformly random actions)",
    },
    "simple_reference_v3": {
        "name": "mpe2:simple_reference_v3",
        "kwargs": {"max_cycles": 25, "continuous_actions": False},
        "score": "return summed over the 2 agents",
    },
}

#: Independent DQN: one policy shared by the agents (rlgear dqn's default on a multi-agent env), on the
#: sampling layout and exploration schedule of qmix-simple-spread.yaml (PyMARL's IQL uses qmix.yaml's
#: settings too: RMSprop there, Adam here), a feed-forward Q-network (no GRU), double Q, 1-step targets.
IDQN_CONFIG: dict[str, Any] = {
    "algorithm": "dqn",
    "backend": "torch",
    "seed": 0,
    "env": {"adapter": "pettingzoo", "name": "mpe2:simple_spread_v3", "kwargs": {}},
    "workers": {"num_envs_per_worker": 8, "rollout_fragment_length": 25},
    "model": {"hidden_sizes": [64, 64], "activation": "relu"},
    "training": {
        "env_steps_per_training_step": 200,
        "train_batch_size": 256,  # agent transitions a gradient step
        "training_intensity": 3.84,  # 200 env steps x 3.84 / 256: 3 gradient steps, 768 rows per 600 agent rows
        "lr": 0.0005,
        "gamma": 0.99,
        "buffer_size": 100_000,
        "learning_starts": 800,
        "target_network_update_freq": 5000,
        "tau": 1.0,
        "double_q": True,
        "dueling": False,
        "n_step": 1,
        "epsilon_initial": 1.0,
        "epsilon_final": 0.05,
        "epsilon_timesteps": 50_000,
        "grad_clip": 10.0,
    },
}

#: name in the table -> its base config: a file under configs/ or a dict. Adding maddpg is one line.
ALGORITHMS: dict[str, str | dict[str, Any]] = {
    "mappo": "mappo-simple-spread.yaml",
    "qmix": "qmix-simple-spread.yaml",
    "vdn": "vdn-simple-spread.yaml",
    "ippo": "ppo-simple-spread.yaml",
    "idqn": IDQN_CONFIG,
    "maddpg": "maddpg-simple-spread.yaml",
    "ippo_continuous": "ppo-simple-spread.yaml",
}

#: The algorithms run on the tasks' continuous-action variants (``continuous_actions: true``); the
#: others on the discrete ones. The table's notes say which is which.
CONTINUOUS: frozenset[str] = frozenset({"maddpg", "ippo_continuous"})

#: Pairings refused, with the reason shown in the table (none: see the simple_tag note above).
REFUSED: dict[tuple[str, str], str] = {}

#: Published figures, PUBLISHED[(task, algo)] = (value, note: source, env version, reward convention, budget).
#: Empty: no figure could be read from a source in this session (see PUBLISHED_SOURCES); never filled
#: from memory. Each entry must say where it comes from and on which scale.
PUBLISHED: dict[tuple[str, str], tuple[float, str]] = {}
PUBLISHED_SOURCES: list[str] = [
    "Published figures: none recorded. Searched for: EPyMARL, Papoudakis et al. 2021, 'Benchmarking "
    "Multi-Agent Deep Reinforcement Learning Algorithms in Cooperative Tasks' (arXiv:2006.07869, "
    "https://ar5iv.labs.arxiv.org/html/2006.07869, code https://github.com/uoe-agents/epymarl), and "
    "the MAPPO paper, Yu et al. 2022, 'The Surprising Effectiveness of PPO in Cooperative Multi-Agent "
    "Games' (arXiv:2103.01955, code https://github.com/marlbenchmark/on-policy); only their abstracts "
    "were retrievable, not their result tables, so no value or budget is quoted.",
    "Scale, when figures are added: EPyMARL's MPE returns are divided by the number of agents (its "
    "author, https://github.com/uoe-agents/epymarl/issues/29), this table sums them; EPyMARL runs "
    "semitable's fork of OpenAI's MPE (gym ids SimpleSpread-v0 etc., env_args.time_limit=25, "
    "https://github.com/uoe-agents/epymarl/issues/5 and /issues/34), not mpe2, and its SimpleTag "
    "plays the prey with a pretrained policy (env_args.pretrained_wrapper=PretrainedTag, issue 34), "
    "where this benchmark's prey acts at random. The MAPPO code's MPE runs use episode_length 25 and "
    "num_env_steps 20M in the command posted at https://github.com/marlbenchmark/on-policy/issues/49.",
]


def base_config(algo: str) -> dict[str, Any]:
    from rlgear import config as config_mod

    base = ALGORITHMS[algo]
    if isinstance(base, dict):
        return copy.deepcopy(base)
    return config_mod.read_yaml(ROOT / "configs" / base)


def build_config(algo: str, task: str, seed: int, budget: int) -> dict[str, Any]:
    """The algorithm's base config on ``task``: its env swapped in, the seed and the budget set."""
    raw = base_config(algo)
    spec = TASKS[task]
    raw["env"] = {
        **raw.get("env", {}),
        "adapter": "pettingzoo",
        "name": spec["name"],
        "kwargs": {**spec["kwargs"], "continuous_actions": algo in CONTINUOUS},
    }
    raw["seed"] = seed
    raw["stop"] = {"timesteps_total": budget}
    return raw


def settings_digest(algo: str, task: str) -> str:
    """A digest of the run's config (seed and budget apart) and the task's env: a change reruns it."""
    raw = build_config(algo, task, 0, 0)
    text = json.dumps(raw, sort_keys=True, default=str)
    if TASKS[task]["name"].startswith("_marl_envs:"):
        text += (HERE / "_marl_envs.py").read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_child(algo: str, task: str, seed: int, budget: int) -> dict[str, Any]:
    """One training run in a fresh process; its result plus wall time and peak RSS seen from here."""
    args = [
        str(HERE / "_marl_child.py"), "--algo", algo, "--task", task, "--seed", str(seed),
        "--budget", str(budget), "--eval-every", str(max(1, budget // EVALUATIONS)),
        "--eval-episodes", str(EVAL_EPISODES),
    ]  # fmt: skip
    return run_process(args, "MARL_RESULT ", f"{algo} {task} seed {seed}")


def run_benchmark(tasks: list[str], algos: list[str], seeds: list[int], budget: int, path: Path) -> None:
    done = {(r["task"], r["algo"], r["seed"], r["budget"], r.get("settings")) for r in load_results(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Seed-major, the algorithms rotating within a (seed, task): drifting machine load hits all alike.
    plan = [
        (task, seed, algos[(k + seed) % len(algos)])
        for seed in seeds
        for task in tasks
        for k in range(len(algos))
        if (task, algos[(k + seed) % len(algos)]) not in REFUSED
    ]
    version = code_version()
    total_start = time.perf_counter()
    for i, (task, seed, algo) in enumerate(plan, 1):
        settings = settings_digest(algo, task)
        if (task, algo, seed, budget, settings) in done:
            continue
        print(f"[{i}/{len(plan)}] {algo:6s} {task:20s} seed {seed} budget {budget} ...", end=" ", flush=True)
        result = run_child(algo, task, seed, budget)
        row = {
            "task": task, "algo": algo, "seed": seed, "budget": budget, "settings": settings,
            "rlgear_version": version, **result,
        }  # fmt: skip
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            f"final {final_score(result['curve']):8.1f}  wall {result['wall_s']:6.1f} s  "
            f"eval {result['eval_s']:5.1f} s  rss {result['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    print(f"marl: {time.perf_counter() - total_start:.0f} s")


# ----------------------------------------------------------------------------- the report


def plot_task(task: str, rows: list[dict[str, Any]], out: Path) -> None:
    """IQM over seeds of the greedy return against env steps, with the min-max band, per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for algo, color in zip(ALGORITHMS, colors, strict=False):
        runs = [r for r in rows if r["algo"] == algo]
        if not runs:
            continue
        start = max(r["curve"][0]["env_steps"] for r in runs)
        grid = np.linspace(start, max(r["curve"][-1]["env_steps"] for r in runs), 60)
        curves = np.array(
            [np.interp(grid, [p["env_steps"] for p in r["curve"]], [p["return_mean"] for p in r["curve"]],
                       left=np.nan) for r in runs]
        )  # fmt: skip
        n = len(runs)
        trim = n // 4
        middle = np.sort(curves, axis=0)[trim : n - trim] if n > 2 else curves
        ax.plot(grid, np.nanmean(middle, axis=0), color=color, label=f"{algo} (IQM of {n})")
        ax.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=color, alpha=0.15)
    ax.set_title(f"mpe2 {task} (max_cycles 25)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy return, summed over agents")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def report(path: Path, doc: Path | None, plots: Path | None) -> str:
    current = {(t, a): settings_digest(a, t) for t in TASKS for a in ALGORITHMS}
    rows = [r for r in load_results(path) if r.get("settings") == current.get((r["task"], r["algo"]))]
    if not rows:
        raise SystemExit(f"no results in {path}: run the benchmark first")
    by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_key[(row["task"], row["algo"], row["budget"])].append(row)
    lines = [
        "| task | algorithm | budget | seeds | IQM of final score [95% CI] | median wall s | "
        "published (different budget / env version) |",
        "|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        for algo in ALGORITHMS:
            published = PUBLISHED.get((task, algo))
            pub = "not found (see below)" if published is None else f"{published[0]:g} ({published[1]})"
            if (task, algo) in REFUSED:
                lines.append(f"| {task} | {algo} | - | - | refused: {REFUSED[(task, algo)]} | - | {pub} |")
                continue
            for (t, a, budget), runs in sorted(by_key.items()):
                if (t, a) != (task, algo):
                    continue
                finals = np.array([final_score(r["curve"]) for r in runs])
                iqm, low, high = iqm_and_ci(finals) if len(runs) > 1 else (float(finals[0]),) * 3
                wall = float(np.median([r["wall_s"] for r in runs]))
                lines.append(
                    f"| {task} | {algo} | {budget / 1000:.0f}k | {len(runs)} | {iqm:.1f} [{low:.1f}, "
                    f"{high:.1f}] | {wall:.0f} | {pub} |"
                )
    notes = [
        f"Final score: mean greedy return of the last {FINAL_EVALUATIONS} evaluations ({EVAL_EPISODES} "
        "episodes each), summed over the learning agents; "
        + "; ".join(f"{t}: {s['score']}" for t, s in TASKS.items())
        + ".",
        f"{', '.join(sorted(CONTINUOUS))}: the continuous-action variant of each task (mpe2's "
        "continuous_actions: true); the others: the discrete one.",
        *PUBLISHED_SOURCES,
    ]
    table = "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    if plots is not None:
        for task in TASKS:
            task_rows = [r for r in rows if r["task"] == task]
            if task_rows:
                plot_task(task, task_rows, plots / f"marl-{task}.png")
    if doc is not None:
        text = doc.read_text() if doc.exists() else ""
        begin, end = "<!-- marl-table:begin -->", "<!-- marl-table:end -->"
        block = f"{begin}\n{table}\n{end}"
        if begin in text and end in text:
            text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
        else:
            text = text + "\n" + block + "\n"
        doc.write_text(text)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"1 seed, {QUICK_BUDGET} env steps: a smoke run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--algos", nargs="+", choices=list(ALGORITHMS), default=list(ALGORITHMS))
    parser.add_argument("--budget", type=int, help=f"env steps a run (default {DEFAULT_BUDGET})")
    parser.add_argument("--results", type=Path, help="JSONL results file (default under bench/results/marl/)")
    parser.add_argument("--report", action="store_true", help="only aggregate the results file")
    parser.add_argument(
        "--doc", type=Path, help="update the table in this markdown file (docs/benchmarks.md)"
    )
    parser.add_argument("--plots", type=Path, help="write learning-curve PNGs to this folder")
    args = parser.parse_args()

    seeds = [0] if args.quick and args.seeds == [0, 1, 2, 3, 4] else args.seeds
    budget = args.budget or (QUICK_BUDGET if args.quick else DEFAULT_BUDGET)
    path = args.results or RESULTS / ("runs-quick.jsonl" if args.quick else "runs.jsonl")
    if not args.report:
        run_benchmark(args.tasks, args.algos, seeds, budget, path)
    print(report(path, args.doc, args.plots))


if __name__ == "__main__":
    main()
