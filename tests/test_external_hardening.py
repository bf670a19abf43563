"""Hostile or careless clients of the external env (issue 17): each reproduction is a test here.

Every case drives a live server through raw sockets (or the client), then checks
the offending client got its error frame and the server still serves others.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rlgear.errors import ConfigError
from rlgear.external.client import Client
from rlgear.external.wire import ErrorCode, FrameDecoder, ServerError, encode
from rlgear.plugins.envs.external.server import RateLimitedLog
from tests.test_external_server import HELLO, error_code, make_env, play_episode, raw, read_until_eof

BOUNDED_OBS = {"type": "Box", "shape": [3], "dtype": "float32", "low": [-4.8, -1, -1], "high": [4.8, 1, 1]}


def frame_from_json(header_text: str) -> bytes:
    """A frame whose header is exactly ``header_text`` (to send what ``encode`` never would)."""
    head = header_text.encode("utf-8", "surrogatepass")
    return struct.pack(">II", 4 + len(head), len(head)) + head


def send_and_read(address: str, *frames: bytes) -> list:
    sock = raw(address)
    for frame in frames:
        sock.sendall(frame)
    return read_until_eof(sock)


def started_episode(address: str) -> tuple[socket.socket, FrameDecoder]:
    """A raw client that said hello and started an episode (its action read)."""
    sock = raw(address)
    decoder = FrameDecoder()
    sock.sendall(encode("hello", {"protocol": 1}))
    sock.sendall(encode("start", arrays={"observation": np.zeros(3, np.float32)}))
    replies: list = []
    while len(replies) < 2:
        replies += decoder.feed(sock.recv(65536))
    assert [m.type for m in replies] == ["welcome", "action"], [m.header for m in replies]
    return sock, decoder


def step_frame(reward: float, observation=None) -> bytes:
    obs = np.zeros(3, np.float32) if observation is None else np.asarray(observation, np.float32)
    return encode("step", {"reward": reward, "terminated": False, "truncated": False}, {"observation": obs})


def still_serves(address: str, token: str | None = None) -> None:
    client = Client(address, token=token)
    play_episode(client, steps=2)
    client.disconnect()


# --- authentication ----------------------------------------------------------------------
def test_a_lone_surrogate_token_is_a_wrong_token_not_a_crash(serve):
    server = serve(token="secret")
    messages = send_and_read(
        server.address, frame_from_json('{"type":"hello","protocol":1,"token":"\\ud800"}')
    )
    assert error_code(messages) == ErrorCode.AUTH_FAILED
    still_serves(server.address, token="secret")


@pytest.mark.parametrize(
    ("hello_header", "code"),
    [
        ('{"type":"hello","protocol":1.0}', ErrorCode.UNSUPPORTED_PROTOCOL),
        ('{"type":"hello","protocol":true}', ErrorCode.UNSUPPORTED_PROTOCOL),
        ('{"type":"hello","protocol":1,"token":123}', ErrorCode.BAD_MESSAGE),
        ('{"type":"hello","protocol":1}', ErrorCode.AUTH_FAILED),  # the server has a token
        ('{"type":"bye","type":"hello","protocol":1,"token":"secret"}', ErrorCode.BAD_FRAME),  # duplicate key
    ],
)
def test_hello_is_strict(serve, hello_header, code):
    server = serve(token="secret")
    assert error_code(send_and_read(server.address, frame_from_json(hello_header))) == code
    still_serves(server.address, token="secret")


@pytest.mark.parametrize("token", ["", "   ", "\t\n"])
def test_blank_tokens_are_refused_at_config_time(token, monkeypatch):
    with pytest.raises(ConfigError, match=r"env\.kwargs\.token: expected a non-blank string"):
        make_env(token=token, host="0.0.0.0")
    monkeypatch.setenv("RLGEAR_TEST_TOKEN", "  ")
    with pytest.raises(
        ConfigError, match=r"env\.kwargs\.token_env: .*RLGEAR_TEST_TOKEN holds only whitespace"
    ):
        make_env(token_env="RLGEAR_TEST_TOKEN", host="0.0.0.0")


# --- numbers that would poison training ---------------------------------------------------
@pytest.mark.parametrize("reward", [1.7e308, 1e39, -1e39])
def test_rewards_beyond_float32_are_refused_and_never_reach_training(serve, reward):
    server = serve(num_envs=1)
    sock, _ = started_episode(server.address)
    sock.sendall(step_frame(reward))
    assert error_code(read_until_eof(sock)) == ErrorCode.NON_FINITE
    still_serves(server.address)
    rewards = np.concatenate([ts.reward for ts in list(server.timesteps)])
    assert np.isfinite(rewards).all() and np.abs(rewards).max() <= 1.0


def test_max_abs_reward_bounds_what_one_client_contributes(serve):
    bounded = serve(num_envs=1, max_abs_reward=1000.0)
    sock, _ = started_episode(bounded.address)
    sock.sendall(step_frame(1e4))
    messages = read_until_eof(sock)
    assert error_code(messages) == ErrorCode.BAD_MESSAGE
    assert "max_abs_reward" in messages[-1].header["message"]
    still_serves(bounded.address)
    unbounded = serve(num_envs=1, max_abs_reward=None)  # null: any finite float32 (not the default)
    sock, decoder = started_episode(unbounded.address)
    sock.sendall(step_frame(1e20))
    replies: list = []
    while not replies:
        replies = decoder.feed(sock.recv(65536))
    assert replies[0].type == "action"
    sock.close()


def wait_for_log(caplog, text: str, timeout: float = 3.0) -> list[str]:
    """The log lines so far, once one holds ``text`` (the server logs from its stepping thread)."""
    deadline = time.monotonic() + timeout
    while not any(text in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("reward", [1e20, -1e20, 3.4e38])
def test_by_default_a_reward_that_would_overflow_float32_losses_drops_its_client_alone(serve, caplog, reward):
    """Finite float32 rewards this large square to infinity in a value loss: one stopped a whole run."""
    server = serve(num_envs=2)
    good = Client(server.address)
    good.init(np.zeros(3, np.float32))
    done = threading.Event()
    actions: list = []

    def play() -> None:  # the steps advance in lockstep: the good client must keep stepping meanwhile
        deadline = time.monotonic() + 10
        while not done.is_set() and time.monotonic() < deadline:
            actions.append(good.send(1.0, np.zeros(3, np.float32)))

    player = threading.Thread(target=play, daemon=True)
    player.start()
    with caplog.at_level(logging.WARNING, logger="rlgear.external"):
        sock, _ = started_episode(server.address)
        host, port = sock.getsockname()[:2]
        peer = f"{host}:{port}"
        sock.sendall(step_frame(reward))
        messages = read_until_eof(sock)
        lines = wait_for_log(caplog, peer)
    played_before = len(actions)
    deadline = time.monotonic() + 5
    while len(actions) < played_before + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    player.join(15)
    assert error_code(messages) == ErrorCode.BAD_MESSAGE
    assert (
        f"reward {reward:g} is beyond the server's env.kwargs.max_abs_reward = 1e+06"
        in messages[-1].header["message"]
    )
    assert any(peer in line and "BAD_MESSAGE (8)" in line and "max_abs_reward" in line for line in lines), (
        lines
    )
    assert len(actions) >= played_before + 3 and set(actions) <= {0, 1}  # the other client played on
    good.disconnect()
    rewards = np.concatenate([ts.reward for ts in list(server.timesteps)])
    assert np.abs(rewards).max() <= 1.0


def test_the_default_reward_bound_lets_large_rewards_of_real_envs_through(serve):
    server = serve(num_envs=1)
    client = Client(server.address)
    client.init(np.zeros(3, np.float32))
    for reward in (1e4, -1e4, 1e6, -1e6):  # 1e6: the default bound itself
        assert client.send(reward, np.zeros(3, np.float32)) in (0, 1)
    client.disconnect()
    rewards = np.concatenate([ts.reward for ts in list(server.timesteps)])
    assert {1e4, -1e4, 1e6, -1e6} <= set(rewards.tolist())


@pytest.mark.parametrize("value", [1e30, -3.4e38, 2e6])
def test_by_default_a_huge_observation_in_an_unbounded_dimension_is_refused(serve, value):
    """An observation of 1e30 where the space's bound is infinite: relu layers overflow float32 on it."""
    server = serve(num_envs=1)
    sock, _ = started_episode(server.address)
    sock.sendall(step_frame(1.0, [0.0, value, 0.0]))
    messages = read_until_eof(sock)
    assert error_code(messages) == ErrorCode.BAD_ARRAY
    assert (
        f"observation[1] = {np.float32(value):g} is beyond the server's env.kwargs.max_abs_observation = 1e+06"
        in messages[-1].header["message"]
    )
    still_serves(server.address)
    observations = np.concatenate([ts.observation for ts in list(server.timesteps)])
    assert np.abs(observations).max() <= 1.0


def test_the_observation_bound_grows_to_the_spaces_declared_bounds_and_null_turns_it_off(serve):
    wide = {
        "type": "Box",
        "shape": [3],
        "dtype": "float32",
        "low": [-2e9, "-inf", -1],
        "high": [2e9, "inf", 1],
    }
    declared = serve(num_envs=1, observation_space=wide)  # default bound: 2e9, the largest finite bound
    client = Client(declared.address)
    client.init(np.zeros(3, np.float32))
    assert client.send(1.0, np.array([1.5e9, -1.5e9, 0.0], np.float32)) in (0, 1)
    client.disconnect()
    off = serve(num_envs=1, max_abs_observation=None)
    sock, decoder = started_episode(off.address)
    sock.sendall(step_frame(1.0, [0.0, 1e30, 0.0]))
    replies: list = []
    while not replies:
        replies = decoder.feed(sock.recv(65536))
    assert replies[0].type == "action"
    sock.close()


def test_an_integer_observation_beyond_the_bound_is_refused_too(serve):
    int_space = {"type": "Box", "shape": [3], "dtype": "int64", "low": [-(2**62)] * 3, "high": [2**62] * 3}
    server = serve(num_envs=1, observation_space=int_space, max_abs_observation=1000)
    client = Client(server.address)
    client.init(np.array([1000, -1000, 0], np.int64))
    with pytest.raises(ServerError) as info:
        client.send(1.0, np.array([0, 0, 1001], np.int64))
    assert info.value.code == ErrorCode.BAD_ARRAY and "max_abs_observation" in info.value.detail


@pytest.mark.parametrize("key", ["max_abs_reward", "max_abs_observation"])
@pytest.mark.parametrize("value", [-1.0, "big", True])
def test_the_magnitude_bounds_must_be_non_negative_numbers(key, value):
    with pytest.raises(ConfigError, match=rf"^env\.kwargs\.{key}: expected a number >= 0, got {value!r}$"):
        make_env(**{key: value})


def test_metrics_with_an_infinite_statistic_answer_null_instead_of_killing_the_server(serve):
    server = serve(num_envs=1)
    server.env.server.recent_returns.append(float("inf"))  # what two 1.7e308 rewards used to make
    client = Client(server.address)
    assert client.metrics()["server"]["episode_return_mean"] is None
    play_episode(client, steps=2)
    client.disconnect()


def test_observations_outside_the_box_are_refused_unless_check_bounds_is_off(serve):
    checked = serve(num_envs=1, observation_space=BOUNDED_OBS)
    sock, _ = started_episode(checked.address)
    sock.sendall(step_frame(1.0, [100.0, 0.0, 0.0]))
    messages = read_until_eof(sock)
    assert error_code(messages) == ErrorCode.BAD_ARRAY
    assert (
        "observation[0] = 100 is outside the observation space [-4.8, 4.8]" in messages[-1].header["message"]
    )
    unchecked = serve(num_envs=1, observation_space=BOUNDED_OBS, check_bounds=False)
    sock, decoder = started_episode(unchecked.address)
    sock.sendall(step_frame(1.0, [100.0, 0.0, 0.0]))
    replies: list = []
    while not replies:
        replies = decoder.feed(sock.recv(65536))
    assert replies[0].type == "action"
    sock.close()


# --- slots held without end ----------------------------------------------------------------
def test_an_idle_client_is_timed_out_and_its_slot_freed(serve):
    server = serve(num_envs=1, idle_timeout_s=0.5)
    idle = raw(server.address)
    idle.sendall(encode("hello", {"protocol": 1}))  # handshakes, then never starts an episode
    started = time.monotonic()
    messages = read_until_eof(idle)
    assert [m.type for m in messages] == ["welcome", "error"]
    assert (
        messages[-1].header["code"] == ErrorCode.TIMEOUT
        and "idle_timeout_s" in messages[-1].header["message"]
    )
    assert 0.4 < time.monotonic() - started < 4.0
    still_serves(server.address)  # the only slot is free again


def test_silent_unauthenticated_sockets_cannot_lock_out_a_real_client(serve):
    server = serve(num_envs=2, token="secret", max_pending_handshakes=4, handshake_timeout_s=5.0)
    silent = [raw(server.address) for _ in range(16)]
    time.sleep(0.3)
    still_serves(server.address, token="secret")  # within the 5 s the silent ones may wait
    refused = [error_code(read_until_eof(sock, timeout=0.5)) for sock in silent[:8]]
    assert refused.count(ErrorCode.SERVER_FULL) >= 8 - 4
    for sock in silent[8:]:
        sock.close()


# --- the operator sees who was refused -------------------------------------------------------
def test_refused_and_dropped_clients_are_logged_with_address_reason_and_code(serve, caplog):
    server = serve(num_envs=1, token="secret")
    with caplog.at_level(logging.WARNING, logger="rlgear.external"):
        sock = raw(server.address)
        port = sock.getsockname()[1]
        sock.sendall(encode("hello", {"protocol": 1, "token": "wrong"}))
        read_until_eof(sock)
        client = Client(server.address, token="secret")
        client.init(np.zeros(3, np.float32))
        client.sock.close()  # gone mid-episode, without bye
        deadline = time.monotonic() + 3
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        f"127.0.0.1:{port}" in line and "AUTH_FAILED (4)" in line and "wrong token" in line for line in lines
    )
    assert any("disconnected mid-episode" in line for line in lines), lines


def test_the_refusal_log_is_rate_limited_per_reason(caplog):
    limited = RateLimitedLog(window_s=0.2, lines=3)
    with caplog.at_level(logging.WARNING, logger="rlgear.external"):
        for i in range(10):
            limited.warning("AUTH_FAILED", f"client {i} refused")
        limited.warning("TIMEOUT", "client x timed out")  # another reason has its own budget
        time.sleep(0.25)
        limited.warning("AUTH_FAILED", "client 10 refused")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:4] == [f"external env: client {i} refused" for i in range(3)] + [
        "external env: client x timed out"
    ]
    assert "external env: 7 more AUTH_FAILED line(s) suppressed" in lines[4]
    assert lines[5] == "external env: client 10 refused"


# --- issue 37: floods, slow frames, message rate -------------------------------------------------
def silent_flood(address: str, rate: float, seconds: float, held: list) -> threading.Thread:
    """A thread opening ``rate`` silent connections a second for ``seconds``, into ``held``.

    It never sends, reads or closes them (the test closes them): refused sockets
    the attacker leaves open are what used to fill the server's connection cap.
    """
    host, port = address.rsplit(":", 1)

    def run():
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            while len(held) < int(elapsed * rate) + 1:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.connect_ex((host, int(port)))
                held.append(sock)
            time.sleep(0.5 / rate)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def authenticated_hello(address: str, token: str) -> list:
    """A real client's handshake, first try, then bye: what the server answered."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(encode("hello", {"protocol": 1, "token": token}) + encode("bye"))
    return read_until_eof(sock)  # welcome, bye (its slot is free once the client has its bye)


def test_a_flood_of_silent_connections_never_refuses_real_clients(serve):
    """At 300 silent connections a second, held open by the attacker, every real hello gets in
    (it used to be refused: 'connection limit reached', refused sockets counting for a second)."""
    server = serve(num_envs=2, token="secret")  # default budgets
    playing = Client(server.address, token="secret")  # got in before the flood; must keep playing
    held: list[socket.socket] = []
    flood = silent_flood(server.address, rate=300.0, seconds=2.0, held=held)
    try:
        time.sleep(1.2)  # about 360 silent sockets: well past every default budget
        replies = [authenticated_hello(server.address, "secret") for _ in range(5)]
        play_episode(playing, steps=2)
    finally:
        flood.join(5)
        for sock in held:
            sock.close()
    assert len(held) > 300
    assert [[m.type for m in r] for r in replies] == [["welcome", "bye"]] * 5, [
        m.header for r in replies for m in r
    ]
    playing.disconnect()


def test_at_the_connection_cap_the_oldest_unauthenticated_socket_makes_room(serve):
    server = serve(num_envs=2, max_connections=6, handshake_timeout_s=5.0)
    silent = [raw(server.address) for _ in range(6)]  # the cap, all before their hello
    time.sleep(0.2)
    newcomer = raw(server.address)
    newcomer.sendall(HELLO)
    decoder = FrameDecoder()
    replies: list = []
    while not replies:
        replies = decoder.feed(newcomer.recv(65536))
    assert replies[0].type == "welcome"
    assert error_code(read_until_eof(silent[0])) == ErrorCode.SERVER_FULL  # the oldest made room
    newcomer.close()
    for sock in silent[1:]:
        sock.close()


def test_a_frame_that_stalls_after_its_length_prefix_is_dropped_and_frees_the_slot(serve):
    """Handshaken clients each partway through a 1 MiB frame used to hold every slot for good."""
    server = serve(num_envs=2, frame_timeout_s=0.5)
    slow = []
    for _ in range(2):  # every slot
        sock = raw(server.address)
        sock.sendall(HELLO)
        sock.sendall(struct.pack(">II", 1 << 20, 20) + b'{"type": "metrics", ')  # 1 MiB announced
        slow.append(sock)
    started = time.monotonic()
    for _ in range(15):  # then a byte every 0.1 s: progress, but never the whole frame in time
        time.sleep(0.1)
        for sock in slow:
            with contextlib.suppress(OSError):
                sock.send(b" ")
    for sock in slow:
        messages = read_until_eof(sock)
        assert [m.type for m in messages] == ["welcome", "error"], [m.header for m in messages]
        assert messages[-1].header["code"] == ErrorCode.TIMEOUT
        assert "frame_timeout_s" in messages[-1].header["message"]
    assert time.monotonic() - started < 4.0
    still_serves(server.address)  # the slots are free again


def test_a_pause_of_the_server_does_not_count_against_a_frames_deadline():
    """While the learner trains nobody reads; a frame begun before the pause still completes."""
    env = make_env(num_envs=1, frame_timeout_s=0.3)
    server = env.server
    try:
        sock = raw("{}:{}".format(*server.address))
        sock.sendall(HELLO)
        start = encode("start", None, {"observation": np.zeros(3, np.float32)})
        sock.sendall(start[:10])
        for _ in range(5):
            server.poll(0.02)  # welcome sent, the first 10 bytes of 'start' read
        (conn,) = server.conns.values()
        assert conn.state == "ready" and conn.decoder.buffered == 10
        time.sleep(0.6)  # a training pause, twice the deadline
        sock.sendall(start[10:])
        server.poll(0.05)
        assert conn.state == "ready" and conn.request is not None and conn.request.kind == "start"
        sock.close()
    finally:
        env.close()


# A client in its own process (the server's thread would slow a sender in this one): hello, then
# 'metrics' at argv[2] a second in 10 ms batches until argv[3] are sent (argv[4]: 'catch_up' after a
# stall, as a flood would, or 'steady'), reading replies meanwhile; prints what it sent and read.
METRICS_CLIENT = """
import json, socket, sys, threading, time
from rlgear.external.wire import FrameDecoder, encode
host, port = sys.argv[1].rsplit(":", 1)
rate, total, catch_up = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "catch_up"
sock = socket.create_connection((host, int(port)), timeout=30)
sock.sendall(encode("hello", {"protocol": 1}))
decoder, got, stop = FrameDecoder(1 << 24), {"metrics": 0, "errors": []}, threading.Event()
def read():
    while True:
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            break
        for msg in decoder.feed(data):
            got["metrics"] += msg.type == "metrics"
            if msg.type == "error":
                got["errors"].append(msg.header)
    stop.set()
threading.Thread(target=read, daemon=True).start()
time.sleep(0.1)
metrics, sent, start = encode("metrics"), 0, time.monotonic()
while sent < total and not stop.is_set():
    due = min(total, int((time.monotonic() - start) * rate) + 1)
    if due > sent:
        n = due - sent if catch_up else min(due - sent, int(rate * 0.01) + 1)
        try:
            sock.sendall(metrics * n)
        except OSError:
            break
        sent += n
        if not catch_up:
            start = max(start, time.monotonic() - sent / rate)  # owed messages are dropped, not sent later
    time.sleep(0.01)
seconds = time.monotonic() - start
deadline = time.monotonic() + 30
while got["metrics"] < sent and not stop.is_set() and time.monotonic() < deadline:
    time.sleep(0.02)
print(json.dumps({"sent": sent, "seconds": seconds, "answered": got["metrics"], "errors": got["errors"]}))
"""


def metrics_client(address: str, rate: float, total: int, pace: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", METRICS_CLIENT, address, str(rate), str(total), pace],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_default_message_rate_limit_drops_a_client_at_30000_per_s(serve):
    """It used to take 2 s of such a flood to empty a bucket of one second's burst, and a server
    slower than the flood never saw more than its own reading speed. Now the burst is 0.1 s, and a
    client that keeps the server reading it without a break for a second is over the limit too."""
    server = serve(num_envs=1)  # max_messages_per_s: 20000, the default
    flood = metrics_client(server.address, rate=30_000, total=90_000, pace="catch_up")
    assert [e["code"] for e in flood["errors"]] == [ErrorCode.RATE_LIMITED], flood
    assert "max_messages_per_s" in flood["errors"][0]["message"]
    still_serves(server.address)


def test_a_client_below_the_message_rate_limit_is_never_dropped(serve):
    server = serve(num_envs=1)
    steady = metrics_client(server.address, rate=2_000, total=3_000, pace="steady")
    # 3000 messages: more than the burst of 0.1 s (2000) the limit allows at once
    assert steady["errors"] == [] and steady["answered"] == steady["sent"] == 3_000, steady
