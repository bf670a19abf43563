"""Sampling throughput: rlgear's in-process evaluator vs a hand-written torch loop.

Both step 8 CartPole-v1 envs (gymnasium SyncVectorEnv) with a 64x64 tanh MLP
policy on one torch thread, in the same process. The baseline is the naive
loop a user would write: ``torch.distributions.Categorical`` on the logits, no
value head, no recording. rlgear's evaluator also runs the value head,
computes log-probs, records every column of the batch, tracks episodes and
postprocesses (GAE).

The two alternate in short chunks (about 2k env steps each) so that a busy
neighbour or a CPU-frequency change hits both alike; the ratio is total steps
over total time of each, and the per-round ratios show the spread.

Usage: python bench/sampling.py [--rounds 20] [--chunk 2048]
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


class HandWrittenLoop:
    def __init__(self) -> None:
        self.envs = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode="sync")
        self.net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
        self.obs, _ = self.envs.reset(seed=0)

    def run(self, steps: int) -> int:
        with torch.no_grad():
            for _ in range(steps // NUM_ENVS):
                logits = self.net(torch.as_tensor(self.obs))
                actions = torch.distributions.Categorical(logits=logits).sample()
                self.obs, _, _, _, _ = self.envs.step(actions.numpy())
        return steps // NUM_ENVS * NUM_ENVS


class RLGearEvaluator:
    def __init__(self, chunk: int) -> None:
        from rlgear import config as config_mod
        from rlgear.discovery import registry

        config = config_mod.resolve(
            {
                "algorithm": "ppo",
                "seed": 0,
                "env": {"name": "CartPole-v1"},
                "workers": {"num_envs_per_worker": NUM_ENVS, "rollout_fragment_length": chunk // NUM_ENVS},
                "logging": {"tensorboard": False},
            }
        )
        self.trainer = registry.load_algorithm("ppo")(config)
        self.worker = self.trainer.workers.local_worker

    def run(self, steps: int) -> int:
        done = 0
        while done < steps:
            _, count = self.worker.sample_with_count()
            done += count
        return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline, ours = HandWrittenLoop(), RLGearEvaluator(args.chunk)
    baseline.run(args.chunk), ours.run(args.chunk)  # warm-up
    totals = {"baseline": [0, 0.0], "rlgear": [0, 0.0]}
    ratios = []
    for _ in range(args.rounds):
        rates = {}
        for name, runner in (("baseline", baseline), ("rlgear", ours)):
            start = time.perf_counter()
            steps = runner.run(args.chunk)
            elapsed = time.perf_counter() - start
            totals[name][0] += steps
            totals[name][1] += elapsed
            rates[name] = steps / elapsed
        ratios.append(rates["rlgear"] / rates["baseline"])
    ours.trainer.stop()
    base_rate = totals["baseline"][0] / totals["baseline"][1]
    our_rate = totals["rlgear"][0] / totals["rlgear"][1]
    print(
        json.dumps(
            {
                "hand_written_steps_per_s": round(base_rate),
                "rlgear_steps_per_s": round(our_rate),
                "ratio": round(our_rate / base_rate, 2),
                "target_ratio": 1.5,
                "round_ratios_median": round(statistics.median(ratios), 2),
                "round_ratios_min_max": [round(min(ratios), 2), round(max(ratios), 2)],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
