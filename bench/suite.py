"""rlgear against Stable-Baselines3, side by side on the same machine in the same run.

For every task of ``bench/suite_tasks.py`` (CartPole-v1, Acrobot-v1 and
LunarLander-v3 with ppo, a2c and dqn; Pendulum-v1 with ppo) and every seed,
trains rlgear (its tuned file in ``configs/``) and SB3 (rl-baselines3-zoo's
tuned hyperparameters) for the task's env-step budget, each in a fresh
process on one torch thread (``bench/_suite_child.py``), with greedy
evaluations on separate envs every budget/20 env steps (10 episodes, the same
seeds and the same evaluation code for both). The two libraries alternate
within each (task, seed) pair, so drifting machine load hits both alike.

Every finished run is appended to a JSONL results file at once, and runs
already in it are skipped, so the suite can be stopped and resumed (it takes
hours). A run records a digest of its hyperparameters (the rlgear config
file, or the SB3 entry): after a config changes, its old runs are ignored by
the report and run again. ``--report`` aggregates with rliable (interquartile mean over seeds of
each run's final score, the mean of its last 3 evaluations; 95% stratified-bootstrap confidence intervals),
writes the table to ``docs/benchmarks.md`` and one learning-curve PNG per task.

Usage:
  python bench/suite.py --quick                       # 1 seed, small budgets: a smoke run (< 10 min)
  python bench/suite.py --seeds 0 1 2 3 4              # the full suite (hours; resumable)
  python bench/suite.py --tasks ppo-CartPole-v1 --seeds 0 1 2 3 4
  python bench/suite.py --report                       # tables and plots from the results file

Needs: pip install -e ".[torch,bench]" (stable-baselines3, gymnasium[box2d], rliable, matplotlib).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from suite_tasks import ELSEWHERE, TASKS, TASKS_BY_NAME, Task  # noqa: E402

RESULTS = HERE / "results" / "suite"
LIBS = ("rlgear", "sb3")
EVAL_EPISODES = 10
#: A run's score is the mean of its last evaluations (3 x 10 greedy episodes over the last 15% of the
#: budget): one evaluation of 10 episodes swings by hundreds on Acrobot and LunarLander for both libraries.
FINAL_EVALUATIONS = 3


def final_score(curve: list[dict[str, float]]) -> float:
    """The mean greedy return of a run's last ``FINAL_EVALUATIONS`` evaluations."""
    return float(np.mean([p["return_mean"] for p in curve[-FINAL_EVALUATIONS:]]))


def run_child(lib: str, task: Task, seed: int, budget: int) -> dict[str, Any]:
    """One training run in a fresh process; its result plus wall time and peak RSS seen from here."""
    args = [
        str(HERE / "_suite_child.py"), "--lib", lib, "--task", task.name, "--seed", str(seed),
        "--budget", str(budget), "--eval-every", str(task.eval_every(budget)),
        "--eval-episodes", str(EVAL_EPISODES),
    ]  # fmt: skip
    return run_process(args, "SUITE_RESULT ", f"{lib} {task.name} seed {seed}")


def run_process(args: list[str], marker: str, label: str) -> dict[str, Any]:
    """Run ``python *args`` (one torch thread, no plugin autoload) and return the JSON of its last
    ``marker`` line, plus the process's wall time and peak RSS; a failure raises with its output's tail.
    Shared with ``bench/marl.py``.

    Each evaluation the child reports (a ``marker`` line with ``RESULT`` as ``EVAL``) is printed as
    it comes (env steps, return, wall clock so far): a run can take hours (sb3-contrib's QR-DQN on LunarLander
    took 2 h here), and without it the only sign of life was the final line."""
    progress_marker = marker.replace("RESULT", "EVAL")
    env = {
        **os.environ,
        "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith(progress_marker):
            print(progress_token(json.loads(line.removeprefix(progress_marker))), end=" ", flush=True)
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    results = [line.removeprefix(marker) for line in lines if line.startswith(marker)]
    if code != 0 or not results:
        raise RuntimeError(f"{label} failed ({code}):\n" + "\n".join(lines[-25:]))
    return {
        **json.loads(results[-1]),
        "process_s": time.perf_counter() - start,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def progress_token(point: dict[str, Any]) -> str:
    """``12.5k -114.4 (130 s);``: an evaluation's env steps (in thousands), mean return and the run's
    wall clock so far, for the live line."""
    return f"{point['env_steps'] / 1000:g}k {point['return_mean']:.1f} ({point['wall_s']:.0f} s);"


def code_version() -> str:
    """The commit the suite runs (``+dirty`` with uncommitted changes), recorded with every run."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "core", "plugins", "bench"], cwd=ROOT)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty.returncode else "")


def settings_digest(task: Task, lib: str) -> str:
    """A digest of what a run's hyperparameters come from: a changed config invalidates old runs.

    The env-only run has no hyperparameters: its digest is that of the env id."""
    if lib == "env":
        text = task.env
    elif lib == "rlgear":
        text = (ROOT / "configs" / task.rlgear_config).read_text()
    else:
        text = json.dumps(task.sb3, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_suite(tasks: list[Task], seeds: list[int], libs: list[str], quick: bool, path: Path) -> None:
    done = {(r["task"], r["lib"], r["seed"], r["budget"], r.get("settings")) for r in load_results(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = [
        (task, seed, lib)
        for seed in seeds
        for task in tasks
        for lib in (libs if seed % 2 == 0 else libs[::-1])  # alternate who goes first
    ]
    if not quick:  # the env's own cost, once per task: a floor under both libraries' wall clock
        plan += [(task, seeds[0], "env") for task in tasks]
    total_start = time.perf_counter()
    version = code_version()
    for i, (task, seed, lib) in enumerate(plan, 1):
        budget = task.quick_budget if quick else task.budget
        settings = settings_digest(task, lib)
        if (task.name, lib, seed, budget, settings) in done:
            continue
        print(
            f"[{i}/{len(plan)}] {lib:6s} {task.name:22s} seed {seed} budget {budget} ...", end=" ", flush=True
        )
        result = run_child(lib, task, seed, budget)
        row = {
            "task": task.name, "lib": lib, "seed": seed, "budget": budget, "settings": settings,
            "rlgear_version": version, **result,
        }  # fmt: skip
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        final = final_score(result["curve"]) if lib != "env" else float("nan")
        print(
            f"final {final:8.1f}  wall {result['wall_s']:6.1f} s  rss {result['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    print(f"suite: {time.perf_counter() - total_start:.0f} s")


# ----------------------------------------------------------------------------- the report


def first_crossing(curve: list[dict[str, float]], threshold: float) -> tuple[int, float] | None:
    """Env steps and wall seconds at the first evaluation at or above ``threshold``."""
    for point in curve:
        if point["return_mean"] >= threshold:
            return int(point["env_steps"]), float(point["wall_s"])
    return None


def iqm_and_ci(scores: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """rliable's interquartile mean over runs and its 95% stratified-bootstrap interval."""
    try:
        from rliable import library as rly
        from rliable import metrics
    except ImportError as error:  # a one-line answer, not a traceback, after hours of runs
        raise SystemExit(
            f"the report needs rliable ({error}): pip install -e '.[bench]'; the runs are saved, "
            "so run the same command with --report once it is installed"
        ) from None

    np.random.seed(seed)  # rliable's bootstrap draws from numpy's global RNG
    point, interval = rly.get_interval_estimates(
        {"x": scores.reshape(-1, 1)}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=5000
    )
    return float(point["x"][0]), float(interval["x"][0][0]), float(interval["x"][1][0])


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_key[(row["task"], row["lib"], row["budget"])].append(row)
    out = []
    for (task_name, lib, budget), runs in sorted(by_key.items()):
        task = TASKS_BY_NAME[task_name]
        finals = np.array([final_score(r["curve"]) for r in runs])
        iqm, low, high = iqm_and_ci(finals) if len(runs) > 1 else (float(finals[0]),) * 3
        crossings = [first_crossing(r["curve"], task.threshold) for r in runs]
        solved = [c for c in crossings if c is not None]
        out.append(
            {
                "task": task_name, "lib": lib, "budget": budget, "seeds": len(runs), "iqm": iqm,
                "ci": (low, high), "solved": len(solved),
                "steps_to_threshold": float(np.median([c[0] for c in solved])) if solved else None,
                "wall_s": float(np.median([r["wall_s"] for r in runs])),
                "rss_mb": float(np.median([r["peak_rss_mb"] for r in runs])),
                "threshold": task.threshold,
            }
        )  # fmt: skip
    return out


def plot_task(task: Task, rows: list[dict[str, Any]], out: Path) -> None:
    """IQM over seeds of the greedy return against env steps, with the min-max band, per library."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for lib, color in zip(LIBS, ("tab:blue", "tab:orange"), strict=True):
        runs = [r for r in rows if r["lib"] == lib]
        if not runs:
            continue
        # From the first step every run has evaluated at: no column of the grid is empty.
        start = max(r["curve"][0]["env_steps"] for r in runs)
        grid = np.linspace(start, max(r["curve"][-1]["env_steps"] for r in runs), 60)
        curves = np.array(
            [np.interp(grid, [p["env_steps"] for p in r["curve"]], [p["return_mean"] for p in r["curve"]],
                       left=np.nan) for r in runs]
        )  # fmt: skip
        sorted_curves = np.sort(curves, axis=0)
        n = len(runs)
        trim = n // 4
        middle = sorted_curves[trim : n - trim] if n > 2 else sorted_curves
        ax.plot(grid, np.nanmean(middle, axis=0), color=color, label=f"{lib} (IQM of {n})")
        ax.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=color, alpha=0.15)
    ax.axhline(task.threshold, color="grey", linestyle=":", linewidth=1)
    ax.set_title(f"{task.algorithm} on {task.env}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def judge(r: dict[str, Any], s: dict[str, Any], ratio: float, wall_ratio_target: float) -> str:
    """The verdict column: rlgear's return at or above SB3's IQM or inside its interval, and the wall
    ratio at most the target. Withheld while the two libraries have different seed counts: a task's
    runs take hours and land over several sittings, and an interval of fewer seeds is no yardstick."""
    if r["seeds"] != s["seeds"]:
        return f"no verdict yet ({r['seeds']}/{s['seeds']} seeds)"
    returns_ok = r["iqm"] >= s["iqm"] or r["iqm"] >= s["ci"][0]
    return ("return ok" if returns_ok else "**return below**") + (
        ", time ok" if ratio <= wall_ratio_target else f", **time above {wall_ratio_target:.2g}x**"
    )


def report(
    path: Path,
    doc: Path | None,
    plots: Path | None,
    tasks: list[Task] | None = None,
    marker: str = "suite-table",
    elsewhere_tasks: list[tuple[str, str, str]] | None = None,
    wall_ratio_target: float = 0.5,
) -> str:
    """The table of ``tasks`` (default: the suite's) from the results file; with ``doc``, written between
    ``<!-- {marker}:begin -->`` and ``<!-- {marker}:end -->`` there (bench/mujoco_suite.py: its own marker)."""
    tasks = TASKS if tasks is None else tasks
    elsewhere_tasks = ELSEWHERE if elsewhere_tasks is None else elsewhere_tasks
    current = {(task.name, lib): settings_digest(task, lib) for task in tasks for lib in (*LIBS, "env")}
    rows = [r for r in load_results(path) if r.get("settings") == current.get((r["task"], r["lib"]))]
    env_floor = {r["task"]: r["wall_s"] for r in rows if r["lib"] == "env"}
    rows = [r for r in rows if r["lib"] != "env"]
    if not rows:
        raise SystemExit(f"no results in {path}: run the suite first")
    summary = summarize(rows)
    by_task: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for s in summary:
        by_task[s["task"]][s["lib"]] = s
    lines = [
        "| task | budget | seeds | rlgear IQM [95% CI] | SB3 IQM [95% CI] | steps to threshold rlgear / SB3 "
        "(solved) | wall s rlgear / SB3 | wall ratio | env alone s | ratio above env | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pending = []  # tasks that one library or both have no run of, under the current settings
    for task in tasks:
        libs = by_task.get(task.name, {})
        if len(libs) < len(LIBS):
            counts = ", ".join(f"{lib} {libs[lib]['seeds'] if lib in libs else 0}" for lib in LIBS)
            pending.append(f"- {task.name}: seeds run so far: {counts}")
            continue
        r, s = libs["rlgear"], libs["sb3"]

        def steps(x: dict[str, Any]) -> str:
            value = "-" if x["steps_to_threshold"] is None else f"{x['steps_to_threshold'] / 1000:.0f}k"
            return f"{value} ({x['solved']}/{x['seeds']})"

        ratio = r["wall_s"] / s["wall_s"]
        floor = env_floor.get(task.name)
        above = "-" if floor is None else f"{(r['wall_s'] - floor) / max(s['wall_s'] - floor, 1e-9):.2f}"
        floor_text = "-" if floor is None else f"{floor:.1f}"
        verdict = judge(r, s, ratio, wall_ratio_target)
        lines.append(
            f"| {task.name} (>= {task.threshold:g}) | {r['budget'] / 1000:.0f}k | {r['seeds']}/{s['seeds']} "
            f"| {r['iqm']:.1f} [{r['ci'][0]:.1f}, {r['ci'][1]:.1f}] | {s['iqm']:.1f} [{s['ci'][0]:.1f}, "
            f"{s['ci'][1]:.1f}] | {steps(r)} / {steps(s)} | {r['wall_s']:.0f} / {s['wall_s']:.0f} | "
            f"{ratio:.2f} | {floor_text} | {above} | {verdict} |"
        )
    body = "\n".join(lines)
    if pending:  # said under the table, so that a missing row reads as "not run yet", not as "dropped"
        body += "\n\nNot in the table until both libraries have run (`python bench/suite.py --tasks NAME`):\n"
        body += "\n".join(pending)
    if elsewhere_tasks:
        body += "\n\nMeasured elsewhere:\n" + "\n".join(
            f"- {a} on {e}: {why}" for e, a, why in elsewhere_tasks
        )
    if plots is not None:  # the table's tasks only: a plot of one library's curves compares nothing
        for task in tasks:
            if len(by_task.get(task.name, {})) == len(LIBS):
                plot_task(task, [r for r in rows if r["task"] == task.name], plots / f"{task.name}.png")
    if doc is not None:
        text = doc.read_text() if doc.exists() else ""
        begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
        block = f"{begin}\n{body}\n{end}"
        if begin in text and end in text:
            text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
        else:
            text = text + "\n" + block + "\n"
        doc.write_text(text)
    return body


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 seed and small budgets: a smoke run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS_BY_NAME), help="default: every task")
    parser.add_argument("--libs", nargs="+", choices=LIBS, default=list(LIBS))
    parser.add_argument(
        "--results", type=Path, help="JSONL results file (default under bench/results/suite/)"
    )
    parser.add_argument("--report", action="store_true", help="only aggregate the results file")
    parser.add_argument(
        "--doc", type=Path, help="update the table in this markdown file (docs/benchmarks.md)"
    )
    parser.add_argument("--plots", type=Path, help="write learning-curve PNGs to this folder")
    args = parser.parse_args()

    seeds = [0] if args.quick and args.seeds == [0, 1, 2, 3, 4] else args.seeds
    path = args.results or RESULTS / ("runs-quick.jsonl" if args.quick else "runs.jsonl")
    tasks = [TASKS_BY_NAME[name] for name in args.tasks] if args.tasks else TASKS
    if not args.report:
        run_suite(tasks, seeds, args.libs, args.quick, path)
    # --tasks narrows what is printed (a one-task run lists no other task as "0 seeds"); a --doc table
    # is the whole suite's, so writing it from a subset would drop the other tasks' rows.
    print(report(path, args.doc, args.plots, tasks=TASKS if args.doc else tasks))


if __name__ == "__main__":
    main()
