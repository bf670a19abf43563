"""Sampling throughput of a recurrent (LSTM) policy, as a ratio to the MLP policy in the same run.

rlgear's in-process evaluator (PPO, 8 CartPole-v1 envs, one torch thread) samples with:

- ``mlp``: the default 64x64 tanh MLP (numpy acting twin);
- ``lstm``: ``model.lstm`` with ``hidden_sizes: [64]`` and a 64-unit cell (numpy acting twin);
- ``lstm_framework``: the same LSTM acting in torch (``model.numpy_inference: false``), what
  acting would cost without the twin.

Each evaluator records every column (the LSTM's two state-in columns too), tracks episodes,
postprocesses (GAE) and, for the LSTM, cuts the rows into padded sequences of ``max_seq_len``.
The runners alternate in short chunks so that a busy neighbour hits all alike; each rate is
total steps over total time. Target (issue 14): lstm / mlp >= 0.6.

Usage: python bench/lstm.py [--rounds 20] [--chunk 2048] [--out bench/results/lstm.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

NUM_ENVS = 8
TARGET = 0.6


class Sampler:
    def __init__(self, chunk: int, model: dict) -> None:
        from rlgear import config as config_mod
        from rlgear.discovery import registry

        config = config_mod.resolve(
            {
                "algorithm": "ppo",
                "seed": 0,
                "env": {"name": "CartPole-v1"},
                "workers": {"num_envs_per_worker": NUM_ENVS, "rollout_fragment_length": chunk // NUM_ENVS},
                "model": model,
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
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "lstm.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    lstm = {"lstm": True, "lstm_cell_size": 64, "hidden_sizes": [64], "max_seq_len": 20}
    runners = {
        "mlp": Sampler(args.chunk, {}),
        "lstm": Sampler(args.chunk, lstm),
        "lstm_framework": Sampler(args.chunk, {**lstm, "numpy_inference": False}),
    }
    for runner in runners.values():
        runner.run(args.chunk)  # warm-up
    totals = {name: [0, 0.0] for name in runners}
    rounds: dict[str, list[float]] = {"lstm": [], "lstm_framework": []}
    for _ in range(args.rounds):
        rates = {}
        for name, runner in runners.items():
            start = time.perf_counter()
            steps = runner.run(args.chunk)
            elapsed = time.perf_counter() - start
            totals[name][0] += steps
            totals[name][1] += elapsed
            rates[name] = steps / elapsed
        for name in rounds:
            rounds[name].append(rates[name] / rates["mlp"])
    for runner in runners.values():
        runner.stop()
    rate = {name: steps / seconds for name, (steps, seconds) in totals.items()}
    ratios = {
        f"{name}_vs_mlp": {
            "ratio": round(rate[name] / rate["mlp"], 2),
            "target": TARGET if name == "lstm" else None,
            "met": rate[name] / rate["mlp"] >= TARGET if name == "lstm" else None,
            "round_median": round(statistics.median(spread), 2),
            "round_min_max": [round(min(spread), 2), round(max(spread), 2)],
        }
        for name, spread in rounds.items()
    }
    result = {
        "revision": source_revision(),
        "rounds": args.rounds,
        "chunk": args.chunk,
        "steps_per_s": {name: round(r) for name, r in rate.items()},
        "ratios": ratios,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
