"""The external env's server: handshake, episodes as TimeSteps, safety limits, fuzzing a live server."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlgear import env as env_mod
from rlgear.errors import ConfigError
from rlgear.external.client import Client
from rlgear.external.wire import ErrorCode, FrameDecoder, ServerError, WireError, encode
from rlgear.plugins.envs.external import ExternalAdapter
from rlgear.timestep import StepType

OBS_SPACE = {"type": "Box", "shape": [3], "dtype": "float32", "low": ["-inf"] * 3, "high": ["inf"] * 3}
ACT_SPACE = {"type": "Discrete", "n": 2}


def make_env(num_envs=2, **kwargs):
    settings_ = {"observation_space": OBS_SPACE, "action_space": ACT_SPACE, "port": 0, **kwargs}
    return ExternalAdapter().make("test", num_envs, kwargs=settings_)


class Stepper:
    """Steps an ExternalVectorEnv in a thread, as the evaluator would, recording every TimeStep."""

    def __init__(self, env):
        self.env = env
        self.timesteps = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        env_mod.stop_requested.clear()
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.env.server.address
        return f"{host}:{port}"

    def _run(self):
        rng = np.random.default_rng(0)
        try:
            ts = self.env.reset()
            while True:
                self.timesteps.append(ts)
                ts = self.env.step(rng.integers(0, 2, self.env.num_envs))
        except env_mod.EnvInterrupted:
            pass
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self):
        env_mod.stop_requested.set()
        self.thread.join(10)
        env_mod.stop_requested.clear()
        self.env.close()
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error

    def rows(self, slot):
        """(step_type, reward, discount, valid) of one slot over time."""
        return [
            (int(ts.step_type[slot]), float(ts.reward[slot]), float(ts.discount[slot]), bool(ts.valid[slot]))
            for ts in self.timesteps
        ]


@pytest.fixture
def server():
    stepper = Stepper(make_env(num_envs=2, handshake_timeout_s=0.5, max_connections=6))
    yield stepper
    stepper.stop()


def play_episode(client: Client, steps: int = 3, terminated: bool = True) -> list:
    actions = [client.init(np.zeros(3, np.float32))]
    for k in range(steps - 1):
        actions.append(client.send(1.0, np.full(3, k, np.float32)))
    end = client.send(1.0, np.ones(3, np.float32), terminated=terminated, truncated=not terminated)
    assert end is None
    return actions


def raw(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def read_until_eof(sock: socket.socket, timeout: float = 5.0) -> list:
    """Every message the server sends until it closes (decoded with the protocol's decoder)."""
    sock.settimeout(timeout)
    decoder = FrameDecoder(1 << 24)
    messages = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        messages.extend(decoder.feed(data))
    sock.close()
    return messages


HELLO = encode("hello", {"protocol": 1, "token": None})


def hello(address: str) -> socket.socket:
    sock = raw(address)
    sock.sendall(HELLO)
    decoder = FrameDecoder()
    while True:
        msgs = decoder.feed(sock.recv(65536))
        if msgs:
            assert msgs[0].type == "welcome", msgs[0].header
            return sock


def error_code(messages: list) -> int | None:
    errors = [m for m in messages if m.type == "error"]
    return errors[-1].header["code"] if errors else None


# --- episodes ------------------------------------------------------------------------
def test_client_episodes_become_timesteps_with_alf_semantics(server):
    client = Client(server.address)
    assert client.observation_space.shape == (3,) and client.action_space.n == 2
    actions = play_episode(client, steps=3, terminated=True)
    assert all(a in (0, 1) for a in actions)
    play_episode(client, steps=2, terminated=False)
    slot = client.slot
    metrics = client.metrics()
    client.disconnect()
    assert metrics["client"]["episodes"] == 2 and metrics["server"]["episodes"] == 2
    time.sleep(0.3)
    valid = [r for r in server.rows(slot) if r[3]]
    assert [r[0] for r in valid] == [
        0,
        1,
        1,
        2,
        0,
        1,
        2,
    ]  # FIRST MID MID LAST(terminated) FIRST MID LAST(truncated)
    assert valid[3][2] == 0.0 and valid[6][2] == 1.0  # discounts at the two LASTs
    assert valid[0][1] == 0.0 and valid[1][1] == 1.0  # reward 0 at FIRST
    invalid = [r for r in server.rows(slot) if not r[3]]
    assert all(r[0] == StepType.LAST for r in invalid)


def test_prev_action_is_the_action_the_client_received(server):
    client = Client(server.address)
    first = client.init(np.zeros(3, np.float32))
    client.send(0.5, np.ones(3, np.float32))
    slot = client.slot
    client.disconnect()
    time.sleep(0.2)
    mids = [ts for ts in server.timesteps if ts.valid[slot] and ts.step_type[slot] == StepType.MID]
    assert mids and int(mids[0].prev_action[slot]) == first


def test_a_client_dropped_mid_episode_yields_an_invalid_row_and_its_slot_is_reused(server):
    holder = Client(server.address)  # holds one of the 2 slots throughout
    client = Client(server.address)
    client.init(np.zeros(3, np.float32))
    client.send(1.0, np.ones(3, np.float32))
    slot = client.slot
    assert slot != holder.slot
    client.sock.close()  # vanish mid-episode
    client.sock = None
    time.sleep(0.3)
    other = Client(server.address)
    assert other.slot == slot  # the dropped client's slot is the only free one, and it is given out again
    play_episode(other, steps=2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the server records the new client's LAST row asynchronously
        rows = server.rows(slot)
        if [r[3] for r in rows].count(True) >= 5:  # the dropped client's 2 rows and the new client's 3
            break
        time.sleep(0.05)
    other.disconnect()
    holder.disconnect()
    kinds = [(r[0], r[3]) for r in rows]
    dropped_at = kinds.index((int(StepType.MID), True))
    # after the MID, the next row of that slot is invalid (the abort), never a FIRST right away
    assert kinds[dropped_at + 1] == (int(StepType.LAST), False)
    # then the same slot carries the new client's whole episode: FIRST, MID, and a terminated LAST
    reused = [r for r in rows[dropped_at + 2 :] if r[3]]
    assert [r[0] for r in reused] == [int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)]
    assert [r[1:3] for r in reused[1:]] == [(1.0, 1.0), (1.0, 0.0)]


# --- safety and load ---------------------------------------------------------------------
def test_token_is_required_to_bind_a_non_loopback_address():
    with pytest.raises(ConfigError, match="token"):
        make_env(host="0.0.0.0")


def test_wrong_or_missing_token_is_refused():
    stepper = Stepper(make_env(token="s3cret"))
    try:
        with pytest.raises(ServerError) as info:
            Client(stepper.address, token="wrong")
        assert info.value.code == ErrorCode.AUTH_FAILED
        with pytest.raises(ServerError):
            Client(stepper.address)
        client = Client(stepper.address, token="s3cret")
        play_episode(client)
        client.disconnect()
    finally:
        stepper.stop()


def test_non_loopback_bind_with_token_works():
    stepper = Stepper(make_env(host="0.0.0.0", token="s3cret"))
    try:
        client = Client(f"127.0.0.1:{stepper.env.server.address[1]}", token="s3cret")
        play_episode(client)
        client.disconnect()
    finally:
        stepper.stop()


def test_admission_control_refuses_with_an_error_frame_when_slots_are_full(server):
    clients = [Client(server.address), Client(server.address)]  # 2 slots
    sock = raw(server.address)
    sock.sendall(HELLO)
    assert error_code(read_until_eof(sock)) == ErrorCode.SERVER_FULL
    clients[0].disconnect()
    time.sleep(0.3)
    late = Client(server.address)  # a freed slot is reused
    play_episode(late)
    for c in (clients[1], late):
        c.disconnect()


def test_memory_threshold_refuses_new_clients():
    stepper = Stepper(make_env(max_memory_mb=1))
    try:
        sock = raw(stepper.address)
        sock.sendall(HELLO)
        assert error_code(read_until_eof(sock)) == ErrorCode.OVERLOADED
    finally:
        stepper.stop()


def test_rate_limit_drops_a_flooding_client():
    stepper = Stepper(make_env(max_messages_per_s=50))
    try:
        sock = hello(stepper.address)
        sock.sendall(encode("metrics") * 200)
        assert error_code(read_until_eof(sock)) == ErrorCode.RATE_LIMITED
    finally:
        stepper.stop()


def test_handshake_timeout(server):
    sock = raw(server.address)
    assert error_code(read_until_eof(sock)) == ErrorCode.TIMEOUT


OBS = np.zeros(3, np.float32)
BAD_CASES = {
    "wrong dtype": (encode("start", None, {"observation": OBS.astype(np.float64)}), ErrorCode.BAD_ARRAY),
    "wrong shape": (encode("start", None, {"observation": np.zeros(4, np.float32)}), ErrorCode.BAD_ARRAY),
    "NaN observation": (
        encode("start", None, {"observation": np.full(3, np.nan, np.float32)}),
        ErrorCode.NON_FINITE,
    ),
    "no observation": (encode("start"), ErrorCode.BAD_ARRAY),
    "unknown type": (encode("teleport"), ErrorCode.UNKNOWN_TYPE),
    "step before start": (encode("step", {"reward": 1.0}, {"observation": OBS}), ErrorCode.OUT_OF_ORDER),
    "oversized": (struct.pack(">I", 1 << 30), ErrorCode.TOO_LARGE),
    "not json": (struct.pack(">II", 7, 3) + b"{{{", ErrorCode.BAD_FRAME),
    "hello twice": (HELLO, ErrorCode.OUT_OF_ORDER),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_a_bad_message_gets_an_error_frame_and_only_that_client_is_dropped(server, case):
    good = Client(server.address)
    good.init(OBS)
    frame, code = BAD_CASES[case]
    bad = hello(server.address)
    bad.sendall(frame)
    assert error_code(read_until_eof(bad)) == code
    assert good.send(1.0, OBS) in (0, 1)  # the other client plays on
    assert good.send(1.0, OBS, terminated=True) is None
    good.disconnect()


def test_nan_or_bool_reward_is_refused(server):
    for header, code in (
        (b'{"type":"step","reward":NaN', ErrorCode.NON_FINITE),
        (b'{"type":"step","reward":true', ErrorCode.BAD_MESSAGE),
    ):
        sock = hello(server.address)
        sock.sendall(encode("start", None, {"observation": OBS}))
        FrameDecoder().feed(sock.recv(65536))  # the action
        spec = b',"arrays":[{"name":"observation","dtype":"float32","shape":[3]}]}'
        head = header + spec
        sock.sendall(struct.pack(">II", 4 + len(head) + 12, len(head)) + head + OBS.tobytes())
        assert error_code(read_until_eof(sock)) == code


# --- fuzzing a live server -------------------------------------------------------------------
def valid_frames():
    return st.sampled_from(
        [
            encode("start", None, {"observation": OBS}),
            encode("step", {"reward": 1.0, "terminated": True}, {"observation": OBS}),
            encode("metrics"),
            encode("bye"),
        ]
    )


def mangled(frames: list[bytes], data: st.DataObject) -> bytes:
    out = b""
    for frame in frames:
        how = data.draw(st.sampled_from(["keep", "truncate", "flip", "length"]))
        if how == "truncate":
            frame = frame[: data.draw(st.integers(0, len(frame)))]
        elif how == "flip" and len(frame) > 8:
            i = data.draw(st.integers(8, len(frame) - 1))
            frame = frame[:i] + bytes([frame[i] ^ 0xFF]) + frame[i + 1 :]
        elif how == "length":
            frame = struct.pack(">I", data.draw(st.integers(0, 2**32 - 1))) + frame[4:]
        out += frame
    return out


@pytest.fixture(scope="module")
def fuzz_server():
    stepper = Stepper(make_env(num_envs=4, handshake_timeout_s=0.5, max_connections=40))
    yield stepper
    stepper.stop()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    prefix=st.sampled_from(["none", "hello"]),
    junk=st.binary(max_size=600),
    frames=st.lists(valid_frames(), max_size=3),
    data=st.data(),
)
def test_fuzzed_clients_never_take_the_server_down(fuzz_server, prefix, junk, frames, data):
    sock = raw(fuzz_server.address)
    try:
        if prefix == "hello":
            sock.sendall(HELLO)
        sock.sendall(mangled(frames, data) + junk)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the server may already have dropped us
    try:
        messages = read_until_eof(sock)
    except WireError as err:  # what the server sent must itself be well-formed
        raise AssertionError(f"server sent a malformed frame: {err}") from err
    for message in messages:
        assert message.type in ("welcome", "action", "episode_end", "metrics", "bye", "error")
        if message.type == "error":
            assert message.header["code"] in {int(c) for c in ErrorCode}
    good = Client(fuzz_server.address, reconnect_timeout_s=5)
    play_episode(good, steps=1)
    good.disconnect()


# --- a client written only from docs/protocol.md ---------------------------------------------
def _doc_send(sock, header, arrays=()):
    specs, payload = [], b""
    for name, a in arrays:
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        specs.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape)})
        payload += a.tobytes()
    if specs:
        header = {**header, "arrays": specs}
    head = json.dumps(header).encode()
    sock.sendall(struct.pack(">II", 4 + len(head) + len(payload), len(head)) + head + payload)


def _doc_recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _doc_recv(sock):
    (length,) = struct.unpack(">I", _doc_recv_exact(sock, 4))
    body = _doc_recv_exact(sock, length)
    (head_len,) = struct.unpack(">I", body[:4])
    header = json.loads(body[4 : 4 + head_len])
    arrays, offset = {}, 4 + head_len
    for spec in header.get("arrays", []):
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        count = int(np.prod(spec["shape"]))
        arrays[spec["name"]] = np.frombuffer(body, dtype, count, offset).reshape(spec["shape"])
        offset += count * dtype.itemsize
    return header, arrays


def test_a_client_written_from_the_protocol_doc_plays_an_episode(server):
    """Raw socket + struct + json + numpy only, as in docs/protocol.md section 9 (no rlgear.external.client/wire)."""
    host, port = server.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _doc_send(sock, {"type": "hello", "protocol": 1, "token": None})
    welcome, _ = _doc_recv(sock)
    assert welcome["type"] == "welcome" and welcome["protocol"] == 1
    assert welcome["observation_space"]["shape"] == [3] and welcome["action_space"] == ACT_SPACE
    _doc_send(sock, {"type": "start"}, [("observation", np.zeros(3, np.float32))])
    header, arrays = _doc_recv(sock)
    assert header["type"] == "action" and arrays["action"].shape == () and arrays["action"].dtype == np.int64
    for k in range(5):
        _doc_send(sock, {"type": "step", "reward": 1.0}, [("observation", np.full(3, k, np.float32))])
        header, arrays = _doc_recv(sock)
        assert header["type"] == "action" and int(arrays["action"]) in (0, 1)
    _doc_send(
        sock, {"type": "step", "reward": 1.0, "terminated": True}, [("observation", np.ones(3, np.float32))]
    )
    header, _ = _doc_recv(sock)
    assert header["type"] == "episode_end"
    _doc_send(sock, {"type": "metrics"})
    header, _ = _doc_recv(sock)
    assert header["client"]["episodes"] == 1 and header["client"]["steps"] == 6
    _doc_send(sock, {"type": "bye"})
    assert _doc_recv(sock)[0]["type"] == "bye"
    sock.close()


def test_client_reconnects_with_backoff_when_the_server_comes_back():
    first = Stepper(make_env())
    port = first.env.server.address[1]
    client = Client(first.address, backoff_s=(0.05, 0.2))
    client.init(OBS)
    first.stop()  # the server goes away mid-episode
    restarted: list[Stepper] = []
    timer = threading.Timer(0.5, lambda: restarted.append(Stepper(make_env(port=port))))
    timer.start()
    try:
        action = client.send(1.0, OBS)  # reconnects, and starts a new episode there
        assert action in (0, 1)
        assert client.reconnects == 1
        assert client.send(1.0, OBS, terminated=True) is None
        assert client.metrics()["client"]["episodes"] == 1
        client.disconnect()
    finally:
        timer.join()
        for stepper in restarted:
            stepper.stop()
