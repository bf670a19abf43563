"""TF vs torch: PPO learner throughput and per-call acting latency, as ratios from one run.

Each measurement runs in a fresh subprocess per backend (so the other
framework is never loaded), with one framework thread (the default
``workers.num_cpus_for_driver``); repeats alternate torch, tf, torch, tf ...
and the figures are medians.

* learner: ``learn_on_batch`` on one 4096-sample PPO batch (CartPole spaces,
  64x64 tanh MLP, ``--epochs`` epochs of ``--minibatch``-row minibatches, the
  same on both backends), after one warm-up call that traces TF's graph.
  Reported as samples/s = 4096 / seconds per ``learn_on_batch`` call.
* acting: seconds per ``compute_actions`` call for 8 envs (one TimeStep of 8
  observations), through the numpy twin (``model.numpy_inference: true``, the
  default) and through the framework (``false``).

Issue 3's target: TF within 1.5x of torch on both. Usage:
``python bench/backends.py [--repeats 3] [--minibatch 64] [--epochs 10]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BATCH = 4096
ENVS = 8


def child(backend: str, minibatch: int, epochs: int) -> dict[str, Any]:
    """Measure one backend in this (fresh) process."""
    import numpy as np

    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.sample_batch import SampleBatch as SB
    from rlgear.spaces import Box, Discrete
    from rlgear.timestep import StepType, TimeStep

    obs_space, act_space = Box(np.full(4, -np.inf), np.full(4, np.inf)), Discrete(2)

    def make(numpy_inference: bool):
        raw = {
            "algorithm": "ppo",
            "backend": backend,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "model": {"hidden_sizes": [64, 64], "numpy_inference": numpy_inference},
            "training": {"train_batch_size": BATCH, "sgd_minibatch_size": minibatch, "num_sgd_iter": epochs},
        }
        trainer_cls = registry.load_algorithm("ppo")
        config = config_mod.resolve(raw, training_class=trainer_cls.config_class)
        return trainer_cls.policy_class(backend)(obs_space, act_space, config)

    registry.load_backend(backend)().setup(1, 0)
    rng = np.random.default_rng(0)

    def timestep(n: int) -> TimeStep:
        return TimeStep(
            step_type=np.full(n, StepType.MID, dtype=np.int32),
            reward=np.zeros(n, dtype=np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=rng.normal(size=(n, 4)).astype(np.float32),
            prev_action=np.zeros(n, dtype=np.int64),
            env_id=np.arange(n, dtype=np.int32),
        )

    policy = make(numpy_inference=True)
    step = timestep(BATCH)
    actions, _, extras = policy.compute_actions(step)
    batch = SB(
        {
            SB.OBS: step.observation,
            SB.ACTIONS: actions,
            SB.ACTION_LOGP: extras[SB.ACTION_LOGP],
            SB.VF_PREDS: extras[SB.VF_PREDS],
            SB.ADVANTAGES: rng.normal(size=BATCH).astype(np.float32),
            SB.VALUE_TARGETS: rng.normal(size=BATCH).astype(np.float32),
        }
    )
    policy.learn_on_batch(batch)  # warm-up: TF traces its learn step here
    learn_times = []
    for _ in range(3):
        start = time.perf_counter()
        policy.learn_on_batch(batch)
        learn_times.append(time.perf_counter() - start)

    latency = {}
    for name, numpy_inference in (("numpy_twin", True), ("framework", False)):
        actor = make(numpy_inference)
        step = timestep(ENVS)
        for _ in range(50):  # warm-up (TF traces its acting function)
            actor.compute_actions(step)
        blocks = []
        for _ in range(5):
            calls = 400
            start = time.perf_counter()
            for _ in range(calls):
                actor.compute_actions(step)
            blocks.append((time.perf_counter() - start) / calls)
        latency[name] = statistics.median(blocks)
    return {
        "learn_on_batch_s": statistics.median(learn_times),
        "learner_samples_per_s": BATCH / statistics.median(learn_times),
        "act_latency_us": {k: v * 1e6 for k, v in latency.items()},
        "frameworks_loaded": sorted(m for m in ("torch", "tensorflow") if m in sys.modules),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--minibatch", type=int, default=64, help="rows per SGD minibatch (PPO default)")
    parser.add_argument("--epochs", type=int, default=10, help="SGD epochs per batch (PPO default)")
    parser.add_argument("--child", choices=["torch", "tf"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.minibatch, args.epochs)))
        return

    runs: dict[str, list[dict[str, Any]]] = {"torch": [], "tf": []}
    env = {**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    for _ in range(args.repeats):
        for backend in ("torch", "tf"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", backend, "--minibatch", str(args.minibatch),
                 "--epochs", str(args.epochs)],
                capture_output=True, text=True, check=True, env=env,
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["frameworks_loaded"] == [{"tf": "tensorflow"}.get(backend, backend)], result
            runs[backend].append(result)

    def median(backend: str, *path: str) -> float:
        values = []
        for run in runs[backend]:
            value: Any = run
            for key in path:
                value = value[key]
            values.append(value)
        return statistics.median(values)

    summary: dict[str, Any] = {
        "setup": {
            "batch": BATCH, "minibatch": args.minibatch, "epochs": args.epochs, "model": "64x64 tanh",
            "act_envs": ENVS, "repeats": args.repeats, "threads": 1,
        },
    }  # fmt: skip
    for backend in ("torch", "tf"):
        summary[backend] = {
            "learner_samples_per_s": round(median(backend, "learner_samples_per_s")),
            "act_latency_us_numpy_twin": round(median(backend, "act_latency_us", "numpy_twin"), 1),
            "act_latency_us_framework": round(median(backend, "act_latency_us", "framework"), 1),
        }
    torch_s, tf_s = summary["torch"], summary["tf"]
    summary["tf_vs_torch"] = {
        # > 1 means TF is slower; the target is <= 1.5 on each.
        "learner_time_ratio": round(torch_s["learner_samples_per_s"] / tf_s["learner_samples_per_s"], 2),
        "act_latency_ratio_numpy_twin": round(
            tf_s["act_latency_us_numpy_twin"] / torch_s["act_latency_us_numpy_twin"], 2
        ),
        "act_latency_ratio_framework": round(
            tf_s["act_latency_us_framework"] / torch_s["act_latency_us_framework"], 2
        ),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
