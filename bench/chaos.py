"""Chaos soak: two runs under random SIGKILLs, then checks that nothing was lost or poisoned.

A benchmark, not a CI test (it takes ``--minutes`` plus the time to finish).
Two runs go on side by side on this machine:

* ``train``: PPO on CartPole with 2 remote workers and 2 data-parallel learner actors
  (``learners.num_learners: 2``) on a local 2-node Ray cluster (``ray.cluster_utils.Cluster``:
  each node has its own raylet);
* ``serve``: PPO served to 8 external CartPole clients over TCP
  (``rlgear serve`` + ``examples/external_cartpole_client.py``).

Every 8-20 s (seeded) one of these happens: SIGKILL a remote worker's
process; SIGKILL a learner actor's process (the learner group restarts from the last weights);
remove the worker node without warning (a new one joins 5 s later);
SIGKILL the ``train`` driver or the ``serve`` driver (restarted at once with
``--resume RUN_DIR``); SIGKILL a client (restarted at once). A driver that
exits on its own before the window ends counts as a failure of the soak and is
resumed too. After the window, nothing is killed and both runs go on to their
stop criterion (``time_total_s``, restored on resume).

Then, per run:
* counters only ever increase: ``training_iteration`` goes 1, 2, 3 ... with no
  gap or repeat across resumes, ``timesteps_total``, ``episodes_total`` and
  ``time_total_s`` never go down;
* every checkpoint in the run folder loads (``rlgear.load``), and no weight in
  any of them is NaN or infinite (checkpoints are kept, ``checkpoint.keep: null``);
* the run finishes: its last driver exits 0 with the stop criterion met.

Usage: python bench/chaos.py [--minutes 10] [--seed 0] [--out bench/results/chaos.json]
Needs: pip install -e ".[torch,ray]" gymnasium
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _run import source_revision

ROOT = Path(__file__).resolve().parent.parent
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
RLGEAR = [sys.executable, "-m", "rlgear"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Driver:
    """One ``rlgear train|serve`` run: start it, SIGKILL it, resume it, and keep every exit code."""

    def __init__(self, name: str, command: str, config: Path, overrides: list[str], workdir: Path):
        self.name, self.command, self.config = name, command, config
        self.logdir = workdir / name
        self.overrides = [*overrides, f"logging.dir={self.logdir}"]
        self.log = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in close()
        self.process: subprocess.Popen | None = None
        self.exits: list[int] = []
        self.starts = 0

    def _folders(self) -> list[Path]:
        if not self.logdir.exists():
            return []
        return sorted((p for p in self.logdir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_ctime)

    @property
    def resumable_dir(self) -> Path | None:
        """The newest run folder with a checkpoint: what ``--resume`` continues."""
        from rlgear.run import checkpoint as ckpt

        with_checkpoint = [p for p in self._folders() if ckpt.list_checkpoints(p)]
        return with_checkpoint[-1] if with_checkpoint else None

    @property
    def run_dir(self) -> Path | None:
        """The run the soak judges: the resumable one, else (killed before its first checkpoint,
        so a fresh run was started) the newest."""
        folders = self._folders()
        return self.resumable_dir or (folders[-1] if folders else None)

    def start(self) -> None:
        args = [*RLGEAR, self.command, str(self.config)]
        for override in self.overrides:
            args += ["--set", override]
        if self.resumable_dir is not None:
            args += ["--resume", str(self.resumable_dir)]
        self.log.write(f"\n=== start {self.starts}: {' '.join(args)}\n".encode())
        self.log.flush()
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT)
        self.starts += 1

    @property
    def running(self) -> bool:
        """Started and not yet seen to exit (a driver that exited 0 has finished its run)."""
        return self.process is not None and self.process.poll() is None

    def poll(self) -> int | None:
        """The exit code if the driver has ended since the last poll (and record it)."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        self.exits.append(code)
        self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.exits.append(-9)
            self.process = None

    def close(self) -> None:
        self.kill()
        self.log.close()


class Clients:
    """8 external CartPole clients; each reconnects by itself when the server goes away."""

    def __init__(self, address: str, count: int, workdir: Path):
        self.address = address
        self.log = open(workdir / "clients.log", "ab")  # noqa: SIM115 - closed in close()
        self.processes = [self._start(i) for i in range(count)]

    def _start(self, index: int) -> subprocess.Popen:
        script = str(ROOT / "examples" / "external_cartpole_client.py")
        return subprocess.Popen(
            [sys.executable, script, self.address, "--seed", str(index)],
            stdout=self.log, stderr=subprocess.STDOUT, env=ENV,
        )  # fmt: skip

    def kill_one(self, rng: random.Random) -> None:
        index = rng.randrange(len(self.processes))
        self.processes[index].send_signal(signal.SIGKILL)
        self.processes[index].wait()
        self.processes[index] = self._start(index)

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
        self.log.close()


def actor_pids(actor_class: str) -> list[int]:
    """Processes of one kind of Ray actor (Ray names them ``ray::<class>...``)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if f"ray::{actor_class}" in line]


def worker_pids() -> list[int]:
    """Processes of rlgear's remote workers."""
    return actor_pids("RemoteEvaluator")


def learner_pids() -> list[int]:
    """Processes of rlgear's learner actors."""
    return actor_pids("LearnerActor")


#: Result keys that count faults: like the progress counters, they must never go down across resumes.
FAULT_COUNTER_PREFIXES = (
    "num_worker_restarts",
    "num_learner_restarts",
    "num_worker_start_failures",
    "num_dropped_requests",
    "num_metrics_timeouts",
    "worker_failures/",
    "learner/num_nonfinite",
)


def check_run(driver: Driver, stop_s: float) -> dict[str, Any]:
    """The soak's verdicts on one run folder (see the module docstring)."""
    from rlgear import load
    from rlgear.run import checkpoint as ckpt

    run_dir = driver.run_dir
    if run_dir is None:
        return {"ok": False, "problems": ["no run folder"]}
    problems = []
    rows = [
        json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines() if line.strip()
    ]
    iterations = [row["training_iteration"] for row in rows]
    if iterations != list(range(1, len(rows) + 1)):
        repeats = [i for i, n in Counter(iterations).items() if n > 1]
        problems.append(f"training_iteration is not 1..{len(rows)}: repeated {repeats[:10]}")
    # Progress counters, and the fault counters a resume must carry on (restarts, failures, skipped updates).
    fault_keys = sorted({k for row in rows for k in row if k.startswith(FAULT_COUNTER_PREFIXES)})
    for key in ("timesteps_total", "episodes_total", "time_total_s", *fault_keys):
        values = [(i, row[key]) for i, row in enumerate(rows) if isinstance(row.get(key), (int, float))]
        drops = [values[j][0] for j in range(1, len(values)) if values[j][1] < values[j - 1][1]]
        if drops:
            problems.append(f"{key} went down at rows {drops[:10]}")
    checkpoints = ckpt.list_checkpoints(run_dir)
    loaded = 0
    for folder in checkpoints:
        try:
            arrays, _, _, _ = ckpt.read(folder)
            bad = [k for k, v in arrays.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
            if bad:
                problems.append(f"{folder.name}: non-finite arrays {bad[:5]}")
            load(folder)
            loaded += 1
        except Exception as err:  # any failure to load is a finding
            problems.append(f"{folder.name}: does not load: {type(err).__name__}: {err}")
    finished = (
        bool(driver.exits) and driver.exits[-1] == 0 and bool(rows) and rows[-1]["time_total_s"] >= stop_s
    )
    if not finished:
        problems.append(
            f"the run did not finish: exits {driver.exits}, last row {rows[-1] if rows else None}"
        )
    last = rows[-1] if rows else {}
    return {
        "ok": not problems,
        "problems": problems,
        "iterations": len(rows),
        "timesteps_total": last.get("timesteps_total"),
        "checkpoints_loaded": f"{loaded} of {len(checkpoints)}",
        "driver_starts": driver.starts,
        "driver_exit_codes": driver.exits,
        "fault_counters_last_row": {k: v for k, v in last.items() if k.startswith(FAULT_COUNTER_PREFIXES)},
    }


def soak(minutes: float, seed: int, workdir: Path) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    rng = random.Random(seed)
    window_s = minutes * 60
    # Each run's own training time (restored on resume): restarts cost time, so the runs reach it
    # after the window; one that gets there earlier has finished (and is not restarted).
    stop_s = math.floor(window_s)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": FAST_HEALTH_CHECKS}
    )
    worker_node = cluster.add_node(num_cpus=4)  # 2 workers and 2 learners (logical CPUs)
    port = free_port()
    common = [
        f"stop={{time_total_s: {stop_s}}}",
        "checkpoint.every=5",
        "checkpoint.keep=null",
        "logging.progress=none",
    ]
    train = Driver(
        "train", "train", ROOT / "configs" / "ppo-cartpole.yaml",
        [*common, "workers.num_workers=2", "learners.num_learners=2", "learners.max_restarts=1000",
         f"workers.ray.address={cluster.address}"], workdir,
    )  # fmt: skip
    serve = Driver(
        "serve", "serve", ROOT / "configs" / "ppo-cartpole-external.yaml",
        [*common, f"env.kwargs.port={port}"], workdir,
    )  # fmt: skip
    kills: Counter[str] = Counter()
    unexpected: list[str] = []
    events: list[dict[str, Any]] = []
    started = time.monotonic()
    train.start()
    serve.start()
    clients = Clients(f"127.0.0.1:{port}", 8, workdir)
    try:
        while time.monotonic() - started < window_s:
            time.sleep(rng.uniform(8, 20))
            for driver in (train, serve):
                code = driver.poll()
                if code is not None and code != 0:  # it failed by itself: a finding, then resume
                    unexpected.append(f"{driver.name} exited {code} at {time.monotonic() - started:.0f} s")
                    driver.start()
            choices = ["client"] if serve.running else []
            if train.running:
                choices += ["worker", "learner", "node", "train_driver"]
            if serve.running:
                choices.append("serve_driver")
            if not choices:
                break  # both runs finished inside the window
            what = rng.choice(choices)
            when = round(time.monotonic() - started, 1)
            if what == "worker":
                pids = worker_pids()
                if not pids:
                    continue
                os.kill(rng.choice(pids), signal.SIGKILL)
            elif what == "learner":
                pids = learner_pids()
                if not pids:
                    continue
                os.kill(rng.choice(pids), signal.SIGKILL)
            elif what == "node":
                cluster.remove_node(worker_node, allow_graceful=False)
                time.sleep(5)
                worker_node = cluster.add_node(num_cpus=4)
            elif what == "train_driver":
                train.kill()
                train.start()
            elif what == "serve_driver":
                serve.kill()
                serve.start()
            else:
                clients.kill_one(rng)
            kills[what] += 1
            events.append({"t_s": when, "kill": what})
            print(f"[{when:6.1f} s] killed {what}", flush=True)
        # The window is over: no more kills; each run goes on to its stop criterion.
        deadline = time.monotonic() + 600
        for driver in (train, serve):
            code = driver.poll()
            if code not in (None, 0):
                unexpected.append(f"{driver.name} exited {code} at the end of the window")
            if driver.process is None and driver.exits[-1] != 0:
                driver.start()  # killed (or failed) last: it still has to finish
        pending = {driver for driver in (train, serve) if driver.running}
        while pending and time.monotonic() < deadline:
            time.sleep(2)
            for driver in list(pending):
                code = driver.poll()
                if code == 0:
                    pending.discard(driver)
                elif code is not None:
                    unexpected.append(f"{driver.name} exited {code} after the window")
                    driver.start()
        duration = time.monotonic() - started
        report = {
            "source": source_revision(),
            "minutes": minutes,
            "seed": seed,
            "stop_time_total_s": stop_s,
            "duration_s": round(duration, 1),
            "kills": dict(kills),
            "kills_total": sum(kills.values()),
            "unexpected_exits": unexpected,
            "events": events,
            "train": check_run(train, stop_s),
            "serve": check_run(serve, stop_s),
            "workdir": str(workdir),
        }
        report["ok"] = report["train"]["ok"] and report["serve"]["ok"] and not unexpected
        return report
    finally:
        clients.close()
        train.close()
        serve.close()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long kills go on")
    parser.add_argument("--seed", type=int, default=0, help="seeds the choice and timing of the kills")
    parser.add_argument("--out", type=Path, help="write the report (JSON) here")
    parser.add_argument("--workdir", type=Path, help="run folders and logs (default: a new temp folder)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rlgear-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = soak(args.minutes, args.seed, workdir)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
