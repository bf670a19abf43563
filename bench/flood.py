"""Real clients' handshakes while one attacker floods the external env with silent connections.

    python bench/flood.py --label after                  # rates 0 20 50 100 200 500 /s, 32 clients each
    python bench/flood.py --rates 500 --clients 16 --label quick

Server (a child process): ``env.adapter: external`` with 8 slots and a token, every
other setting at its default, stepped with random actions as the evaluator
would. Attacker (one child process, one thread): opens TCP connections at the
given rate with non-blocking connects, never sends or reads a byte, and holds
each one ``--hold`` seconds (3: longer than the server's 1 s linger after an
error frame) before it reads what the server sent and closes it. Real clients (this process, one after another,
evenly spread over the flood): connect, send ``hello`` with the token, wait for
the reply, then ``bye`` (and waits for the server's). A client succeeds when its reply is ``welcome``; its
latency is from ``connect`` to ``welcome``. docs/protocol.md section 4 promises
that silent sockets cannot keep a real client out, so at every rate all
clients should get in.

Results go to ``bench/results/flood.json`` under ``--label`` (other labels in
the file are kept, so a run on the code before a change and one after sit side
by side).
"""

from __future__ import annotations

import argparse
import collections
import errno
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SLOTS = 8
TOKEN = "bench-flood-token"
OBS_SPACE = {"type": "Box", "shape": [4], "dtype": "float32", "low": ["-inf"] * 4, "high": ["inf"] * 4}
RESULTS = Path(__file__).parent / "results" / "flood.json"
ATTACKER_MAX_HELD = 4000  # the attacker's own file descriptors; the oldest is closed beyond this


def server_process(address_file: str, stop: Any) -> None:
    """The external env stepped with random actions until ``stop`` is set."""
    import logging
    import threading

    from rlgear import env as env_mod
    from rlgear.plugins.envs.external import ExternalAdapter

    kwargs = {
        "observation_space": OBS_SPACE,
        "action_space": {"type": "Discrete", "n": 2},
        "port": 0,
        "token": TOKEN,
        "address_file": address_file,
    }
    logging.getLogger("rlgear.external").setLevel(logging.ERROR)  # one warning per refusal otherwise
    env = ExternalAdapter().make("flood", SLOTS, kwargs=kwargs)
    threading.Thread(target=lambda: (stop.wait(), env_mod.stop_requested.set()), daemon=True).start()
    rng = np.random.default_rng(0)
    try:
        env.reset()
        while True:
            env.step(rng.integers(0, 2, SLOTS))
    except env_mod.EnvInterrupted:
        pass
    finally:
        env.close()


def attacker_process(host: str, port: int, rate: float, seconds: float, hold: float, out: Any) -> None:
    """Open ``rate`` silent connections per second for ``seconds``; hold each ``hold`` s unread.

    The attacker never reads while it holds a socket (as a flood that ignores
    replies does), then reads what the server sent and closes it.
    """
    from rlgear.external.wire import FrameDecoder, WireError

    held: collections.deque[tuple[float, socket.socket]] = collections.deque()
    counts: collections.Counter[str] = collections.Counter()

    def release(sock: socket.socket) -> None:
        decoder, data = FrameDecoder(1 << 20), b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except BlockingIOError:
            counts["open_when_released"] += 1
        except OSError:
            counts["reset_when_released"] += 1
        else:
            counts["closed_by_server"] += 1
        try:
            for msg in decoder.feed(data):
                if msg.type == "error":
                    counts[f"error:{msg.header.get('name')}"] += 1
        except WireError:
            counts["bad_frame_from_server"] += 1
        sock.close()

    start = time.perf_counter()
    end = start + seconds
    opened = 0
    while (now := time.perf_counter()) < end:
        while opened < int((now - start) * rate) + 1:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            err = sock.connect_ex((host, port))
            opened += 1
            if err not in (0, errno.EINPROGRESS):
                counts["connect_failed"] += 1
                sock.close()
                continue
            held.append((now + hold, sock))
            if len(held) > ATTACKER_MAX_HELD:
                release(held.popleft()[1])
        while held and held[0][0] <= now:
            release(held.popleft()[1])
        time.sleep(max(0.0, min(end, start + (opened + 1) / rate) - time.perf_counter()))
    counts["opened"] = opened
    while held:
        release(held.popleft()[1])
    out.put(dict(counts))


def real_client(host: str, port: int, timeout: float) -> tuple[str, float]:
    """One authenticated handshake: ('welcome' or the error's name or the failure, seconds)."""
    from rlgear.external.wire import FrameDecoder, encode

    t0 = time.perf_counter()
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as err:
        return f"connect:{type(err).__name__}", time.perf_counter() - t0
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(encode("hello", {"protocol": 1, "token": TOKEN}))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            if not data:
                return "closed", time.perf_counter() - t0
            msgs = decoder.feed(data)
            if msgs:
                break
        latency = time.perf_counter() - t0
        reply = msgs[0]
        if reply.type != "welcome":
            return f"{reply.header.get('name', reply.type)}: {reply.header.get('message', '')}", latency
        sock.sendall(encode("bye"))
        while sock.recv(65536):  # the server's bye, then its close: the slot is free for the next client
            pass
        return "welcome", latency
    except OSError as err:
        return type(err).__name__, time.perf_counter() - t0
    finally:
        sock.close()


def run_rate(rate: float, clients: int, spacing: float, warmup: float, hold: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        address_file = os.path.join(tmp, "address")
        stop = ctx.Event()
        server = ctx.Process(target=server_process, args=(address_file, stop))
        server.start()
        deadline = time.monotonic() + 60
        address = Path(address_file)
        while not (address.exists() and address.read_text().endswith("\n")):
            if time.monotonic() > deadline or not server.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        host, port_text = address.read_text().strip().rsplit(":", 1)
        port = int(port_text)
        flood_s = warmup + clients * spacing + 0.5
        queue = ctx.Queue()
        attacker = None
        if rate > 0:
            attacker = ctx.Process(target=attacker_process, args=(host, port, rate, flood_s, hold, queue))
            attacker.start()
        time.sleep(warmup)
        outcomes, latencies = collections.Counter(), []
        began = time.perf_counter()
        for k in range(clients):
            time.sleep(max(0.0, began + k * spacing - time.perf_counter()))
            outcome, latency = real_client(host, port, timeout=5.0)
            outcomes[outcome] += 1
            if outcome == "welcome":
                latencies.append(latency * 1e3)
        attack = queue.get(timeout=60) if attacker is not None else {}
        if attacker is not None:
            attacker.join(10)
        stop.set()
        server.join(20)
        if server.is_alive():
            server.kill()
    lat = np.asarray(latencies)

    def stat(fn: Any) -> float | None:
        return round(float(fn(lat)), 3) if lat.size else None  # JSON has no NaN

    opened = attack.get("opened", 0)
    return {
        "flood_rate_per_s": rate,
        "flood_connections_opened": opened,
        "flood_rate_reached_per_s": opened / flood_s,
        "clients": clients,
        "welcomed": outcomes["welcome"],
        "refused_or_failed": {k: v for k, v in outcomes.items() if k != "welcome"},
        "welcome_latency_ms_p50": stat(lambda a: np.percentile(a, 50)),
        "welcome_latency_ms_p99": stat(lambda a: np.percentile(a, 99)),
        "welcome_latency_ms_max": stat(np.max),
        "attacker_saw": {k: v for k, v in attack.items() if k != "opened"},
    }


def git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", type=float, nargs="+", default=[0, 20, 50, 100, 200, 500])
    parser.add_argument("--clients", type=int, default=32, help="real clients per rate, one after another")
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between real clients' connects")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of flood before the first client")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds the attacker holds each socket")
    parser.add_argument("--label", default="latest", help="key of this run in the results file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for rate in args.rates:
        row = run_rate(rate, args.clients, args.spacing, args.warmup, args.hold)
        rows.append(row)
        print(
            f"flood {rate:>5g}/s (reached {row['flood_rate_reached_per_s']:.0f}/s): "
            f"{row['welcomed']}/{row['clients']} welcomed, p50 {row['welcome_latency_ms_p50']} ms, "
            f"p99 {row['welcome_latency_ms_p99']} ms; refused {row['refused_or_failed']}; "
            f"attacker saw {row['attacker_saw']}",
            file=sys.stderr,
        )
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    report[args.label] = {
        "code": git_state(),
        "machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end",
        "command": "python bench/flood.py " + " ".join(sys.argv[1:]),
        "server": f"{SLOTS} slots, token, default settings",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
