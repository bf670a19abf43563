"""Action latency of exported policies against rlgear's own acting path, in the same run.

For each workload (a policy kind: a trained-shape network with random weights is enough, the
latency does not depend on the values), a checkpoint is made with one tiny training iteration
and exported; then, at batch 1 and batch 64, the median time of one call (over ``--calls``
calls, after a warm-up) of:

* ``rlgear``: ``rlgear.load(checkpoint).compute_actions(obs)`` (preprocessing, filter, the
  numpy twin where the policy has one, else the framework), what ``rlgear evaluate`` pays;
* ``rlgear (framework)``: the same with ``model.numpy_inference: false`` (the torch model);
* ``numpy runtime``: ``rlgear.inference.load(checkpoint).compute_actions(obs)`` (numpy only);
* ``onnxruntime``: ``InferenceSession.run`` on the ONNX export (one intra-op thread);
* ``torchscript``: the TorchScript export under ``torch.no_grad`` (one torch thread);
* ``savedmodel``: the SavedModel's serving function (only with ``--savedmodel``; TF is slow to
  start and its first calls trace).

All run in this one process on one thread each. Figures are microseconds per call and the
ratio to ``rlgear``.

Usage: python bench/export.py [--calls 2000] [--out bench/results/export.json] [--savedmodel]
Needs: pip install -e ".[torch,export]" (and tf for --savedmodel)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._run import source_revision  # noqa: E402

TINY = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1}
WORKLOADS: dict[str, dict[str, Any]] = {
    "ppo-mlp-cartpole": {"algorithm": "ppo", "env": "CartPole-v1", "training": TINY, "model": {}},
    "ppo-lstm-cartpole": {
        "algorithm": "ppo", "env": "CartPole-v1", "training": TINY,
        "model": {"lstm": True, "lstm_cell_size": 64, "max_seq_len": 8},
    },
    "ppo-conv-image": {
        "algorithm": "ppo", "env": "tests.image_env:QuadrantEnv", "training": TINY,
        "model": {"conv_filters": [[16, 3, 1], [32, 3, 2]], "hidden_sizes": [128]},
    },
    "sac-pendulum": {
        "algorithm": "sac", "env": "Pendulum-v1", "training": {"learning_starts": 32, "train_batch_size": 16},
        "model": {}, "steps": 200,
    },
}  # fmt: skip


def make_checkpoint(folder: Path, spec: dict[str, Any]) -> Path:
    import rlgear

    stop = {"timesteps_total": spec["steps"]} if "steps" in spec else {"training_iteration": 1}
    rlgear.train(
        {
            "algorithm": spec["algorithm"], "seed": 0, "env": {"name": spec["env"], "vectorization": "sync"},
            "workers": {"num_envs_per_worker": 2}, "training": spec["training"], "model": spec["model"],
            "stop": stop, "logging": {"dir": str(folder), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    (run,) = folder.iterdir()
    return run


def median_us(call, calls: int) -> float:
    for _ in range(max(20, calls // 10)):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def players(run: Path, folder: Path, savedmodel: bool) -> dict[str, Any]:
    """``{name: (feeds -> actions)}``; every entry takes the same raw observations."""
    import numpy as np
    import onnxruntime
    import torch

    import rlgear
    import rlgear.inference
    from rlgear.export import export
    from rlgear.export.checking import feeds_for

    onnx = export(run, "onnx", folder / "policy.onnx")
    script = export(run, "torchscript", folder / "policy.pt")
    sidecar = onnx.sidecar
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(onnx.path), options, providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(str(script.path))
    extra = [s for s in sidecar["inputs"] if not s["name"].startswith("obs")]

    def feeds(observations: Any) -> dict[str, np.ndarray]:
        out = feeds_for(sidecar, observations)
        n = len(next(iter(out.values())))
        for spec in extra:
            out[spec["name"]] = np.zeros((n, *spec["shape"][1:]), spec["dtype"])
        return out

    ours = rlgear.load(run)
    framework = rlgear.load(run, overrides=["model.numpy_inference=false"])
    numpy_runtime = rlgear.inference.load(run)
    names = [s["name"] for s in sidecar["inputs"]]

    def run_script(f: dict[str, np.ndarray]) -> Any:
        with torch.no_grad():
            return scripted(*(torch.from_numpy(f[n]) for n in names))

    table = {
        "rlgear": lambda obs, f: ours.compute_actions(obs),
        "rlgear (framework)": lambda obs, f: framework.compute_actions(obs),
        "numpy runtime": lambda obs, f: numpy_runtime.compute_actions(obs),
        "onnxruntime": lambda obs, f: session.run(["action"], f),
        "torchscript": lambda obs, f: run_script(f),
    }
    if savedmodel:
        from rlgear.export.checking import player

        saved = export(run, "savedmodel", folder / "policy_savedmodel")
        play = player(saved.path)
        table["savedmodel"] = lambda obs, f: play(f)
    return {"table": table, "feeds": feeds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", default=str(HERE / "results" / "export.json"))
    parser.add_argument("--savedmodel", action="store_true")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np
    import torch

    from rlgear.export import random_observations
    from rlgear.run import agent

    torch.set_num_threads(1)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": source_revision(),
        "calls": args.calls,
        "load_avg_before": os.getloadavg(),
        "workloads": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads.split(","):
            spec = WORKLOADS[name]
            folder = Path(tmp) / name
            run = make_checkpoint(folder / "run", spec)
            made = players(run, folder, args.savedmodel)
            space = agent.load(run).observation_space
            rows: dict[str, dict[str, float]] = {}
            for batch in (1, 64):
                observations = random_observations(space, batch, np.random.default_rng(batch))
                feeds = made["feeds"](observations)
                for player_name, call in made["table"].items():
                    us = median_us(lambda c=call, o=observations, f=feeds: c(o, f), args.calls)
                    rows.setdefault(player_name, {})[f"batch_{batch}_us"] = round(us, 1)
            for batch in (1, 64):
                base = rows["rlgear"][f"batch_{batch}_us"]
                for row in rows.values():
                    row[f"batch_{batch}_vs_rlgear"] = round(row[f"batch_{batch}_us"] / base, 3)
            results["workloads"][name] = rows
            print(f"\n{name}: microseconds per call (ratio to rlgear's acting)")
            for player_name, row in rows.items():
                print(
                    f"  {player_name:20s} batch 1: {row['batch_1_us']:8.1f} ({row['batch_1_vs_rlgear']:.2f}x)"
                    f"   batch 64: {row['batch_64_us']:8.1f} ({row['batch_64_vs_rlgear']:.2f}x)"
                )
    results["load_avg_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
