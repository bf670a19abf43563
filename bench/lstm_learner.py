"""Time of one LSTM PPO update (one epoch of minibatch SGD over a batch) on torch and on TF.

The config is the StatelessCartPole learning test's (``tests/test_learning_lstm.py``: 8 envs x
32 steps, 8-sequence minibatches of 32 steps, 64 units, relu). Each backend runs 512 env steps
of that config in a fresh process to get a real batch (padded sequences, state-in columns),
then times ``learn_on_batch`` on it on one thread: CPU time (``time.process_time``) per epoch,
the best of ``--rounds`` rounds, so that a busy neighbour slows the figure less.

Usage: python bench/lstm_learner.py [--rounds 5] [--epochs 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(backend: str, rounds: int, epochs: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import rlgear
    from rlgear.discovery import registry
    from tests.test_learning_lstm import stateless_cartpole_config

    policy_class = registry.load_algorithm("ppo").policy_class(backend)
    captured = {}
    learn = policy_class.learn_on_batch

    def capture(policy, batch):
        captured["policy"], captured["batch"] = policy, batch
        return learn(policy, batch)

    policy_class.learn_on_batch = capture
    with tempfile.TemporaryDirectory() as tmp:
        rlgear.train(stateless_cartpole_config(Path(tmp), backend, True, {"timesteps_total": 512}))
    policy_class.learn_on_batch = learn
    policy, batch = captured["policy"], captured["batch"]
    per_call = int(policy.config.training.num_sgd_iter)  # epochs per learn_on_batch
    calls = max(1, epochs // per_call)
    policy.learn_on_batch(batch)  # warm-up (tracing on TF)
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            policy.learn_on_batch(batch)
        best = min(best, (time.process_time() - start) / (calls * per_call))
    return {"backend": backend, "batch_rows": len(batch), "ms_cpu_per_epoch": best * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--child", choices=["torch", "tf"])
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.rounds, args.epochs)), flush=True)
        return
    env = {**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1", "OMP_NUM_THREADS": "1"}
    for backend in ("torch", "tf"):
        command = [sys.executable, __file__, "--child", backend, "--rounds", str(args.rounds)]
        proc = subprocess.run(
            [*command, "--epochs", str(args.epochs)], capture_output=True, text=True, env=env, check=False
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{backend} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        print(lines[-1].removeprefix("RESULT "), flush=True)


if __name__ == "__main__":
    main()
