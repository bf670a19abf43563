"""Experiment machinery costs, each measured against its baseline in the same run.

1. PBT exploit: seconds to give a live PPO trainer a donor's config and weights
   (``reset_config`` + restore from the in-memory snapshot, what rlgear's PBT
   does) against destroying the trainer, building a new one and restoring it
   (what a scheduler does when trainers lack ``reset_config``).
2. Runner overhead per trial-iteration with 8 trials (local executor, FIFO):
   the event loop's wall time minus the time inside ``Trainer.train()`` and
   minus building the 8 trainers, divided by the trial-iterations. Reported
   with the default trial checkpoint schedule (every 5 iterations) and with
   checkpoints only at the end, to show what checkpointing adds.

Usage: python bench/tune.py [--repeats 20] [--iterations 25] [--ray]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlgear.discovery import registry
from rlgear.tune.experiment import run


def ppo_config(folder: str, **training) -> dict:
    """The README's PPO CartPole network (64x64) with small batches."""
    return {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 8},
        "training": {"train_batch_size": 512, "sgd_minibatch_size": 64, "num_sgd_iter": 4, **training},
        "logging": {"dir": folder, "tensorboard": False, "progress": "none"},
    }


def bench_exploit(repeats: int) -> dict[str, float]:
    trainer_cls = registry.load_algorithm("ppo")
    with tempfile.TemporaryDirectory() as folder:
        donor_config = ppo_config(folder, lr=3e-4)
        taker_config = ppo_config(folder, lr=1e-5)
        donor = trainer_cls(donor_config)
        taker = trainer_cls(taker_config)
        for _ in range(3):
            donor.train()
        taker.train()
        snapshot = donor.save_to_object()
        new_config = copy.deepcopy(donor_config)
        new_config["training"]["lr"] = 3.6e-4
        in_place, recreate = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            assert taker.reset_config(new_config)
            taker.restore_from_object(snapshot)
            in_place.append(time.perf_counter() - start)

            start = time.perf_counter()
            taker.stop()
            taker = trainer_cls(new_config)
            taker.restore_from_object(snapshot)
            recreate.append(time.perf_counter() - start)
        snapshots = []
        for _ in range(repeats):
            start = time.perf_counter()
            donor.save_to_object()
            snapshots.append(time.perf_counter() - start)
        snapshot_s = statistics.median(snapshots)
        donor.stop()
        taker.stop()
    return {
        "in_place_s": statistics.median(in_place),
        "recreate_s": statistics.median(recreate),
        "snapshot_s": snapshot_s,
    }


def bench_exploit_ray(repeats: int) -> dict[str, float]:
    """The same exploit with trials as Ray actors: in place against killing and restarting the actor."""
    from rlgear import config as config_mod
    from rlgear.scheduler import Trial
    from rlgear.tune.config import TuneConfig
    from rlgear.tune.ray_executor import RayExecutor

    with tempfile.TemporaryDirectory() as folder:
        executor = RayExecutor(TuneConfig(executor="ray", ray_num_cpus=2))
        try:
            configs = [config_mod.resolve(ppo_config(folder, lr=lr)) for lr in (3e-4, 1e-5)]
            donor, taker = (Trial(config={}, trial_id=f"t{i}", logdir=folder) for i in range(2))
            for trial, config in zip((donor, taker), configs, strict=True):
                executor.start_trial(trial, config)
                executor.continue_training(trial)
            for _ in range(2):
                executor.get_next_result()
            snapshot = executor.save_to_object(donor)
            in_place, recreate = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                assert executor.reset_config(taker, configs[0])
                executor.restore_from_object(taker, snapshot)
                in_place.append(time.perf_counter() - start)

                start = time.perf_counter()
                executor.stop_trial(taker)
                executor.start_trial(taker, configs[0])
                executor.restore_from_object(taker, snapshot)  # waits for the new actor
                recreate.append(time.perf_counter() - start)
        finally:
            executor.shutdown()
    return {"in_place_s": statistics.median(in_place), "recreate_s": statistics.median(recreate)}


def bench_runner(iterations: int, checkpoint_freq: int | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        config = ppo_config(folder)
        config["workers"] = {"num_envs_per_worker": 2}
        config["training"] = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1,
                              "lr": {"grid_search": [1e-3, 5e-4, 3e-4, 1e-4, 5e-5, 3e-5, 1e-5, 5e-6]}}  # fmt: skip
        config["stop"] = {"training_iteration": iterations}
        config["tune"] = {"checkpoint_freq": checkpoint_freq or 10**6}
        if checkpoint_freq is None:
            config["checkpoint"] = {"at_end": False}
        result = run(config, progress="none")
    overhead = result.loop_time_s - result.train_time_s - result.start_time_s
    return {
        "trial_iterations": result.iterations,
        "train_s": result.train_time_s,
        "loop_s": result.loop_time_s,
        "start_s": result.start_time_s,
        "overhead_ms_per_iteration": 1000 * overhead / result.iterations,
        "train_ms_per_iteration": 1000 * result.train_time_s / result.iterations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--ray", action="store_true", help="also measure exploits with the Ray executor")
    args = parser.parse_args()

    exploit = bench_exploit(args.repeats)
    print(
        f"PBT exploit, PPO CartPole 64x64 (median of {args.repeats}): reset_config + restore "
        f"{exploit['in_place_s'] * 1000:.1f} ms | destroy + recreate + restore {exploit['recreate_s'] * 1000:.1f} ms "
        f"| ratio {exploit['recreate_s'] / exploit['in_place_s']:.0f}x | snapshot (save_to_object) "
        f"{exploit['snapshot_s'] * 1000:.2f} ms"
    )
    if args.ray:
        ray_exploit = bench_exploit_ray(max(3, args.repeats // 4))
        print(
            f"PBT exploit, trials as Ray actors (2 CPUs): reset_config + restore {ray_exploit['in_place_s'] * 1000:.1f} ms"
            f" | kill actor + new actor + restore {ray_exploit['recreate_s'] * 1000:.0f} ms"
            f" | ratio {ray_exploit['recreate_s'] / ray_exploit['in_place_s']:.0f}x"
        )
    for label, freq in (("checkpoint every 5 iterations", 5), ("no trial checkpoints", None)):
        stats = bench_runner(args.iterations, freq)
        print(
            f"runner, 8 trials x {args.iterations} iterations ({label}): overhead "
            f"{stats['overhead_ms_per_iteration']:.2f} ms per trial-iteration "
            f"(train() {stats['train_ms_per_iteration']:.1f} ms; {stats['trial_iterations']} trial-iterations, "
            f"loop {stats['loop_s']:.1f} s, building trainers {stats['start_s']:.1f} s)"
        )


if __name__ == "__main__":
    main()
