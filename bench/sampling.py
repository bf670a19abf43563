"""Sampling throughput: rlgear's in-process evaluator vs raw env stepping and a hand-written torch loop.

Everything steps 8 CartPole-v1 envs in the same process, on one torch thread:

- ``raw_sync`` / ``raw_native``: gymnasium's SyncVectorEnv / CartPoleVectorEnv (the
  env's vector entry point) with random actions and no policy: the ceiling;
- ``evaluator_sync`` / ``evaluator_native``: rlgear's evaluator (PPO, the 64x64 tanh
  MLP) on the same vector env (``env.vectorization`` sync / native). It also runs the
  value head, computes log-probs, records every column of the batch, tracks episodes
  and postprocesses (GAE);
- ``hand_written`` / ``hand_written_native``: the naive loop a user would write on a
  SyncVectorEnv / the native vector env: ``torch.distributions.Categorical`` on the logits, no
  value head, no recording;
- ``numpy_loop_sync`` / ``numpy_loop_native``: the leanest Python loop with the same network, the
  floor of per-step acting: the 64x64 MLP (policy and value fused) in numpy, Gumbel-max sampling on
  noise drawn per fragment, observations, actions, rewards, terminations, truncations and values written
  into preallocated arrays; no TimeStep, no episode bookkeeping, no log-probabilities, no GAE. Its
  ratio to raw stepping is the most any design that acts step by step in Python can reach, and the
  evaluator's ratio to it is how close rlgear comes to that floor.

They alternate in short chunks (about 2k env steps each) so that a busy neighbour or a
CPU-frequency change hits all alike; each rate is total steps over total time, and the
per-round ratios show the spread. Targets: each evaluator at >= 0.75x raw stepping of
its own vector env; the sync evaluator at >= 1.5x the hand-written loop.

With envpool installed (``pip install 'rlgear[envpool]'``), ``raw_envpool`` and
``evaluator_envpool`` do the same on envpool's C++ CartPole pool (``env.adapter: envpool``).

Usage: python bench/sampling.py [--rounds 20] [--chunk 2048] [--num-envs 8] [--no-envpool] [--save FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

NUM_ENVS = 8
VS_RAW_TARGET = 0.75
VS_HAND_WRITTEN_TARGET = 1.5
VS_HAND_WRITTEN_NATIVE_TARGET = 3.0


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


class NumpyLoop:
    """The floor of a step-by-step loop: see the module docstring (``numpy_loop_*``)."""

    def __init__(self, mode: str, fragment: int = 256) -> None:
        self.envs = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode=mode)
        self.obs, _ = self.envs.reset(seed=0)
        rng = self.rng = np.random.default_rng(0)
        n, f = NUM_ENVS, 4
        # [in + 1, out] kernels with the bias as last row; inputs end in a column of ones
        self.kernels = [
            rng.standard_normal((f + 1, 128), dtype=np.float32) * 0.5,
            rng.standard_normal((129, 128), dtype=np.float32) * 0.1,
            rng.standard_normal((129, 3), dtype=np.float32) * 0.1,
        ]
        self.inputs = [np.ones((n, k.shape[0]), dtype=np.float32) for k in self.kernels]
        self.fragment = fragment
        self.columns = {
            "obs": np.zeros((fragment, n, f), np.float32),
            "actions": np.zeros((fragment, n), np.int64),
            "rewards": np.zeros((fragment, n), np.float32),
            "terminated": np.zeros((fragment, n), bool),
            "truncated": np.zeros((fragment, n), bool),
            "values": np.zeros((fragment, n), np.float32),
        }

    def run(self, steps: int) -> int:
        c, (k1, k2, k3), (x1, x2, x3) = self.columns, self.kernels, self.inputs
        obs = self.obs
        noise = None
        for i in range(steps // NUM_ENVS):
            t = i % self.fragment
            if t == 0:
                noise = -np.log(
                    -np.log(self.rng.random((self.fragment, NUM_ENVS, 2), dtype=np.float32) + 1e-12)
                )
            c["obs"][t] = obs
            x1[:, :-1] = obs
            np.tanh(x1 @ k1, out=x2[:, :-1])
            np.tanh(x2 @ k2, out=x3[:, :-1])
            out = x3 @ k3
            c["values"][t] = out[:, 2]
            actions = np.argmax(out[:, :2] + noise[t], axis=-1)
            c["actions"][t] = actions
            obs, reward, terminated, truncated, _ = self.envs.step(actions)
            c["rewards"][t], c["terminated"][t], c["truncated"][t] = reward, terminated, truncated
        self.obs = obs
        return steps // NUM_ENVS * NUM_ENVS

    def stop(self) -> None:
        self.envs.close()


class HandWrittenLoop:
    def __init__(self, mode: str = "sync") -> None:
        self.envs = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode=mode)
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
    global NUM_ENVS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--num-envs", type=int, default=8, help="envs per vector env (default 8)")
    parser.add_argument("--no-envpool", action="store_true", help="leave envpool out even if installed")
    parser.add_argument("--save", metavar="FILE", help="also write the result (JSON) to FILE")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    NUM_ENVS = args.num_envs
    torch.set_num_threads(1)
    runners = {
        "raw_sync": RawStepping("sync"),
        "raw_native": RawStepping("vector_entry_point"),
        "numpy_loop_sync": NumpyLoop("sync"),
        "numpy_loop_native": NumpyLoop("vector_entry_point"),
        "hand_written": HandWrittenLoop(),
        "hand_written_native": HandWrittenLoop("vector_entry_point"),
        "evaluator_sync": RLGearEvaluator(args.chunk, "sync"),
        "evaluator_native": RLGearEvaluator(args.chunk, "native"),
    }
    pairs = {  # ratio name: (numerator, denominator, target)
        "evaluator_sync_vs_raw_sync": ("evaluator_sync", "raw_sync", VS_RAW_TARGET),
        "evaluator_native_vs_raw_native": ("evaluator_native", "raw_native", VS_RAW_TARGET),
        "evaluator_sync_vs_hand_written": ("evaluator_sync", "hand_written", VS_HAND_WRITTEN_TARGET),
        "evaluator_native_vs_hand_written": (
            "evaluator_native",
            "hand_written",
            VS_HAND_WRITTEN_NATIVE_TARGET,
        ),
        # like for like: the same naive loop on the native vector env (its step is cheaper, so the
        # torch loop gains too and this ratio is below the one against the sync loop)
        "evaluator_native_vs_hand_written_native": (
            "evaluator_native",
            "hand_written_native",
            VS_HAND_WRITTEN_NATIVE_TARGET,
        ),
        "numpy_loop_sync_vs_raw_sync": ("numpy_loop_sync", "raw_sync", None),
        "numpy_loop_native_vs_raw_native": ("numpy_loop_native", "raw_native", None),
        "evaluator_sync_vs_numpy_loop_sync": ("evaluator_sync", "numpy_loop_sync", None),
        "evaluator_native_vs_numpy_loop_native": ("evaluator_native", "numpy_loop_native", None),
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
    result = {
        "command": "python bench/sampling.py " + " ".join(sys.argv[1:]),
        "num_envs": NUM_ENVS,
        "load_average_before_after": [load_before, [round(x, 2) for x in os.getloadavg()]],
        "steps_per_s": {name: round(r) for name, r in rate.items()},
        "ratios": ratios,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.save:
        Path(args.save).write_text(text + "\n")


if __name__ == "__main__":
    main()
