"""Action round-trip latency and aggregate steps/s of the external env over loopback.

    python bench/external_latency.py                 # 1, 8 and 32 clients
    python bench/external_latency.py --clients 32 --seconds 10

Server: an rlgear RolloutWorker (PPO policy, 64x64 tanh MLP, numpy inference as in
training) sampling from ``env.adapter: external`` with one slot per client, in
this process; no learning, so the figures are the serving path alone.

Clients: light, in separate processes (``--procs``, default min(clients, 4)).
Each process drives its share of the connections from one thread with a
selector and ``rlgear.external.wire`` (a real socket and handshake per client, the same
frames rlgear.external.client sends), so 32 clients do not need 32 Python processes on
a 2-core machine. A client's "env" cycles through 16 pre-encoded random
observations and ends its episode every 200 steps. Latency = time from sending ``start``/``step`` to
receiving the reply, per request, over every client.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

OBS_SPACE = {"type": "Box", "shape": [4], "dtype": "float32", "low": ["-inf"] * 4, "high": ["inf"] * 4}
EPISODE_LEN = 200


def client_process(address: str, n: int, seconds: float, warmup: float, out: Any) -> None:
    from rlgear.external.wire import FrameDecoder, encode

    host, port = address.rsplit(":", 1)
    rng = np.random.default_rng(os.getpid())
    sel = selectors.DefaultSelector()
    conns = []
    for j in range(n):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(encode("hello", {"protocol": 1, "token": None}))
        decoder = FrameDecoder()
        while not (msgs := decoder.feed(sock.recv(65536))):
            pass
        assert msgs[0].type == "welcome", msgs[0].header
        sock.setblocking(False)
        conn = {"sock": sock, "decoder": decoder, "t": 0, "sent": 0.0, "id": j}
        sel.register(sock, selectors.EVENT_READ, conn)
        conns.append(conn)

    # Frames are encoded up front (16 random observations per client, cycled): the clients stand
    # for environments whose own cost is not what is measured, and on 2 cores every client
    # microsecond is taken from the server.
    obs = [rng.standard_normal(4).astype(np.float32) for _ in range(16)]
    starts = [encode("start", None, {"observation": o}) for o in obs]
    steps = [encode("step", {"reward": 1.0}, {"observation": o}) for o in obs]
    lasts = [encode("step", {"reward": 1.0, "terminated": True}, {"observation": o}) for o in obs]

    def request(conn):
        t = conn["t"]
        frame = (starts if t == 0 else lasts if t >= EPISODE_LEN else steps)[t % 16]
        conn["sent"] = time.perf_counter()
        conn["sock"].sendall(frame)

    for conn in conns:
        request(conn)
    latencies: list[float] = []
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + seconds
    actions = 0
    while True:
        now = time.perf_counter()
        if now > end:
            break
        for key, _ in sel.select(0.5):
            conn = key.data
            for msg in conn["decoder"].feed(conn["sock"].recv(65536)):
                done = time.perf_counter()
                if done > measure_from:
                    latencies.append(done - conn["sent"])
                    actions += msg.type == "action"
                conn["t"] = 0 if msg.type == "episode_end" else conn["t"] + 1
                request(conn)
    for conn in conns:
        conn["sock"].close()
    out.put((latencies, actions))


def serve(num_clients: int, address_file: str, seconds: float, procs: int, seed: int = 0) -> dict:
    from rlgear import config as config_mod
    from rlgear import env as env_mod
    from rlgear.discovery import registry
    from rlgear.sampling.rollout_worker import RolloutWorker

    config = config_mod.resolve(
        {
            "algorithm": "ppo",
            "seed": seed,
            "env": {
                "adapter": "external",
                "name": "bench",
                "kwargs": {
                    "port": 0,
                    "address_file": address_file,
                    "min_clients": num_clients,
                    "observation_space": OBS_SPACE,
                    "action_space": {"type": "Discrete", "n": 2},
                },
            },
            "model": {"hidden_sizes": [64, 64]},
            "workers": {"num_envs_per_worker": num_clients, "rollout_fragment_length": 64},
            "training": {"train_batch_size": 64 * num_clients},
            "logging": {"progress": "none", "tensorboard": False},
        }
    )
    trainer_cls = registry.load_algorithm("ppo")
    registry.load_backend("torch")().setup(1, seed)
    evaluator = RolloutWorker(
        config, trainer_cls.policy_class("torch"), registry.load_env_adapter("external")
    )
    host, port = evaluator.env.server.address
    ctx = mp.get_context("spawn")  # no fork of a process holding torch's thread pools
    queue = ctx.Queue()
    shares = [num_clients // procs + (i < num_clients % procs) for i in range(procs)]
    workers = [
        ctx.Process(target=client_process, args=(f"{host}:{port}", k, seconds, 1.0, queue))
        for k in shares
        if k
    ]
    for w in workers:
        w.start()
    env_mod.stop_requested.clear()
    # the env raises EnvInterrupted once asked to stop and no client is sending any more
    timer = threading.Timer(seconds + 1.0, env_mod.stop_requested.set)
    timer.start()
    cpu0, wall0, steps0 = time.process_time(), time.perf_counter(), evaluator._env_steps
    try:
        while True:
            evaluator.sample()
            cpu1, wall1, steps1 = time.process_time(), time.perf_counter(), evaluator._env_steps
    except env_mod.EnvInterrupted:
        pass
    results = [queue.get(timeout=60) for _ in workers]
    env_mod.stop_requested.clear()
    for w in workers:
        w.join(10)
    evaluator.stop()
    latencies = np.concatenate([np.asarray(lat) for lat, _ in results]) * 1e3
    actions = sum(a for _, a in results)
    return {
        "clients": num_clients,
        "client_procs": len(workers),
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "steps_per_s": actions / seconds,
        "requests": int(latencies.size),
        # how busy the server process was while serving, and its CPU time per env step
        "server_cpu_share": (cpu1 - cpu0) / (wall1 - wall0),
        "server_cpu_us_per_step": 1e6 * (cpu1 - cpu0) / max(1, steps1 - steps0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--procs", type=int, default=None, help="client processes (default min(clients, 4))")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for n in args.clients:
        with tempfile.TemporaryDirectory() as tmp:
            procs = args.procs or min(n, 4)
            rows.append(serve(n, os.path.join(tmp, "address"), args.seconds, procs))
        r = rows[-1]
        print(
            f"{r['clients']:>3} clients ({r['client_procs']} procs): p50 {r['p50_ms']:.2f} ms  "
            f"p99 {r['p99_ms']:.2f} ms  {r['steps_per_s']:,.0f} steps/s  (server CPU "
            f"{100 * r['server_cpu_share']:.0f}%, {r['server_cpu_us_per_step']:.0f} us/step)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
