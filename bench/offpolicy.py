"""SAC and TD3 on Pendulum-v1: rlgear against Stable-Baselines3 in the same run, and the learner's speed.

Two measurements:

1. **Time to solve** (``solve``): per seed and algorithm, rlgear and SB3 each train in a
   fresh process on one torch thread (the order alternates per seed, so drifting machine
   load hits both alike) for ``--budget`` env steps on one env, one gradient step per env
   step, the same networks (256x256 ReLU actor and critics) and hyperparameters:
   SAC: rl-baselines3-zoo's (lr 1e-3, the rest SB3's defaults: minibatch 256, tau 0.005,
   gamma 0.99, alpha tuned, 100 random warm-up steps; ``configs/sac-pendulum.yaml``).
   TD3: ``configs/td3-pendulum.yaml`` (lr 1e-3, gamma 0.98, Gaussian noise 0.1 in env
   units, 1000 warm-up steps, minibatch 256, policy delay 2, target noise 0.2 clipped 0.5).
   rlgear samples 16 env steps then takes 16 gradient steps; SB3 one and one.
   Every 1000 env steps the clock stops and 10 greedy episodes run on a separate env; the
   wall clock to the first evaluation >= -200 and the evaluation at the end of the budget
   are reported (training time only, imports and setup excluded, for both).
2. **Learner gradient steps/s** (``learner``): SAC's update at minibatch 256 with 256x256
   networks on Pendulum-sized rows, rlgear's ``learn_on_batch`` (and the whole replay step,
   sampling included) against the same update written as a plain torch loop (two critic
   modules, three ``torch.optim.Adam``, CleanRL's structure) and, with SB3 installed, SB3's own
   ``SAC.train(gradient_steps=1)`` on the same rows; same process, one thread, interleaved in 10
   rounds (medians; the ratio is the median of the per-round ratios).

Writes ``bench/results/offpolicy.json`` (after every run, so a stopped run keeps what it measured).
``--summarize`` reads it and adds ``summary``: per algorithm and library, the mean final return
with its 95% t-interval over the seeds, the median wall clock to the first evaluation >= -200 (and
how many seeds got there), and rlgear's ratios to SB3; it prints them as a markdown table.

Usage: python bench/offpolicy.py [--budget 20000] [--seeds 0 1] [--algorithms sac td3] [--skip-solve]
       python bench/offpolicy.py --seeds 3 4 --append   (more seeds into the existing result file)
       python bench/offpolicy.py --summarize
       python bench/offpolicy.py --learner-only   (the learner figures again, into learner_reruns)
Needs: pip install -e ".[torch,bench]"
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULT_FILE = HERE / "results" / "offpolicy.json"
EVAL_EVERY, EVAL_EPISODES, THRESHOLD = 1000, 10, -200.0
CONFIGS = {"sac": "sac-pendulum.yaml", "td3": "td3-pendulum.yaml"}


# ----------------------------------------------------------------------------- the children


def run_rlgear(algorithm: str, seed: int, budget: int) -> dict:
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    trainer_cls = registry.load_algorithm(algorithm)
    config = config_mod.load(
        ROOT / "configs" / CONFIGS[algorithm],
        [
            f"seed={seed}",
            "logging.tensorboard=false",
            "logging.progress=none",
            "training.evaluation_interval=0",
            f"training.min_env_steps_per_iteration={EVAL_EVERY}",
            f"training.evaluation_episodes={EVAL_EPISODES}",
        ],
        training_class=trainer_cls.config_class,
    )
    trainer = trainer_cls(
        config, logdir=Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-offpolicy-{os.getpid()}"
    )
    curve, train_s = [], 0.0
    try:
        while trainer.timesteps_total < budget:
            start = time.perf_counter()
            trainer.train()
            train_s += time.perf_counter() - start
            evaluation = trainer.evaluate()["evaluation/episode_return_mean"]
            curve.append((trainer.timesteps_total, train_s, evaluation))
    finally:
        trainer.stop()
    return {"curve": curve}


def run_sb3(algorithm: str, seed: int, budget: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    env, eval_env = gym.make("Pendulum-v1"), gym.make("Pendulum-v1")
    eval_env.reset(seed=seed + 1000)
    policy_kwargs = {"net_arch": [256, 256]}
    if algorithm == "sac":
        model = SAC(
            "MlpPolicy", env, learning_rate=1e-3, policy_kwargs=policy_kwargs, seed=seed, device="cpu"
        )
    else:
        model = TD3(
            "MlpPolicy",
            env,
            learning_rate=1e-3,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=1000,
            action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
            policy_kwargs=policy_kwargs,
            seed=seed,
            device="cpu",
        )
    curve, train_s, steps = [], 0.0, 0
    while steps < budget:
        start = time.perf_counter()
        model.learn(EVAL_EVERY, reset_num_timesteps=steps == 0)
        train_s += time.perf_counter() - start
        steps = model.num_timesteps
        evaluation, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        curve.append((steps, train_s, float(evaluation)))
    return {"curve": curve}


def child(args: argparse.Namespace) -> None:
    run = run_rlgear if args.library == "rlgear" else run_sb3
    out = run(args.algorithm, args.seed, args.budget)
    print("RESULT " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- learner speed


def learner_speed(steps: int = 600, batch: int = 256, rounds: int = 10) -> dict:
    """Gradient steps/s of SAC's update: rlgear's policy and replay step vs a plain torch loop."""
    import tempfile

    import numpy as np
    import torch
    from torch import nn
    from torch.nn import functional as F

    from rlgear import config as config_mod
    from rlgear.blocks.replay_buffers import NEXT_OBS, ReplayBuffer
    from rlgear.discovery import registry
    from rlgear.sample_batch import SampleBatch as SB
    from rlgear.spaces import Box

    torch.set_num_threads(1)
    trainer_cls = registry.load_algorithm("sac")
    raw = {
        "algorithm": "sac",
        "seed": 0,
        "env": {"name": "Pendulum-v1"},
        "model": {"hidden_sizes": [256, 256], "activation": "relu"},
        "training": {"lr": 1e-3, "train_batch_size": batch},
        "logging": {"dir": tempfile.mkdtemp(), "tensorboard": False, "progress": "none"},
    }
    config = config_mod.resolve(raw, training_class=trainer_cls.config_class)
    obs_space = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
    act_space = Box(np.array([-2.0]), np.array([2.0]))
    policy = trainer_cls.policy_class("torch")(obs_space, act_space, config)
    rng = np.random.default_rng(0)
    rows = 20_000
    data = SB(
        {
            SB.OBS: rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
            SB.ACTIONS: rng.uniform(-2, 2, (rows, 1)).astype(np.float32),
            SB.REWARDS: rng.normal(size=rows).astype(np.float32),
            SB.DISCOUNTS: np.full(rows, 0.99, np.float32),
            NEXT_OBS: rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
        }
    )
    buffer = ReplayBuffer(100_000, seed=0)
    buffer.add(data)
    minibatch = buffer.sample(batch)

    def timed(step, n: int) -> float:
        for _ in range(3):
            step()
        start = time.perf_counter()
        for _ in range(n):
            step()
        return n / (time.perf_counter() - start)

    # The same update as a plain torch loop (CleanRL's structure): two critic modules, three optimizers.
    def mlp(inp, out):
        return nn.Sequential(
            nn.Linear(inp, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, out)
        )

    actor, q1, q2 = mlp(3, 2), mlp(4, 1), mlp(4, 1)
    q1_target, q2_target = mlp(4, 1), mlp(4, 1)
    q1_target.load_state_dict(q1.state_dict())
    q2_target.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    q_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=1e-3)
    pi_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    a_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in minibatch.items() if k in data}

    def sample(obs):
        mean, log_std = actor(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(-20, 2)
        u = mean + log_std.exp() * torch.randn_like(mean)
        logp = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp

    def plain_step():
        obs, act, rew, disc, nxt = t[SB.OBS], t[SB.ACTIONS] / 2.0, t[SB.REWARDS], t[SB.DISCOUNTS], t[NEXT_OBS]
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_a, next_logp = sample(nxt)
            x = torch.cat([nxt, next_a], -1)
            next_q = torch.min(q1_target(x), q2_target(x)).squeeze(-1) - alpha * next_logp
            y = rew + disc * next_q
        x = torch.cat([obs, act], -1)
        q_loss = 0.5 * (F.mse_loss(q1(x).squeeze(-1), y) + F.mse_loss(q2(x).squeeze(-1), y))
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        a, logp = sample(obs)
        x = torch.cat([obs, a], -1)
        pi_loss = (alpha * logp - torch.min(q1(x), q2(x)).squeeze(-1)).mean()
        pi_opt.zero_grad()
        pi_loss.backward()
        pi_opt.step()
        a_loss = -(log_alpha * (logp.detach() - 1.0)).mean()
        a_opt.zero_grad()
        a_loss.backward()
        a_opt.step()
        with torch.no_grad():
            for net, target in ((q1, q1_target), (q2, q2_target)):
                for p, tp in zip(net.parameters(), target.parameters(), strict=True):
                    tp.lerp_(p, 0.005)

    def rlgear_replay_step():
        policy.learn_on_batch(buffer.sample(batch))

    # Interleaved in short rounds, each variant timed in every round: the machine's load drifts
    # (other jobs share its two cores), so a ratio is taken within a round and the median reported.
    variants = {
        "plain_torch_loop": plain_step,
        "rlgear_learn_on_batch": lambda: policy.learn_on_batch(minibatch),
        "rlgear_replay_step": rlgear_replay_step,
    }
    sb3_step = sb3_train_step(data, batch)
    if sb3_step is not None:
        variants["sb3_train_step"] = sb3_step
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            rates[name].append(timed(step, steps // rounds))
    speeds: dict[str, float] = {name: float(np.median(values)) for name, values in rates.items()}
    plain = np.array(rates["plain_torch_loop"])
    speeds["ratio_learn_on_batch_to_plain"] = float(
        np.median(np.array(rates["rlgear_learn_on_batch"]) / plain)
    )
    speeds["ratio_replay_step_to_plain"] = float(np.median(np.array(rates["rlgear_replay_step"]) / plain))
    if "sb3_train_step" in rates:  # both sample their own replay buffer, then take one gradient step
        speeds["ratio_replay_step_to_sb3"] = float(
            np.median(np.array(rates["rlgear_replay_step"]) / np.array(rates["sb3_train_step"]))
        )
    speeds["rounds"] = rounds
    return speeds


def sb3_train_step(data, batch: int):
    """SB3's own SAC update (``SAC.train(gradient_steps=1)``: replay sampling and one gradient step)
    on the same rows and network sizes, or None without SB3. Why: the wall-clock target is a ratio
    to SB3, and its env+gradient step is mostly this update."""
    try:
        from stable_baselines3 import SAC
        from stable_baselines3.common.logger import configure
    except ImportError:
        return None
    import numpy as np

    from rlgear.blocks.replay_buffers import NEXT_OBS
    from rlgear.sample_batch import SampleBatch as SB

    model = SAC(
        "MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [256, 256]}, learning_rate=1e-3,
        batch_size=batch, seed=0, device="cpu",
    )  # fmt: skip
    model.set_logger(configure(None, []))
    for i in range(len(data[SB.OBS])):
        model.replay_buffer.add(
            data[SB.OBS][i : i + 1], data[NEXT_OBS][i : i + 1], data[SB.ACTIONS][i : i + 1] / 2.0,
            data[SB.REWARDS][i : i + 1], np.zeros(1), [{}],
        )  # fmt: skip
    return lambda: model.train(gradient_steps=1, batch_size=batch)


# ----------------------------------------------------------------------------- the parent


def run_child(library: str, algorithm: str, seed: int, budget: int) -> dict:
    cmd = [sys.executable, __file__, "--child", library, "--algorithm", algorithm]
    cmd += ["--seed", str(seed), "--budget", str(budget)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{library} {algorithm} seed {seed} failed:\n{proc.stderr[-3000:]}")


def summarize(curve: list) -> dict:
    solved = next(((steps, seconds) for steps, seconds, ret in curve if ret >= THRESHOLD), None)
    steps, seconds, final = curve[-1]
    return {
        "final_return": final,
        "train_s": seconds,
        "env_steps": steps,
        "steps_per_s": steps / seconds,
        "solved_env_steps": None if solved is None else solved[0],
        "solved_s": None if solved is None else solved[1],
    }


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student's t-interval for the mean of ``values`` (at least two)."""
    from scipy import stats  # rliable's requirement: in the bench extra

    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * std / math.sqrt(n)
    return mean, mean - half, mean + half


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return None
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def summarize_results(results: dict) -> dict:
    """Per algorithm and library: final return (mean, 95% t-interval), median time to solve, ratios."""
    summary: dict = {}
    for algorithm in sorted({run["algorithm"] for run in results["runs"]}):
        per_library = {}
        for library in ("rlgear", "sb3"):
            runs = [r for r in results["runs"] if r["algorithm"] == algorithm and r["library"] == library]
            if not runs:
                continue
            finals = [r["final_return"] for r in runs]
            solved = [r["solved_s"] for r in runs if r["solved_s"] is not None]
            entry = {
                "seeds": sorted(r["seed"] for r in runs),
                "final_return_mean": sum(finals) / len(finals),
                "final_return_95": list(t_interval(finals)[1:]) if len(finals) > 1 else None,
                "solved_seeds": len(solved),
                "median_solved_s": median(solved),
                "median_solved_env_steps": median(
                    [r["solved_env_steps"] for r in runs if r["solved_env_steps"] is not None]
                ),
                "median_steps_per_s": median([r["steps_per_s"] for r in runs]),
            }
            per_library[library] = entry
        if len(per_library) == 2:
            ours, theirs = per_library["rlgear"], per_library["sb3"]
            interval = theirs["final_return_95"]
            # Per seed, the two libraries ran one after the other: their ratio feels less of the
            # machine's load drift than a ratio of medians over runs hours apart.
            pairs = paired_runs(results["runs"], algorithm)
            per_library["rlgear_vs_sb3"] = {
                "paired_seeds": [seed for seed, _, _ in pairs],
                "median_paired_steps_per_s_ratio": median(
                    [a["steps_per_s"] / b["steps_per_s"] for _, a, b in pairs]
                ),
                "median_paired_solved_s_ratio": median(
                    [a["solved_s"] / b["solved_s"] for _, a, b in pairs if a["solved_s"] and b["solved_s"]]
                ),
                "solved_s_ratio": (
                    ours["median_solved_s"] / theirs["median_solved_s"]
                    if ours["median_solved_s"] and theirs["median_solved_s"]
                    else None
                ),
                "steps_per_s_ratio": ours["median_steps_per_s"] / theirs["median_steps_per_s"],
                "final_return_difference": ours["final_return_mean"] - theirs["final_return_mean"],
                "final_return_within_or_above_sb3_interval": (
                    None if interval is None else ours["final_return_mean"] >= interval[0]
                ),
            }
        summary[algorithm] = per_library
    return summary


def paired_runs(runs: list[dict], algorithm: str) -> list[tuple[int, dict, dict]]:
    """``(seed, rlgear run, SB3 run)`` for each seed both libraries finished."""
    by_seed: dict[int, dict[str, dict]] = {}
    for run in runs:
        if run["algorithm"] == algorithm:
            by_seed.setdefault(run["seed"], {})[run["library"]] = run
    return [(seed, r["rlgear"], r["sb3"]) for seed, r in sorted(by_seed.items()) if len(r) == 2]


def summary_table(summary: dict) -> str:
    """The summary as the markdown table of docs/offpolicy.md."""
    lines = [
        "| algorithm | library | seeds | final return at budget: mean [95% CI] | seeds reaching -200 "
        "| median time to -200 | median env steps to -200 | median env steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for algorithm, per_library in summary.items():
        for library in ("rlgear", "sb3"):
            entry = per_library.get(library)
            if entry is None:
                continue
            interval = entry["final_return_95"]
            ci = "" if interval is None else f" [{interval[0]:.0f}, {interval[1]:.0f}]"
            solved, solved_steps = entry["median_solved_s"], entry["median_solved_env_steps"]
            lines.append(
                f"| {algorithm} | {library} | {len(entry['seeds'])} | {entry['final_return_mean']:.0f}{ci} "
                f"| {entry['solved_seeds']}/{len(entry['seeds'])} "
                f"| {'-' if solved is None else f'{solved:.0f} s'} "
                f"| {'-' if solved_steps is None else f'{solved_steps:.0f}'} "
                f"| {entry['median_steps_per_s']:.1f} |"
            )
    for algorithm, per_library in summary.items():
        ratios = per_library.get("rlgear_vs_sb3")
        if ratios:
            solved, paired = ratios["solved_s_ratio"], ratios["median_paired_solved_s_ratio"]
            lines.append(
                f"\n{algorithm}: rlgear/SB3 median time to -200 "
                f"{'-' if solved is None else f'{solved:.2f}x'}, env steps/s "
                f"{ratios['steps_per_s_ratio']:.2f}x, final return {ratios['final_return_difference']:+.0f}; "
                f"paired per seed ({', '.join(map(str, ratios['paired_seeds']))}), medians: time to -200 "
                f"{'-' if paired is None else f'{paired:.2f}x'}, env steps/s "
                f"{ratios['median_paired_steps_per_s_ratio']:.2f}x"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--algorithms", nargs="+", default=["sac", "td3"])
    parser.add_argument("--skip-solve", action="store_true")
    parser.add_argument(
        "--summarize", action="store_true", help="add the summary to the result file and print it"
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add these seeds' runs to the existing result file (its learner figures are kept)",
    )
    parser.add_argument(
        "--learner-only",
        action="store_true",
        help="measure only the learner's speed and add it to the result file's learner_reruns",
    )
    parser.add_argument("--child", choices=["rlgear", "sb3"])
    parser.add_argument("--algorithm")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    if args.child:
        args.library = args.child
        child(args)
        return
    if args.summarize:
        results = json.loads(RESULT_FILE.read_text())
        results["summary"] = summarize_results(results)
        write(results)
        print(summary_table(results["summary"]))
        return
    if args.learner_only:  # a quieter re-measurement, kept beside the run's own learner figures
        results = json.loads(RESULT_FILE.read_text()) if RESULT_FILE.exists() else {}
        rerun = {"started": _clock_and_load(), **learner_speed()}
        rerun["finished"] = _clock_and_load()
        results.setdefault("learner_reruns", []).append(rerun)
        write(results)
        print(json.dumps(rerun, indent=1))
        return
    if args.append:  # more seeds for an earlier run: same budget, its runs and learner figures kept
        results = json.loads(RESULT_FILE.read_text())
        if results["budget"] != args.budget:
            raise SystemExit(f"{RESULT_FILE}: budget {results['budget']}, not {args.budget}: no --append")
        results.pop("summary", None)  # stale once runs are added: --summarize again
        results.setdefault("appended", []).append(f"seeds {args.seeds}: {_clock_and_load()}")
    else:
        results = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "budget": args.budget,
            "runs": [],
            "started": _clock_and_load(),
        }
        results["learner"] = learner_speed()
        print(json.dumps(results["learner"], indent=1), flush=True)
    if not args.skip_solve:
        for seed in args.seeds:
            for algorithm in args.algorithms:
                order = ("rlgear", "sb3") if seed % 2 == 0 else ("sb3", "rlgear")  # alternates per seed
                for library in order:
                    run = summarize(run_child(library, algorithm, seed, args.budget)["curve"])
                    run.update(library=library, algorithm=algorithm, seed=seed)
                    results["runs"].append(run)
                    print(json.dumps(run), flush=True)
                    write(results)  # after every run: a long run stopped early keeps what it measured
    results["finished"] = _clock_and_load()
    write(results)


def _clock_and_load() -> str:
    """UTC time and the 1/5/15-minute load averages: other jobs share the machine, which the figures feel."""
    loads = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {loads}"


def write(results: dict) -> None:
    RESULT_FILE.parent.mkdir(exist_ok=True)
    RESULT_FILE.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
