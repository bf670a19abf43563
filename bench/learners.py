"""Data-parallel learners (``learners.num_learners``) against one learner, in the same run.

Two measurements:

1. **Learner-bound updates/s**: PPO with ``configs/ppo-minatar-breakout.yaml``'s conv net on
   MinAtar's shapes (10x10x4 bool images, Discrete(3)) and a large batch (4096 rows, 2 epochs of
   1024-row minibatches: 8 gradient steps an update). One update is ``learner.update(batch)`` on a
   fixed batch (random values, the dtypes and columns a run's batch has), timed back to back in
   three modes: the learner in the driver (``num_learners: 0``), one learner actor, two learner
   actors (each on half of every minibatch, gradients all-reduced over gloo). ``speedup_2_vs_1`` is
   two actors against one actor (the same process layout, so only the sharding differs);
   ``speedup_2_vs_driver`` against the driver's learner. Repeats alternate the modes; the figure is
   the median. Each learner gets one torch thread (``learners.num_cpus_per_learner: 1``).
2. **Small runs**: ``configs/ppo-cartpole.yaml`` to ``episode_return_mean >= 475`` with the learner
   in the driver and with 2 learner actors, seeds 0..N-1: wall time (Ray's start included, as a
   user pays it), the part after setup (Ray and the actors started), and env steps. The
   ``slowdown`` figures are ratios of medians; the runs' env steps differ because two learners'
   float sums differ in the last bits, which sends the sampled trajectories apart after a while.

The load average before and after is recorded: two learners need two idle cores.

Usage: python bench/learners.py [--repeats 3] [--seeds 3] [--out bench/results/learners.json]
       python bench/learners.py --quick   (a few updates, one seed at a short budget: < 2 min)
Needs: pip install -e ".[torch,ray]"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._run import source_revision  # noqa: E402
from bench.gpu import random_batch, workload_spec  # noqa: E402

MODES = ("driver", "1 actor", "2 actors")


def conv_spec() -> dict[str, Any]:
    spec = workload_spec("ppo-conv-minatar")
    spec["training"] = {
        **spec["training"],
        "train_batch_size": 4096,
        "sgd_minibatch_size": 1024,
        "num_sgd_iter": 2,
    }
    spec["rows"] = 4096
    return spec


def conv_config(spec: dict[str, Any], num_learners: int) -> Any:
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    raw = {
        "algorithm": "ppo", "backend": "torch", "seed": 0, "env": {"name": "CartPole-v1"},
        "model": spec["model"], "training": spec["training"],
        "learners": {"num_learners": num_learners, "num_cpus_per_learner": 1, "device": "cpu"},
        "logging": {"progress": "none", "tensorboard": False},
    }  # fmt: skip
    return config_mod.resolve(raw, training_class=registry.load_algorithm("ppo").config_class)


def make_learners(spec: dict[str, Any]) -> dict[str, Any]:
    """The three learners of measurement 1, all built from the same seed."""
    from rlgear import Learner
    from rlgear.discovery import registry
    from rlgear.distributed.learner_group import LearnerGroup
    from rlgear.plugins.backends.torch import TorchBackend
    from rlgear.preprocessing import ObservationPreprocessor

    policy_class = registry.load_algorithm("ppo").policy_class("torch")
    obs_space, action_space = spec["spaces"]
    seen = ObservationPreprocessor(obs_space, action_space, "").observation_space
    driver = Learner.build(conv_config(spec, 0), policy_class, spec["spaces"])
    weights = driver.get_weights()
    groups = {
        f"{n} actor{'s' if n > 1 else ''}": LearnerGroup(
            conv_config(spec, n), policy_class, TorchBackend, {"default": (seen, action_space)}, weights
        )
        for n in (1, 2)
    }
    return {"driver": driver, **groups}


def updates_per_s(learner: Any, batch: Any, calls: int) -> float:
    learner.update(batch)  # warm-up
    start = time.perf_counter()
    for _ in range(calls):
        learner.update(batch)
    return calls / (time.perf_counter() - start)


def learner_bound(repeats: int, calls: int) -> dict[str, Any]:
    import torch

    from rlgear.distributed.ray_session import init_ray

    torch.set_num_threads(1)  # the driver's learner as a run has it (workers.num_cpus_for_driver: 1)
    init_ray(num_cpus=4)
    spec = conv_spec()
    learners = make_learners(spec)
    batch = random_batch(spec, learners["driver"].policy)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            rates[mode].append(updates_per_s(learners[mode], batch, calls))
    for mode in MODES[1:]:
        learners[mode].stop()
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    out = {
        "workload": "ppo conv (MinAtar shapes), 4096 rows, 2 epochs x 1024-row minibatches",
        "calls_per_repeat": calls,
        "updates_per_s": rates,
        "median_updates_per_s": median,
        "speedup_2_vs_1": median["2 actors"] / median["1 actor"],
        "speedup_2_vs_driver": median["2 actors"] / median["driver"],
    }
    print(json.dumps({k: v for k, v in out.items() if k != "updates_per_s"}, indent=1), flush=True)
    return out


def time_to_solve(num_learners: int, seed: int, budget: int) -> dict[str, Any]:
    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.distributed.ray_session import shutdown_ray
    from rlgear.run.runner import should_stop

    cls = registry.load_algorithm("ppo")
    start = time.perf_counter()
    config = config_mod.load(
        HERE.parent / "configs" / "ppo-cartpole.yaml",
        [f"seed={seed}", f"learners.num_learners={num_learners}", "logging.progress=none",
         "logging.tensorboard=false", f"stop={{episode_return_mean: 475, timesteps_total: {budget}}}"],
        training_class=cls.config_class,
    )  # fmt: skip
    trainer = cls(config)
    setup_s = time.perf_counter() - start
    try:
        while True:
            result = trainer.train()
            if should_stop(result, config.stop):
                break
    finally:
        trainer.stop()
        shutdown_ray(force=True)
    return {
        "num_learners": num_learners,
        "seed": seed,
        "wall_s": time.perf_counter() - start,
        "setup_s": setup_s,  # Ray's start and the learner actors' (0.0x for the driver's learner)
        "train_s": time.perf_counter() - start - setup_s,
        "timesteps_total": result["timesteps_total"],
        "episode_return_mean": result["episode_return_mean"],
        "solved": result["episode_return_mean"] >= 475,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10, help="timed updates per mode and repeat")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "learners.json")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    repeats, calls, seeds, budget = (
        (1, 2, 1, 20_000) if args.quick else (args.repeats, args.calls, args.seeds, 150_000)
    )
    load_before = os.getloadavg()
    bound = learner_bound(repeats, calls)
    from rlgear.distributed.ray_session import shutdown_ray

    shutdown_ray(force=True)
    runs = []
    for seed in range(seeds):
        for num_learners in (0, 2):
            row = time_to_solve(num_learners, seed, budget)
            runs.append(row)
            print(json.dumps(row), flush=True)
    wall = {n: statistics.median(r["wall_s"] for r in runs if r["num_learners"] == n) for n in (0, 2)}
    train = {n: statistics.median(r["train_s"] for r in runs if r["num_learners"] == n) for n in (0, 2)}
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": source_revision(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "learner_bound": bound,
        "cartpole_time_to_solve": {
            "runs": runs,
            "median_wall_s": {"driver": wall[0], "2 actors": wall[2]},
            "slowdown_2_actors_vs_driver": wall[2] / wall[0],
            "median_train_s": {"driver": train[0], "2 actors": train[2]},
            "slowdown_2_actors_vs_driver_after_setup": train[2] / train[0],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}: 2 actors vs 1 {bound['speedup_2_vs_1']:.2f}x, vs driver "
          f"{bound['speedup_2_vs_driver']:.2f}x; CartPole wall 2 actors / driver "
          f"{report['cartpole_time_to_solve']['slowdown_2_actors_vs_driver']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
