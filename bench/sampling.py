"""Sampling throughput: rlgear's in-process evaluator vs raw env stepping and a hand-written torch loop.

Everything steps 8 CartPole-v1 envs in the same process, on one torch thread:

- ``raw_sync`` / ``raw_native``: gymnasium's SyncVectorEnv / CartPoleVectorEnv (the
  env's vector entry point) with random actions and no policy: the ceiling;
- ``evaluator_sync`` / ``evaluator_native``: rlgear's evaluator (PPO, the 64x64 tanh
  MLP) on the same vector env (``env.vectorization`` sync / native). It also runs the
  value head, computes log-probs, records every column of the batch, tracks episodes
  and postprocesses (GAE);
- ``hand_written``: the naive loop a user would write on a SyncVectorEnv:
  ``torch.distributions.Categorical`` on the logits, no value head, no recording.

They alternate in short chunks (about 2k env steps each) so that a busy neighbour or a
CPU-frequency change hits all alike; each rate is total steps over total time, and the
per-round ratios show the spread. Targets: each evaluator at >= 0.75x raw stepping of
its own vector env; the sync evaluator at >= 1.5x the hand-written loop.

With envpool installed (``pip install 'rlgear[envpool]'``), ``raw_envpool`` and
``evaluator_envpool`` do the same on envpool's C++ CartPole pool (``env.adapter: envpool``).

Usage: python bench/sampling.py [--rounds 20] [--chunk 2048] [--no-envpool]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

NUM_ENVS = 8
VS_RAW_TARGET = 0.75
VS_HAND_WRITTEN_TARGET = 1.5


class RawStepping:
    """The vector env alone: random actions drawn in one numpy call per step."""

    def __init__(self, mode: str) -> None:
        self.envs = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode=mode)
        self.envs.reset(seed=0)
        self.rng = np.random.default_rng(0)

    def run(self, steps: int) -> int:
        for _ in range(steps // NUM_ENVS):
            self.envs.step(self.rng.integers(0, 2, NUM_ENVS))
        return steps // NUM_ENVS * NUM_ENVS

    def stop(self) -> None:
        self.envs.close()


class RawEnvPool:
    """envpool's CartPole pool alone (as the envpool adapter builds it), random actions."""

    def __init__(self) -> None:
        from rlgear.plugins.envs.envpool_env import EnvPoolVectorEnv

        self.envs = EnvPoolVectorEnv("CartPole-v1", NUM_ENVS, {})
        self.envs.reset(seed=0)
        self.rng = np.random.default_rng(0)

    def run(self, steps: int) -> int:
        for _ in range(steps // NUM_ENVS):
            self.envs.step(self.rng.integers(0, 2, NUM_ENVS))
        return steps // NUM_ENVS * NUM_ENVS

    def stop(self) -> None:
        self.envs.close()


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

    def stop(self) -> None:
        self.envs.close()


class RLGearEvaluator:
    def __init__(self, chunk: int, vectorization: str, adapter: str = "gymnasium") -> None:
        from rlgear import config as config_mod
        from rlgear.discovery import registry

        config = config_mod.resolve(
            {
                "algorithm": "ppo",
                "seed": 0,
                "env": {"name": "CartPole-v1", "vectorization": vectorization, "adapter": adapter},
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

    def stop(self) -> None:
        self.trainer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--no-envpool", action="store_true", help="leave envpool out even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runners = {
        "raw_sync": RawStepping("sync"),
        "raw_native": RawStepping("vector_entry_point"),
        "hand_written": HandWrittenLoop(),
        "evaluator_sync": RLGearEvaluator(args.chunk, "sync"),
        "evaluator_native": RLGearEvaluator(args.chunk, "native"),
    }
    pairs = {  # ratio name: (numerator, denominator, target)
        "evaluator_sync_vs_raw_sync": ("evaluator_sync", "raw_sync", VS_RAW_TARGET),
        "evaluator_native_vs_raw_native": ("evaluator_native", "raw_native", VS_RAW_TARGET),
        "evaluator_sync_vs_hand_written": ("evaluator_sync", "hand_written", VS_HAND_WRITTEN_TARGET),
        "evaluator_native_vs_hand_written": ("evaluator_native", "hand_written", None),
    }
    if not args.no_envpool and importlib.util.find_spec("envpool") is not None:
        runners["raw_envpool"] = RawEnvPool()
        runners["evaluator_envpool"] = RLGearEvaluator(args.chunk, "auto", adapter="envpool")
        pairs["evaluator_envpool_vs_raw_envpool"] = ("evaluator_envpool", "raw_envpool", VS_RAW_TARGET)
    for runner in runners.values():
        runner.run(args.chunk)  # warm-up
    totals = {name: [0, 0.0] for name in runners}
    round_ratios: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(args.rounds):
        rates = {}
        for name, runner in runners.items():
            start = time.perf_counter()
            steps = runner.run(args.chunk)
            elapsed = time.perf_counter() - start
            totals[name][0] += steps
            totals[name][1] += elapsed
            rates[name] = steps / elapsed
        for ratio, (num, den, _) in pairs.items():
            round_ratios[ratio].append(rates[num] / rates[den])
    for runner in runners.values():
        runner.stop()
    rate = {name: steps / seconds for name, (steps, seconds) in totals.items()}
    ratios = {}
    for ratio, (num, den, target) in pairs.items():
        spread = round_ratios[ratio]
        value = rate[num] / rate[den]
        ratios[ratio] = {
            "ratio": round(value, 2),
            "target": target,
            "met": None if target is None else value >= target,
            "round_median": round(statistics.median(spread), 2),
            "round_min_max": [round(min(spread), 2), round(max(spread), 2)],
        }
    print(
        json.dumps(
            {"steps_per_s": {name: round(r) for name, r in rate.items()}, "ratios": ratios},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
