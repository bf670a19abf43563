"""Acting cost of the attention memory (``model.attention``) against the LSTM at the same width.

One ``Policy.compute_actions(timestep, state)`` call, carrying the state from call to call as the
evaluator does, for 1 and 8 envs, on each backend (one torch thread, TF as configured):

- ``attention``: ``attention_dim`` 64, 2 heads, 2 layers, ``attention_memory`` 32 (the defaults),
  through its numpy twin (the default, :mod:`rlgear.blocks.attention_inference`);
- ``attention_framework``: the same acting in the framework (``model.numpy_inference: false``);
- ``lstm``: ``lstm_cell_size`` 64 through its numpy twin (the default);
- ``lstm_framework``: the same LSTM acting in the framework (``model.numpy_inference: false``).

All on CartPole's shapes behind a ``[64]`` MLP trunk. The figure is the median over rounds of the
mean ms per call within a round (``--calls`` calls each), the runners taking turns per round so that
a busy neighbour hits all alike. Also printed: the bytes of state each batch row carries.

Usage: python bench/attention_acting.py [--rounds 7] [--calls 200] [--backends torch,tf]
       [--out bench/results/attention_acting.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

MODELS = {
    "attention": {"attention": True, "attention_dim": 64, "attention_memory": 32, "hidden_sizes": [64]},
    "attention_framework": {
        "attention": True,
        "attention_dim": 64,
        "attention_memory": 32,
        "hidden_sizes": [64],
        "numpy_inference": False,
    },
    "lstm": {"lstm": True, "lstm_cell_size": 64, "hidden_sizes": [64]},
    "lstm_framework": {"lstm": True, "lstm_cell_size": 64, "hidden_sizes": [64], "numpy_inference": False},
}


def make_policy(backend: str, model: dict):
    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.spaces import Box, Discrete

    config = config_mod.resolve(
        {
            "algorithm": "ppo",
            "backend": backend,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "model": model,
            "logging": {"tensorboard": False},
        }
    )
    obs_space = Box(np.full(4, -np.inf), np.full(4, np.inf))
    return registry.load_algorithm("ppo").policy_class(backend)(obs_space, Discrete(2), config)


def timestep(rng: np.random.Generator, n: int):
    from rlgear.timestep import StepType, TimeStep

    return TimeStep(
        step_type=np.full(n, StepType.MID, np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=rng.normal(size=(n, 4)).astype(np.float32),
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--backends", default="torch,tf")
    parser.add_argument("--out", type=Path, default=Path("bench/results/attention_acting.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    results = {}
    for backend in args.backends.split(","):
        for n in (1, 8):
            runners = {}
            for name, model in MODELS.items():
                policy = make_policy(backend, model)
                steps = [timestep(rng, n) for _ in range(16)]
                state = policy.get_initial_state(n)
                for ts in steps:  # warm-up: tracing, compilation, a full memory
                    _, state, _ = policy.compute_actions(ts, state)
                runners[name] = (policy, steps, state)
            times: dict[str, list[float]] = {name: [] for name in runners}
            for _ in range(args.rounds):
                for name, (policy, steps, state) in runners.items():
                    start = time.perf_counter()
                    for i in range(args.calls):
                        _, state, _ = policy.compute_actions(steps[i % len(steps)], state)
                    times[name].append(1000 * (time.perf_counter() - start) / args.calls)
                    runners[name] = (policy, steps, state)
            for name, values in times.items():
                row_bytes = sum(s.nbytes for s in runners[name][2]) // n
                results[f"{backend}/{name}/batch_{n}"] = {
                    "ms_per_call": round(statistics.median(values), 4),
                    "state_bytes_per_row": row_bytes,
                }
                print(f"{backend:5s} {name:15s} batch {n}: {statistics.median(values):.3f} ms/call, "
                      f"state {row_bytes} bytes/row")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"revision": source_revision(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
