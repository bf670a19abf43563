"""docs/protocol.md's examples, driven against a live server: the doc and the server must agree."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pytest

from rlgear.external.wire import encode
from tests.test_external_server import Stepper, make_env

DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
CARTPOLE_OBS = {"type": "Box", "shape": [4], "dtype": "float32", "low": ["-inf"] * 4, "high": ["inf"] * 4}
DOC_TOKEN = "secret-or-null"  # the token the doc's hello example sends


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def json_examples() -> dict[str, dict]:
    """The doc's JSON examples by message type (the first example of each type)."""
    out: dict[str, dict] = {}
    for text in blocks("json"):  # every JSON block must be valid JSON
        example = json.loads(text)
        out.setdefault(example["type"], example)
    for text in re.findall(r"`(\{\"type\".*?\})`", DOC):  # inline ones, except templates like [...]
        if "..." not in text and ": N}" not in text:
            example = json.loads(text)
            out.setdefault(example["type"], example)
    return out


@pytest.fixture
def server():
    stepper = Stepper(make_env(num_envs=1, observation_space=CARTPOLE_OBS))
    yield stepper
    stepper.stop()


def test_the_session_of_section_9_runs_as_written_against_a_live_server(server):
    (session,) = [b for b in blocks("python") if "recv_exact" in b]
    port = int(server.address.rsplit(":", 1)[1])
    assert '("127.0.0.1", 9900)' in session
    namespace: dict = {}
    exec(session.replace('("127.0.0.1", 9900)', f'("127.0.0.1", {port})'), namespace)  # our own doc's code
    assert namespace["welcome"]["type"] == "welcome"
    assert namespace["header"]["type"] == "episode_end"


def test_the_framing_example_is_the_bytes_the_encoder_writes():
    assert '`00 00 00 12 | 00 00 00 0e | {"type":"bye"}`' in DOC
    assert encode("bye") == bytes.fromhex("00000012 0000000e") + b'{"type":"bye"}'


def test_the_json_examples_are_what_the_server_accepts_and_answers():
    examples = json_examples()
    assert {"hello", "welcome", "step", "metrics", "error"} <= set(examples)
    stepper = Stepper(make_env(num_envs=1, observation_space=CARTPOLE_OBS, token=DOC_TOKEN))
    try:
        host, port = stepper.address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        send, recv = _session(sock)
        send(examples["hello"])  # verbatim, token included
        welcome = recv()
        assert set(welcome) == set(examples["welcome"])
        send({"type": "start"}, np.zeros(4, np.float32))
        assert recv()["type"] == "action"
        send(examples["step"], np.ones(4, np.float32))  # verbatim
        assert recv()["type"] == "action"
        send({"type": "metrics"})
        metrics = recv()
        doc_metrics = examples["metrics"]
        assert set(metrics) == set(doc_metrics)
        assert set(metrics["server"]) == set(doc_metrics["server"])
        assert set(metrics["client"]) == set(doc_metrics["client"])
        send({"type": "step", "reward": "1"}, np.ones(4, np.float32))
        error = recv()
        assert set(error) == set(examples["error"]) and error["name"] == "BAD_MESSAGE"
        sock.close()
    finally:
        stepper.stop()


def _session(sock):
    """send/recv of whole frames with the rlgear wire codec (the session test above uses the doc's own)."""
    from rlgear.external.wire import FrameDecoder

    decoder = FrameDecoder()
    pending: list = []

    def send(header: dict, observation=None) -> None:
        fields = {k: v for k, v in header.items() if k != "type"}
        arrays = None if observation is None else {"observation": observation}
        sock.sendall(encode(header["type"], fields, arrays))

    def recv() -> dict:
        while not pending:
            pending.extend(decoder.feed(sock.recv(65536)))
        message = pending.pop(0)
        return {**message.header, **({"arrays": list(message.arrays)} if message.arrays else {})}

    return send, recv
