"""Sampling throughput: rlgear's in-process evaluator vs a hand-written torch loop.

Both step 8 CartPole-v1 envs (gymnasium SyncVectorEnv) with a 64x64 tanh MLP
policy on one torch thread, measured in the same process, interleaved
(baseline, rlgear, baseline, ...) so a busy neighbour hits both alike; the
report gives the median of the paired ratios and of each rate. The baseline is the naive loop a user would write:
``torch.distributions.Categorical`` on the logits, no value head, no
recording. rlgear's evaluator also runs the value head, computes log-probs,
records every column of the batch, tracks episodes and postprocesses (GAE).

Usage: python bench/sampling.py [--steps 40000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import torch
from torch import nn

NUM_ENVS = 8


def hand_written_loop(total_steps: int) -> float:
    envs = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode="sync")
    net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    obs, _ = envs.reset(seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(total_steps // NUM_ENVS):
            logits = net(torch.as_tensor(obs))
            actions = torch.distributions.Categorical(logits=logits).sample()
            obs, _, _, _, _ = envs.step(actions.numpy())
    elapsed = time.perf_counter() - start
    envs.close()
    return total_steps / elapsed


def rlgear_evaluator(total_steps: int) -> float:
    from rlgear import config as config_mod
    from rlgear import registry

    config = config_mod.resolve(
        {
            "algorithm": "ppo",
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {"num_envs_per_worker": NUM_ENVS, "rollout_fragment_length": 256},
        }
    )
    trainer = registry.load_algorithm("ppo")(config)
    worker = trainer.workers.local_worker
    worker.sample()  # warm-up
    worker.pop_metrics()
    start = time.perf_counter()
    steps = 0
    while steps < total_steps:
        _, count = worker.sample_with_count()
        steps += count
    elapsed = time.perf_counter() - start
    trainer.stop()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline, ours = [], []
    for _ in range(args.repeats):
        baseline.append(hand_written_loop(args.steps))
        ours.append(rlgear_evaluator(args.steps))
    ratios = [o / b for o, b in zip(ours, baseline, strict=True)]
    result = {
        "hand_written_steps_per_s": round(statistics.median(baseline)),
        "rlgear_steps_per_s": round(statistics.median(ours)),
        "ratio": round(statistics.median(ratios), 2),
        "target_ratio": 1.5,
        "all_baseline": [round(x) for x in baseline],
        "all_rlgear": [round(x) for x in ours],
        "all_ratios": [round(x, 2) for x in ratios],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
