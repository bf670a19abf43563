"""Cost of one ``compute_actions`` call of a conv PPO policy: numpy twin vs the framework.

The acting half of ``bench/vision.py``'s wall clock, in isolation: a policy of
``configs/ppo-minatar-breakout.yaml``'s network (or the Nature-DQN stack on
84x84x4 uint8 frames), 8 observations per call, one thread (as the benchmark's
children), the median of ``--repeats`` timings of ``--calls`` calls each.

Usage: python bench/conv_acting.py [--backend torch|tf] [--calls 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

STACKS = {
    "minatar": (Box(np.zeros((10, 10, 4)), np.ones((10, 10, 4)), np.bool_), Discrete(3), [[16, 3, 1]], [128]),
    "nature": (
        Box(np.zeros((84, 84, 4)), np.full((84, 84, 4), 255), np.uint8),
        Discrete(6),
        [[32, 8, 4], [64, 4, 2], [64, 3, 1]],
        [512],
    ),
}


def make_policy(backend: str, stack: str, numpy_inference: bool, logdir: str):
    obs_space, action_space, filters, hidden = STACKS[stack]
    raw = {
        "algorithm": "ppo",
        "backend": backend,
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "model": {
            "conv_filters": filters,
            "hidden_sizes": hidden,
            "activation": "relu",
            "vf_share_layers": True,
            "numpy_inference": numpy_inference,
        },
        "logging": {"dir": logdir, "tensorboard": False, "progress": "none"},
    }
    trainer_cls = registry.load_algorithm("ppo")
    config = config_mod.resolve(raw, training_class=trainer_cls.config_class)
    return trainer_cls.policy_class(backend)(obs_space, action_space, config)


def timestep(obs: np.ndarray) -> TimeStep:
    n = len(obs)
    return TimeStep(
        np.full(n, StepType.MID, np.int32),
        np.zeros(n, np.float32),
        np.ones(n, np.float32),
        obs,
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int32),
    )


def seconds_per_call(policy, obs: np.ndarray, calls: int, repeats: int) -> float:
    step = timestep(obs)
    for _ in range(50):
        policy.compute_actions(step)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            policy.compute_actions(step)
        timings.append((time.perf_counter() - start) / calls)
    return float(np.median(timings))


def twin_of(policy):
    """The numpy twin a policy would act with if its image were small enough for it."""
    from rlgear.blocks.inference import NumpyActorCritic
    from rlgear.config.conv import conv_layers

    model = policy.config.model
    conv = conv_layers(policy.observation_space, model)
    return NumpyActorCritic(policy.action_space, len(model.hidden_sizes), model.activation, True, 0, conv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.backend == "torch":
        import torch

        torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as logdir:
        for stack, (space, *_rest) in STACKS.items():
            obs = (rng.random((8, *space.shape)) * float(space.high.max()) + 0.5).astype(space.dtype)
            calls = args.calls if stack == "minatar" else max(args.calls // 10, 20)
            row = {}
            for twin in (False, True):
                policy = make_policy(args.backend, stack, twin, logdir)
                if twin and policy.fast_actor is None:  # 84x84 acts in the framework (ConvSpec.twin_acts):
                    policy.fast_actor = twin_of(policy)  # the twin is measured all the same
                assert (policy.fast_actor is not None) == twin
                row[twin] = seconds_per_call(policy, obs, calls, args.repeats)
            print(
                f"{args.backend} {stack}: framework {row[False] * 1e6:.0f} us/call, "
                f"numpy twin {row[True] * 1e6:.0f} us/call ({row[False] / row[True]:.1f}x)"
            )


if __name__ == "__main__":
    main()
