"""Conv-net PPO on MinAtar Breakout: rlgear against Stable-Baselines3's PPO ``CnnPolicy``, same run.

Both train the same network with the same hyperparameters for the same env steps,
each in a fresh process on one torch thread, one library after the other (the order
alternates per seed, so drifting machine load hits both alike):

* network: the MinAtar paper's (Young & Tian 2019): conv 16 filters 3x3 stride 1 (no
  padding, ReLU) on the 10x10x4 frame, flatten, 128 ReLU units, then the policy and
  value heads (one trunk for both); orthogonal init (sqrt 2 hidden, 0.01 policy, 1 value).
  rlgear: ``configs/ppo-minatar-breakout.yaml`` (``conv_filters: [[16, 3, 1]]``,
  ``hidden_sizes: [128]``, ``vf_share_layers: true``). SB3: ``CnnPolicy`` with
  ``MinAtarCNN`` below as features extractor (conv + linear 128) and ``net_arch=[]``.
* PPO: 8 envs x 128 steps, 4 epochs of 256-row minibatches, lr 1e-3, gamma 0.99,
  GAE 0.95, clip 0.2, entropy 0.01, value 0.5, gradient clip 0.5, advantages normalised.
  The value term is the same in both losses: SB3's is ``vf_coef * mean((V - R)^2)``, rlgear's
  ``vf_loss_coeff * 0.5 * mean((V - R)^2)`` (the PPO paper's, as RLlib), so rlgear runs with
  ``training.vf_loss_coeff=1.0`` (``VF_LOSS_COEFF``) for SB3's ``vf_coef=0.5``; the config
  file's 0.5 would weigh the value loss half as much as SB3 does.
* score: the mean return of the last 100 training episodes at the end of the budget
  (rlgear's ``episode_return_mean``, SB3's ``ep_info_buffer``); wall clock from
  process launch to the end of training (imports included), and the child's CPU time
  (user + system, from ``getrusage``) over the same span: on a machine shared with other
  jobs the wall clock of one run moved by 3x between runs, its CPU time far less.

Writes ``bench/results/vision.json``.

Usage: python bench/vision.py [--budget 500000] [--seeds 0]
Needs: pip install -e ".[torch,bench,minatar]"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULT_FILE = HERE / "results" / "vision.json"
CONFIG = ROOT / "configs" / "ppo-minatar-breakout.yaml"
ENV_ID = "MinAtar/Breakout-v1"
PPO = {
    "n_envs": 8,
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
}
#: rlgear's value loss is 0.5 * MSE, SB3's the plain MSE: twice the coefficient is the same loss.
VF_LOSS_COEFF = 2 * PPO["vf_coef"]


# ----------------------------------------------------------------------------- the children


def run_rlgear(seed: int, budget: int) -> dict:
    import rlgear

    result = rlgear.train(
        CONFIG,
        overrides=[
            f"seed={seed}",
            f"stop={{timesteps_total: {budget}}}",
            f"training.vf_loss_coeff={VF_LOSS_COEFF}",
            "logging.dir=/tmp/rlgear-bench-vision",
            "logging.tensorboard=false",
            "logging.progress=none",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
        ],
    )
    return {
        "final_return": float(result["episode_return_mean"]),
        "timesteps": int(result["timesteps_total"]),
        "train_time_s": float(result["time_total_s"]),
    }


def run_sb3(seed: int, budget: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from minatar.gym import register_envs
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    torch.set_num_threads(1)
    register_envs()

    class MinAtarCNN(BaseFeaturesExtractor):
        """Conv 16x3x3 stride 1 (channels-last input permuted to NCHW), flatten, linear 128, ReLU."""

        def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128):
            super().__init__(observation_space, features_dim)
            height, width, channels = observation_space.shape
            self.cnn = nn.Sequential(nn.Conv2d(channels, 16, 3, 1), nn.ReLU(), nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(16 * (height - 2) * (width - 2), features_dim), nn.ReLU())

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            return self.linear(self.cnn(observations.permute(0, 3, 1, 2)))

    settings = dict(PPO)
    env = make_vec_env(ENV_ID, n_envs=settings.pop("n_envs"), seed=seed)
    model = SB3PPO(
        "CnnPolicy",
        env,
        seed=seed,
        device="cpu",
        policy_kwargs={
            "features_extractor_class": MinAtarCNN,
            "net_arch": [],
            "normalize_images": False,  # bool frames, already 0/1
        },
        verbose=0,
        **settings,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=budget)
    train_time = time.perf_counter() - start
    returns = [info["r"] for info in model.ep_info_buffer]
    return {
        "final_return": float(np.mean(returns)),
        "timesteps": int(model.num_timesteps),
        "train_time_s": train_time,
    }


# ----------------------------------------------------------------------------- the driver


def launch(lib: str, seed: int, budget: int) -> dict:
    env = {
        **os.environ,
        "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    args = [sys.executable, __file__, "--child", lib, "--seed", str(seed), "--budget", str(budget)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children run one at a time
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{lib} seed {seed} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {**json.loads(lines[-1].removeprefix("RESULT ")), "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--child", choices=["rlgear", "sb3"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--append",
        action="store_true",
        help="add these seeds' runs to the existing result file (same budget) and redo its summary",
    )
    args = parser.parse_args()
    if args.child:
        out = (run_rlgear if args.child == "rlgear" else run_sb3)(args.seed, args.budget)
        print("RESULT " + json.dumps(out), flush=True)
        return

    load_before = os.getloadavg()[0]
    earlier = json.loads(RESULT_FILE.read_text()) if args.append else None
    if earlier is not None and earlier["budget_env_steps"] != args.budget:
        raise SystemExit(
            f"{RESULT_FILE}: budget {earlier['budget_env_steps']}, not {args.budget}: no --append"
        )
    runs = []
    for seed in args.seeds:
        order = ["rlgear", "sb3"] if seed % 2 == 0 else ["sb3", "rlgear"]
        for lib in order:
            run = {"lib": lib, "seed": seed, **launch(lib, seed, args.budget)}
            print(json.dumps(run), flush=True)
            runs.append(run)
    command = f"python bench/vision.py --budget {args.budget} --seeds {' '.join(map(str, args.seeds))}"
    load = {"before": load_before, "after": os.getloadavg()[0]}
    appended = []
    if earlier is not None:  # the earlier runs first; each addition keeps its own command and load
        appended = [
            *earlier.get("appended", []),
            {"command": command + " --append", "load_average_1min": load},
        ]
        command, load, runs = earlier["command"], earlier["load_average_1min"], [*earlier["runs"], *runs]
    summary = {}
    for lib in ("rlgear", "sb3"):
        mine = [r for r in runs if r["lib"] == lib]
        summary[lib] = {
            "final_return_mean": sum(r["final_return"] for r in mine) / len(mine),
            "wall_s_mean": sum(r["wall_s"] for r in mine) / len(mine),
            "cpu_s_mean": sum(r["cpu_s"] for r in mine) / len(mine),
        }
    summary["return_ratio"] = summary["rlgear"]["final_return_mean"] / summary["sb3"]["final_return_mean"]
    summary["wall_clock_ratio"] = summary["rlgear"]["wall_s_mean"] / summary["sb3"]["wall_s_mean"]
    summary["cpu_time_ratio"] = summary["rlgear"]["cpu_s_mean"] / summary["sb3"]["cpu_s_mean"]
    report = {
        "benchmark": "conv PPO on MinAtar/Breakout-v1, rlgear vs SB3 CnnPolicy (same net and hyperparameters)",
        "command": command,
        "budget_env_steps": args.budget,
        "ppo": PPO,
        "rlgear_vf_loss_coeff": VF_LOSS_COEFF,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_1min": load,
        **({"appended": appended} if appended else {}),
        "runs": runs,
        "summary": summary,
    }
    RESULT_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULT_FILE.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
