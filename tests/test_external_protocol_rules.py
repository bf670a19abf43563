"""docs/protocol.md's rules on pipelining, end of training and frame limits, driven by raw sockets.

Each test names the rule of the doc it checks. The server is live (stepped in a
thread as the evaluator would) and the clients speak the wire format by hand, so
they can do what the Python client never does: pipeline, misbehave, stop reading.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.external.wire import ErrorCode, FrameDecoder, Message, encode
from tests.test_external_server import HELLO, Stepper, make_env, raw

DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
TEXT = " ".join(DOC.split())  # the doc's prose with its line breaks and indents as single spaces
ROOT = Path(__file__).resolve().parent.parent
OBS = np.zeros(3, np.float32)
METRICS = encode("metrics")


class Peer:
    """A raw-socket client: sends frames as given, reads replies one at a time."""

    def __init__(self, address: str, hello: bool = True):
        self.sock = raw(address)
        self.decoder = FrameDecoder(1 << 24)
        self.pending: list[Message] = []
        self.reset = False  # the connection ended with a reset instead of a clean EOF
        self.welcome: Message | None = None
        if hello:
            self.sock.sendall(HELLO)
            self.welcome = self.next()
            assert self.welcome.type == "welcome", self.welcome.header

    def send(self, kind: str, **fields) -> None:
        self.sock.sendall(self.frame(kind, **fields))

    @staticmethod
    def frame(kind: str, **fields) -> bytes:
        if kind == "start":
            return encode("start", None, {"observation": OBS})
        if kind == "step":
            step = {"reward": 1.0, "terminated": False, "truncated": False, **fields}
            return encode("step", step, {"observation": OBS})
        return encode(kind, fields or None)

    def next(self, timeout: float = 10.0) -> Message:
        message = self.poll(timeout)
        assert message is not None, f"no reply within {timeout} s"
        return message

    def poll(self, timeout: float) -> Message | None:
        """The next message, or None if none arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def until_eof(self, timeout: float = 10.0) -> list[Message]:
        """Every message left until the server closes (a reset is recorded in ``self.reset``)."""
        out, self.pending = self.pending, []
        self.sock.settimeout(timeout)
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                self.reset = True
                break
            if not data:
                break
            out.extend(self.decoder.feed(data))
        self.sock.close()
        return out


def mid_episode_pair(address: str) -> tuple[Peer, Peer]:
    """Two clients in mid-episode, both holding their action (both slots of a 2-slot server)."""
    a = Peer(address)
    a.send("start")
    assert a.next().type == "action"
    b = Peer(address)
    b.send("start")  # waits: a is mid-episode and the server steps every slot together
    a.send("step")
    assert a.next().type == "action" and b.next().type == "action"
    return a, b


# --- 1. pipelined metrics ----------------------------------------------------------------------
def test_the_doc_says_metrics_may_be_pipelined_while_a_start_or_step_waits():
    assert (
        "`metrics`: it may be sent at any time after `welcome`, also while a `start` or `step` waits" in TEXT
    )
    assert "its reply may arrive *before* the pending `action`" in TEXT


def test_metrics_sent_while_a_start_waits_is_answered_before_the_action(serve):
    server = serve(num_envs=2)
    a = Peer(server.address)
    a.send("start")
    assert a.next().type == "action"  # a is mid-episode now and does not step yet
    b = Peer(server.address)
    b.sock.sendall(Peer.frame("start") + METRICS)  # pipelined in one write
    reply = b.next()
    assert reply.type == "metrics", reply.header  # answered at once, the start still waits for a
    assert reply.header["client"] == {"slot": b.welcome.header["slot"], "episodes": 0, "steps": 0}
    assert reply.header["server"]["clients"] == 2
    assert b.poll(0.3) is None  # the action waits for the step of every mid-episode client
    a.send("step")
    assert b.next().type == "action"
    assert a.next().type == "action"


def test_metrics_sent_while_a_step_waits_are_answered_before_the_action(serve):
    server = serve(num_envs=2)
    a, b = mid_episode_pair(server.address)
    b.send("step")
    time.sleep(0.2)  # the step is read and waits for a
    b.sock.sendall(METRICS * 3)
    replies = [b.next() for _ in range(3)]
    assert [m.type for m in replies] == ["metrics"] * 3
    assert replies[-1].header["client"]["steps"] == 0  # the waiting step is not taken yet
    assert b.poll(0.3) is None
    a.send("step")
    assert b.next().type == "action" and a.next().type == "action"
    b.send("metrics")
    assert b.next().header["client"]["steps"] == 1  # now it is: one step, answered once


# --- 2. a second request while one waits ----------------------------------------------------------
def test_the_doc_names_a_second_request_while_one_waits_out_of_order():
    assert "A second `start` or `step` while one waits is an error (`OUT_OF_ORDER`)." in TEXT
    assert "| 11 | `OUT_OF_ORDER` |" in TEXT and int(ErrorCode.OUT_OF_ORDER) == 11


@pytest.mark.parametrize("waiting", ["start", "step"])
@pytest.mark.parametrize("second", ["start", "step"])
def test_a_second_request_while_one_waits_is_out_of_order_and_only_that_client_is_dropped(
    serve, waiting, second
):
    server = serve(num_envs=2)
    if waiting == "start":
        a = Peer(server.address)
        a.send("start")
        assert a.next().type == "action"
        b = Peer(server.address)
        b.send("start")  # waits for a's step
    else:
        a, b = mid_episode_pair(server.address)
        b.send("step")  # waits for a's step
    time.sleep(0.2)
    b.send(second)
    messages = b.until_eof()
    assert [m.type for m in messages] == ["error"], [m.header for m in messages]
    error = messages[0].header
    assert (error["code"], error["name"]) == (int(ErrorCode.OUT_OF_ORDER), "OUT_OF_ORDER")
    assert "before the previous reply" in error["message"]
    assert not b.reset  # the error frame, then a clean close
    a.send("step")  # the other client plays on alone, without waiting for the dropped one
    assert a.next(timeout=5).type == "action"
    a.send("step", terminated=True)
    assert a.next().type == "episode_end"


# --- 3. end of training ------------------------------------------------------------------------
def test_the_doc_promises_shutting_down_to_every_client_and_an_error_frame_before_every_close():
    assert (
        "every connected client gets `SHUTTING_DOWN` and is closed, including one that has not said "
        "`hello` yet and one whose `start` or `step` waits for its reply" in TEXT
    )
    assert "Replies already queued for a client go out before the frame." in TEXT
    assert "Every close by the server is preceded by an `error` frame, with two exceptions" in TEXT
    assert "| 14 | `SHUTTING_DOWN` | the server is stopping | yes, later |" in TEXT


def _refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_when_the_server_stops_every_connection_gets_shutting_down_then_eof(serve):
    stepper = serve(num_envs=4)
    address = stepper.address
    waiting, silent = mid_episode_pair(address)
    waiting.send("step")  # waits for `silent`, which never steps
    idle = Peer(address)  # between episodes
    late = Peer(address)
    late.send("start")  # waits too
    no_hello = Peer(address, hello=False)  # connected, has not said hello yet
    time.sleep(0.3)
    # the run stops: the env loop ends (Ctrl-C, SIGTERM or a stop criterion), then the env closes
    stepper.stop()
    for name, peer in [
        ("waiting", waiting),
        ("silent", silent),
        ("idle", idle),
        ("late", late),
        ("no_hello", no_hello),
    ]:
        messages = peer.until_eof()
        assert [m.type for m in messages] == ["error"], (name, [m.header for m in messages])
        assert messages[0].header["code"] == ErrorCode.SHUTTING_DOWN, (name, messages[0].header)
        assert messages[0].header["name"] == "SHUTTING_DOWN"
    assert _refused(address)  # the listening socket is closed: connection refused


def _stop_stepping(stepper: Stepper) -> None:
    """End the env loop as Stepper.stop does, without closing the env: nobody polls after this."""
    rlgear.env.stop_requested.set()
    stepper.thread.join(10)
    rlgear.env.stop_requested.clear()
    assert not stepper.thread.is_alive()


def test_a_request_that_arrives_after_the_last_step_still_gets_shutting_down():
    """The run ends while a client's next step is on its way: the server never reads it, and the
    client still gets its SHUTTING_DOWN (on loopback; a reset may follow the frame)."""
    stepper = Stepper(make_env(num_envs=1))
    peer = Peer(stepper.address)
    peer.send("start")
    assert peer.next().type == "action"
    _stop_stepping(stepper)
    peer.send("step")  # nobody polls any more: it stays in the socket's receive buffer
    time.sleep(0.1)
    stepper.env.close()
    messages = peer.until_eof()
    assert [m.type for m in messages] == ["error"]
    assert messages[0].header["code"] == ErrorCode.SHUTTING_DOWN
    # "read until EOF": the server drains the unread request instead of resetting the connection
    # (a reset makes some systems, Windows among them, discard the frame before the client reads it)
    assert not peer.reset


def test_a_client_with_replies_still_unread_gets_them_and_shutting_down_after_them():
    """Replies the kernel could not take yet wait in the server's own buffer when the run stops:
    a client that reads them gets them, then SHUTTING_DOWN (well within the doc's 8 MiB)."""
    stepper = Stepper(make_env(num_envs=1, max_messages_per_s=10_000_000.0))
    host, port = stepper.address.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.settimeout(10)
    sock.sendall(HELLO + METRICS * 20_000)  # about 3 MB of replies, not read yet
    deadline = time.monotonic() + 30
    while not any(conn.outbox for conn in list(stepper.env.server.conns.values())):
        assert time.monotonic() < deadline, "the replies never piled up in the server's buffer"
        time.sleep(0.05)
    time.sleep(0.5)  # the rest of the requests are answered
    _stop_stepping(stepper)
    (conn,) = stepper.env.server.conns.values()
    assert 0 < len(conn.outbox) < 8 << 20
    closer = threading.Thread(target=stepper.env.close)
    closer.start()  # the server stops while the client reads
    decoder = FrameDecoder(1 << 24)
    messages: list[Message] = []
    reset = False
    try:
        while data := sock.recv(1 << 16):
            messages.extend(decoder.feed(data))
    except ConnectionResetError:
        reset = True
    sock.close()
    closer.join(10)
    assert not closer.is_alive()
    types = [m.type for m in messages]
    assert types[0] == "welcome" and set(types[1:-1]) == {"metrics"}, types[-3:]
    assert types[-1] == "error" and messages[-1].header["code"] == ErrorCode.SHUTTING_DOWN
    assert not reset


def test_at_the_end_of_a_training_run_a_playing_client_gets_shutting_down_and_new_ones_are_refused(
    tmp_path,
):
    address_file = tmp_path / "address"
    config = config_mod.load(
        ROOT / "configs" / "ppo-cartpole-external.yaml",
        [
            "env.kwargs.port=0",
            f"env.kwargs.address_file={address_file}",
            "env.kwargs.min_clients=1",
            "workers.num_envs_per_worker=1",
            "training.train_batch_size=64",
            "training.sgd_minibatch_size=64",
            "training.num_sgd_iter=1",
            "training.min_env_steps_per_iteration=64",
            "stop={training_iteration: 2}",
            f"logging.dir={tmp_path / 'runs'}",
            "logging.tensorboard=false",
            "logging.progress=none",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
        ],
    )
    seen: dict = {}

    def play() -> None:
        deadline = time.monotonic() + 120
        while not (address_file.exists() and address_file.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        seen["address"] = address_file.read_text().strip()
        peer = Peer(seen["address"])
        obs = np.zeros(4, np.float32)
        steps = 0
        peer.sock.sendall(encode("start", None, {"observation": obs}))
        while True:
            try:
                reply = peer.next(timeout=60)
            except ConnectionError:
                seen["closed_without_frame"] = True
                return
            if reply.type == "error":
                seen["error"] = reply.header
                seen["after"] = peer.until_eof()
                seen["reset"] = peer.reset
                return
            steps += 1
            seen["steps"] = steps
            if reply.type == "episode_end":
                frame = encode("start", None, {"observation": obs})
            else:
                done = steps % 10 == 0
                frame = encode("step", {"reward": 1.0, "terminated": done}, {"observation": obs})
            with contextlib.suppress(OSError):  # closed meanwhile: the frames sent before are still read
                peer.sock.sendall(frame)

    client = threading.Thread(target=play, daemon=True)
    client.start()
    watchdog = threading.Timer(180, rlgear.env.stop_requested.set)  # a run waiting for a client that died
    watchdog.start()
    try:
        result = rlgear.train(config)
    finally:
        watchdog.cancel()
    client.join(60)
    assert not client.is_alive()
    assert result["training_iteration"] == 2 and seen.get("steps", 0) >= 128
    assert "closed_without_frame" not in seen, seen
    assert seen["error"]["code"] == ErrorCode.SHUTTING_DOWN and seen["error"]["name"] == "SHUTTING_DOWN"
    assert seen["after"] == [] and not seen["reset"]  # nothing after the error frame, then a clean close
    assert _refused(seen["address"])


# --- 4. frame limits --------------------------------------------------------------------------------
def test_the_doc_states_the_frame_limit_and_the_unread_replies_limit():
    assert "A larger value is answered with `TOO_LARGE` as soon as the 4 bytes arrive." in TEXT
    assert "a client that lets more than 8 MiB of replies pile up unread is closed without one" in TEXT
    from rlgear.plugins.envs.external import server as server_mod

    assert server_mod._MAX_OUTBOX == 8 << 20


def _padded_metrics(frame_length: int) -> bytes:
    """A metrics frame whose frame_length is exactly ``frame_length`` (an ignored field pads it)."""
    head_len = frame_length - 4
    base = len(json.dumps({"type": "metrics", "pad": ""}, separators=(",", ":")))
    head = json.dumps({"type": "metrics", "pad": "x" * (head_len - base)}, separators=(",", ":")).encode()
    assert len(head) == head_len
    return struct.pack(">II", frame_length, head_len) + head


def test_a_frame_of_exactly_max_message_bytes_is_accepted_one_byte_more_is_too_large(serve):
    limit = 4096
    server = serve(num_envs=1, max_message_bytes=limit)
    peer = Peer(server.address)
    assert peer.welcome.header["max_message_bytes"] == limit
    peer.sock.sendall(_padded_metrics(limit))
    assert peer.next().type == "metrics"
    peer.sock.sendall(struct.pack(">I", limit + 1))  # only the length: the answer needs no more
    error = peer.next(timeout=5).header
    assert (error["code"], error["name"]) == (int(ErrorCode.TOO_LARGE), "TOO_LARGE")
    assert f"exceeds the limit of {limit}" in error["message"]
    assert peer.until_eof() == []


def test_a_fast_sender_streaming_an_oversized_frame_gets_too_large_then_a_clean_close(serve):
    """The client writes a whole 1 MiB + 1 frame and more behind it before reading: the server
    answers TOO_LARGE at the length, then drains what is still coming, so the client reads its
    error frame and an EOF rather than a reset."""
    server = serve(num_envs=1)  # default max_message_bytes: 1 MiB
    peer = Peer(server.address)
    limit = peer.welcome.header["max_message_bytes"]
    assert limit == 1 << 20
    oversized = _padded_metrics(limit + 1)
    peer.sock.settimeout(10)
    peer.sock.sendall(oversized + METRICS * 1000)
    peer.sock.shutdown(socket.SHUT_WR)
    messages = peer.until_eof()
    assert [m.type for m in messages] == ["error"], [m.header for m in messages]
    assert messages[0].header["code"] == ErrorCode.TOO_LARGE
    assert not peer.reset
    still = Peer(server.address)  # the server goes on
    still.send("metrics")
    assert still.next().type == "metrics"


def test_a_client_that_never_reads_is_closed_without_an_error_frame_once_8_mib_of_replies_wait(serve, caplog):
    server = serve(num_envs=1, max_messages_per_s=10_000_000.0)
    host, port = server.address.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for us
    sock.connect((host, int(port)))
    sock.settimeout(20)
    burst = METRICS * 2000
    sent_bytes = 0
    closed = False
    with caplog.at_level(logging.WARNING, logger="rlgear.external"):
        sock.sendall(HELLO)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                sent_bytes += sock.send(burst)  # what the kernel took (a send may take part of it)
            except OSError:  # reset or broken pipe: the server closed us
                closed = True
                break
    assert closed, f"still open after {sent_bytes // len(METRICS)} metrics requests"
    received = FrameDecoder(1 << 24)
    messages: list[Message] = []
    sock.settimeout(5)
    try:
        while data := sock.recv(65536):
            messages.extend(received.feed(data))
    except ConnectionResetError:
        pass
    sock.close()
    assert messages and messages[0].type == "welcome"
    assert {m.type for m in messages[1:]} <= {"metrics"}  # no error frame: it could not be read anyway
    # closed as soon as more than 8 MiB waited in the server's own buffer (the kernel's hold more)
    (dropped,) = [r.getMessage() for r in caplog.records if "bytes of replies unread" in r.getMessage()]
    unread = int(re.search(r"dropped: (\d+) bytes of replies unread", dropped).group(1))
    assert 8 << 20 < unread <= (8 << 20) + 1024  # by one metrics reply (about 160 bytes)
    assert not server.env.server.conns  # its connection and its buffer are gone
    still = Peer(server.address)  # its slot is free and the server goes on
    still.send("start")
    assert still.next().type == "action"
