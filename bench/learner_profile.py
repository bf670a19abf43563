"""Where one off-policy gradient step's time goes: its matmuls against everything else.

Why: the wall-clock targets of docs/benchmarks.md are ratios against a peer library, and on the
400x300 networks of the zoo's TQC/SAC/TD3 entries a run is mostly gradient steps. This script
says how far a step is from the floor its own arithmetic sets: it times rlgear's
``learn_on_batch`` on a replayed minibatch (random data of the config's sizes, so no env is
needed), profiles it with ``torch.profiler``, adds up the matmul kernels (mm, addmm, bmm,
baddbmm) and compares their speed with a plain ``torch.mm`` of the biggest layer's shape in the
same process. With ``--sb3`` (a tqc, crossq, sac or td3 config of the suite, SB3 and sb3-contrib installed) it
does the same for the peer's ``train()``, its model built as the suite builds it, on a real env's
warm-up data. The ratio of the two step times predicts a run's wall ratio where gradient steps
dominate it, without the hours a full run of a big-network task takes.

    python bench/learner_profile.py configs/tqc-lunarlander-continuous.yaml --sb3

One thread, as the benchmark suite runs each library. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def profiled(step, steps: int) -> dict:
    """ms per step of ``step()``, and the profiled split between matmul kernels and the rest."""
    from torch.profiler import profile

    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    ms = 1000 * (time.perf_counter() - start) / steps
    profiled_steps = max(10, steps // 4)
    with profile() as prof:
        for _ in range(profiled_steps):
            step()
    events = prof.key_averages()
    matmul_us = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    total_us = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {
        "ms_per_step": round(ms, 2),
        "profiled_ms_per_step": round(total_us / profiled_steps / 1000, 2),
        "matmul_ms_per_step": round(matmul_us / profiled_steps / 1000, 2),
        "top_ops_ms_per_step": {e.key: round(e.self_cpu_time_total / profiled_steps / 1000, 3) for e in top},
    }


def plain_matmul_gflops(rows: int, fan_in: int, fan_out: int) -> float:
    """GFLOP/s of one ``torch.mm`` of the biggest layer's shape: what this core does at best here."""
    import torch

    x, w = torch.randn(rows, fan_in), torch.randn(fan_in, fan_out)
    for _ in range(20):
        torch.mm(x, w)
    n = 200
    start = time.perf_counter()
    for _ in range(n):
        torch.mm(x, w)
    return 2 * rows * fan_in * fan_out * n / (time.perf_counter() - start) / 1e9


def rlgear_step(config_path: Path, obs_dim: int, act_dim: int):
    import numpy as np
    import yaml

    from rlgear import config as config_mod
    from rlgear.blocks.replay_buffers import NEXT_OBS, ReplayBuffer
    from rlgear.discovery import registry
    from rlgear.sample_batch import SampleBatch as SB
    from rlgear.spaces import Box

    raw = yaml.safe_load(config_path.read_text())
    raw["logging"] = {"dir": tempfile.mkdtemp(), "tensorboard": False, "progress": "none"}
    trainer_cls = registry.load_algorithm(raw["algorithm"])
    config = config_mod.resolve(raw, training_class=trainer_cls.config_class)
    obs_space = Box(np.full(obs_dim, -5.0, np.float32), np.full(obs_dim, 5.0, np.float32))
    act_space = Box(np.full(act_dim, -1.0, np.float32), np.full(act_dim, 1.0, np.float32))
    policy = trainer_cls.policy_class("torch")(obs_space, act_space, config)
    rng = np.random.default_rng(0)
    rows = 20_000
    buffer = ReplayBuffer(rows, seed=0)
    buffer.add(
        SB(
            {
                SB.OBS: rng.uniform(-1, 1, (rows, obs_dim)).astype(np.float32),
                SB.ACTIONS: rng.uniform(-1, 1, (rows, act_dim)).astype(np.float32),
                SB.REWARDS: rng.normal(size=rows).astype(np.float32),
                SB.DISCOUNTS: np.full(rows, config.training.gamma, np.float32),
                NEXT_OBS: rng.uniform(-1, 1, (rows, obs_dim)).astype(np.float32),
            }
        )
    )
    batch = int(config.training.train_batch_size)
    return (lambda: policy.learn_on_batch(buffer.sample(batch))), config


def suite_task(config_path: Path):
    """The ``bench/suite.py`` task that runs this config file, or None."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from suite_tasks import TASKS

    return next((t for t in TASKS if t.rlgear_config == config_path.name), None)


def sb3_step(config_path: Path):
    """The peer's ``train()`` for one gradient step, its model built exactly as ``bench/suite.py``
    builds it for this config's task (sb3-contrib's TQC/CrossQ, SB3's SAC/TD3, the zoo's keyword
    arguments), after a short warm-up of real env steps to fill its replay buffer."""
    task = suite_task(config_path)
    if task is None or task.algorithm not in ("tqc", "crossq", "sac", "td3"):
        raise SystemExit(f"--sb3: {config_path.name} is not an off-policy task of bench/suite_tasks.py")
    import torch
    from _suite_child import _sb3_kwargs, sb3_algorithm
    from stable_baselines3.common.env_util import make_vec_env

    kwargs = _sb3_kwargs(task, task.budget)
    kwargs.update(learning_starts=1000, train_freq=1, gradient_steps=1)
    env = make_vec_env(task.env, n_envs=task.sb3.get("n_envs", 1), seed=0)
    model = sb3_algorithm(task.algorithm)("MlpPolicy", env, seed=0, verbose=0, device="cpu", **kwargs)
    model.learn(1100)
    torch.set_num_threads(1)
    batch = int(kwargs.get("batch_size", model.batch_size))
    return lambda: model.train(gradient_steps=1, batch_size=batch)


def env_dims(env_name: str) -> tuple[int, int]:
    """Observation and action sizes of a gymnasium env with flat Box spaces."""
    import gymnasium as gym

    env = gym.make(env_name)
    try:
        return int(env.observation_space.shape[0]), int(env.action_space.shape[0])
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="an off-policy run config (its model and training sizes)")
    parser.add_argument("--obs-dim", type=int, help="observation size (default: the config's env's)")
    parser.add_argument("--act-dim", type=int, help="action size (default: the config's env's)")
    parser.add_argument("--steps", type=int, default=200, help="timed gradient steps (default 200)")
    parser.add_argument("--sb3", action="store_true", help="also profile SB3's train() on the config's env")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    if args.obs_dim is None or args.act_dim is None:
        import yaml

        obs_dim, act_dim = env_dims(yaml.safe_load(args.config.read_text())["env"]["name"])
        args.obs_dim = args.obs_dim or obs_dim
        args.act_dim = args.act_dim or act_dim
    step, config = rlgear_step(args.config, args.obs_dim, args.act_dim)
    # the critics' layers where they have their own sizes (crossq), else the shared ones
    sizes = list(getattr(config.training, "critic_hidden_sizes", None) or config.model.hidden_sizes)
    batch = int(config.training.train_batch_size)
    report = {
        "config": str(args.config),
        "rlgear": profiled(step, args.steps),
        "plain_mm_gflops": round(plain_matmul_gflops(batch, sizes[0], sizes[-1]), 1),
        "torch": torch.__version__,
    }
    if args.sb3:
        report["sb3"] = profiled(sb3_step(args.config), args.steps)
        report["step_ratio_rlgear_over_sb3"] = round(
            report["rlgear"]["ms_per_step"] / report["sb3"]["ms_per_step"], 2
        )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
