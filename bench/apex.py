"""Ape-X sampling throughput: env-steps/s with 1 and 2 rollout workers, as ratios to in-process DQN.

Settings, all in one process and one Ray session, taking turns in short rounds so that load
from other processes hits each alike (figures: total env steps over total time per setting):

- ``dqn_in_process_sampling``: the reference, a DQN trainer's in-process evaluator (8 CartPole-v1
  envs, the 128x128 Q-network of configs/apex-cartpole.yaml, epsilon-greedy, 3-step
  postprocessing) sampling fragments of 64 env steps, nothing else;
- ``dqn_in_process_training``: DQN's whole training step in-process (sampling and 8 gradient
  steps of 64 rows per 64 env steps), the non-distributed run Ape-X replaces;
- ``apex_sampling_N``: Ape-X with N rollout workers before learning starts: the workers' whole
  pipeline (sampling, TD errors for the initial priorities, sending to the shards);
- ``apex_training_N``: Ape-X with N workers while learning at the same intensity as DQN above.

The machine has 2 cores shared with other jobs: 2 workers plus the learner plus the shards
oversubscribe it, so the ratios show the overhead and overlap on a small box, not Ape-X's
scaling on a cluster.

Usage: python bench/apex.py [--rounds 4] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

RESULTS = Path(__file__).resolve().parent / "results" / "apex.json"


def config_for(algorithm: str, num_workers: int, learning_starts: int) -> Any:
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    raw = {
        "algorithm": algorithm,
        "seed": 0,
        "env": {"name": "CartPole-v1", "vectorization": "auto"},
        "model": {"hidden_sizes": [128, 128]},
        "workers": {
            "num_workers": num_workers,
            "num_envs_per_worker": 8,
            "rollout_fragment_length": 8,
            "ray": {"worker_start_timeout_s": 600.0},
        },
        "training": {
            "train_batch_size": 64,
            "training_intensity": 8,
            "learning_starts": learning_starts,
            "buffer_size": 200_000,
            "min_env_steps_per_iteration": 1024,  # results (and episode metrics) per 1024 env steps
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }
    return config_mod.resolve(raw, training_class=registry.load_algorithm(algorithm).config_class)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0, help="per setting per round")
    args = parser.parse_args()

    from rlgear.discovery import registry
    from rlgear.distributed.ray_session import init_ray, shutdown_ray

    init_ray(num_cpus=6)  # logical CPUs: all 4 Ape-X trainers (6 workers) exist; one runs at a time
    dqn_cls, apex_cls = registry.load_algorithm("dqn"), registry.load_algorithm("apex")
    never = 10**9
    trainers = {
        "dqn_in_process_training": dqn_cls(config_for("dqn", 0, 1000)),
        "apex_sampling_1": apex_cls(config_for("apex", 1, never)),
        "apex_sampling_2": apex_cls(config_for("apex", 2, never)),
        "apex_training_1": apex_cls(config_for("apex", 1, 1000)),
        "apex_training_2": apex_cls(config_for("apex", 2, 1000)),
    }
    sampler = trainers["dqn_in_process_training"].workers.local_worker
    steps = dict.fromkeys(["dqn_in_process_sampling", *trainers], 0)
    seconds = dict.fromkeys(steps, 0.0)
    try:
        for trainer in trainers.values():  # warm-up: past learning_starts, workers and shards busy
            while trainer.timesteps_total < 2000:
                trainer.train()
        for _ in range(args.rounds):
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                steps["dqn_in_process_sampling"] += sampler.sample_with_count()[1]
            seconds["dqn_in_process_sampling"] += time.perf_counter() - start
            sampler.pop_metrics()  # else the DQN trainer would count these steps as its own
            for name, trainer in trainers.items():
                before, start = trainer.timesteps_total, time.perf_counter()
                while time.perf_counter() - start < args.seconds:
                    trainer.train()
                seconds[name] += time.perf_counter() - start
                steps[name] += trainer.timesteps_total - before
    finally:
        for trainer in trainers.values():
            trainer.stop()
        shutdown_ray()
    rates = {name: steps[name] / seconds[name] for name in steps}
    reference = rates["dqn_in_process_sampling"]
    out = {
        "source_revision": source_revision(),
        "cpus": os.cpu_count(),
        "note": "2 cores shared with other jobs; Ape-X's workers, learner and shards oversubscribe them",
        "rounds": args.rounds,
        "seconds_per_setting_per_round": args.seconds,
        "env_steps_per_s": {name: round(rate, 1) for name, rate in rates.items()},
        "ratio_to_dqn_in_process_sampling": {
            name: round(rate / reference, 3) for name, rate in rates.items()
        },
        "ratio_to_dqn_in_process_training": {
            name: round(rate / rates["dqn_in_process_training"], 3) for name, rate in rates.items()
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
