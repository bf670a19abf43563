"""Cost of ``offline.output``: sampling throughput of a PPO CartPole run with and without recording.

Two PPO trainers with the same config (8 CartPole-v1 envs, one torch thread), one of them with
``offline.output``. Each round, each trainer samples a chunk of fragments through its in-process
rollout worker and collects the episode metrics as an iteration does (``standard_metrics``), which
is where the recorded episodes reach the dataset writer and are appended to the HDF5 file: so the
recording side (copies in the sampler, episode assembly, deferred log-probabilities, the driver's
writes) is all in the timed part; learning is not (it is the same with and without). The two
alternate in short chunks so that a busy neighbour hits both alike; each rate is total steps over
total time, and the per-round ratios show the spread. A third trainer records but drops the
episodes at the writer's door (``sampler_side_only``): the cost on the sampling process alone,
without the writer process competing for the CPUs. Target: recording at most 15% slower
(ratio >= 0.85).

Usage: python bench/offline_record.py [--rounds 20] [--chunk 4096] [--save bench/results/offline_record.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._run import source_revision  # noqa: E402

NUM_ENVS = 8
FRAGMENT = 256
TARGET_RATIO = 0.85


def make_trainer(folder: Path, record: bool):
    import torch

    from rlgear import config as config_mod
    from rlgear.discovery import registry

    torch.set_num_threads(1)
    raw = {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": NUM_ENVS, "rollout_fragment_length": FRAGMENT},
        "training": {"train_batch_size": NUM_ENVS * FRAGMENT},
        "logging": {"dir": str(folder / "runs"), "tensorboard": False, "progress": "none"},
    }
    if record:
        raw["offline"] = {"output": str(folder / "dataset")}
    config = config_mod.resolve(raw)
    return registry.load_algorithm("ppo")(config, logdir=folder / ("rec" if record else "plain"))


def sample_chunk(trainer, steps: int) -> tuple[int, float]:
    from rlgear.distributed.rollout_ops import standard_metrics

    worker = trainer.workers.local_worker
    done = 0
    start = time.perf_counter()
    while done < steps:
        _, count = worker.sample_with_count()
        standard_metrics(trainer)  # the recorded episodes go to the dataset writer here
        done += count
    return done, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=4096, help="env steps per trainer per round")
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trainers = {"plain": make_trainer(folder, False), "recording": make_trainer(folder, True)}
        # the sampler side alone: episodes assembled and handed over, the writer never sees them
        sampler_only = trainers["sampler_side_only"] = make_trainer(folder / "sampler_only", True)
        sampler_only.dataset_recorder.add = lambda episodes: None
        try:
            for trainer in trainers.values():  # warm up: first fragments, file creation
                sample_chunk(trainer, args.chunk)
            totals = {name: [0, 0.0] for name in trainers}
            ratios, sampler_ratios = [], []
            for _ in range(args.rounds):
                rates = {}
                for name, trainer in trainers.items():
                    steps, seconds = sample_chunk(trainer, args.chunk)
                    totals[name][0] += steps
                    totals[name][1] += seconds
                    rates[name] = steps / seconds
                ratios.append(rates["recording"] / rates["plain"])
                sampler_ratios.append(rates["sampler_side_only"] / rates["plain"])
            recorder = trainers["recording"].dataset_recorder
        finally:
            for trainer in trainers.values():
                trainer.stop()
        episodes, recorded_steps = recorder.episodes_written, recorder.steps_written
    rate = {name: steps / seconds for name, (steps, seconds) in totals.items()}
    ratio = rate["recording"] / rate["plain"]
    result = {
        "benchmark": "offline_record",
        "revision": source_revision(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "num_envs": NUM_ENVS,
        "rollout_fragment_length": FRAGMENT,
        "rounds": args.rounds,
        "chunk_env_steps": args.chunk,
        "env_steps_per_s_plain": round(rate["plain"], 1),
        "env_steps_per_s_recording": round(rate["recording"], 1),
        "ratio_recording_to_plain": round(ratio, 4),
        "slowdown_percent": round(100 * (1 - ratio), 2),
        "env_steps_per_s_sampler_side_only": round(rate["sampler_side_only"], 1),
        "ratio_sampler_side_only_to_plain": round(rate["sampler_side_only"] / rate["plain"], 4),
        "ratio_sampler_side_only_per_round_median": round(statistics.median(sampler_ratios), 4),
        "ratio_per_round_median": round(statistics.median(ratios), 4),
        "ratio_per_round_min": round(min(ratios), 4),
        "ratio_per_round_max": round(max(ratios), 4),
        "episodes_recorded": episodes,
        "steps_recorded": recorded_steps,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
    }
    print(json.dumps(result, indent=2))
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
