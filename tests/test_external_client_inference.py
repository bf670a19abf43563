"""Protocol 2: clients that act locally with the server's policy as ONNX and upload their steps.

Most cases drive a live server (the ``serve`` fixture) through raw sockets with a real policy
export: a PPO CartPole policy built by a rollout worker and exported by ``rlgear.export``
(:class:`~rlgear.export.live.LivePolicyExport`), its weights version moved by hand where a test
needs a new version. The last test trains PPO from client processes acting locally.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.external.client import Client
from rlgear.external.wire import ErrorCode, FrameDecoder, Message, ServerError, encode
from tests.test_external_server import raw, read_until_eof

pytest.importorskip("onnxruntime", reason="needs onnxruntime: pip install 'rlgear[export]'")
pytest.importorskip("onnxscript", reason="needs onnxscript: pip install 'rlgear[export]'")

ROOT = Path(__file__).resolve().parent.parent
CARTPOLE_OBS = {
    "type": "Box", "shape": [4], "dtype": "float32",
    "low": [-4.8, "-inf", -0.41887903, "-inf"], "high": [4.8, "inf", 0.41887903, "inf"],
}  # fmt: skip
DISCRETE2 = {"type": "Discrete", "n": 2}


class Export:
    """A real policy export (PPO, CartPole spaces) whose weights version a test can move."""

    _shared: tuple | None = None  # (worker, first export): exporting takes seconds, once per session

    def __init__(self):
        if Export._shared is None:
            from rlgear.discovery import registry
            from rlgear.export.live import LivePolicyExport
            from rlgear.sampling.rollout_worker import RolloutWorker

            config = config_mod.load(
                ROOT / "configs" / "ppo-cartpole.yaml", ["workers.num_envs_per_worker=1"]
            )
            trainer = registry.load_algorithm(config.algorithm)
            worker = RolloutWorker(
                config, trainer.policy_class(config.backend), registry.load_env_adapter(config.env.adapter)
            )
            Export._shared = (worker, LivePolicyExport(worker).export())
        self.worker, (_, self.model, self.sidecar) = Export._shared
        self.weights = 0
        self.exports = 0

    def version(self) -> int:
        return self.weights

    def export(self):
        self.exports += 1
        return self.weights, self.model, self.sidecar


@pytest.fixture
def local_server(serve):
    """``local_server(**settings) -> (stepper, export)``: a server with CartPole spaces and a policy."""

    def start(**settings):
        stepper = serve(observation_space=CARTPOLE_OBS, action_space=DISCRETE2, **settings)
        export = Export()
        stepper.env.set_policy_export(export)
        return stepper, export

    return start


class Raw:
    """A protocol 2 client on a raw socket, one request and its reply at a time."""

    def __init__(self, address: str, inference: str = "client"):
        self.sock = raw(address)
        self.decoder = FrameDecoder(1 << 26)
        self.pending: list[Message] = []
        self.welcome = self.request(encode("hello", {"protocol": 2, "inference": inference}))

    def request(self, frame: bytes) -> Message:
        self.sock.sendall(frame)
        return self.reply()

    def reply(self, timeout: float = 10.0) -> Message:
        self.sock.settimeout(timeout)
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    def error(self) -> Message:
        """The error frame that ends the connection (what is still to come, read to EOF)."""
        messages = self.pending + read_until_eof(self.sock)
        errors = [m for m in messages if m.type == "error"]
        assert errors, [m.header for m in messages]
        return errors[-1]


def rows(n: int, start: bool = True, end: int | None = None, version: int = 0, **replace) -> bytes:
    """An ``experience`` frame of ``n`` CartPole rows (a start first, an ``end`` step_type last)."""
    step_type = np.ones(n, np.uint8)
    if start:
        step_type[0] = 0
    if end is not None:
        step_type[-1] = end
    reward = np.ones(n, np.float32)
    reward[step_type == 0] = 0.0
    arrays = {
        "step_type": step_type,
        "observation": np.linspace(-0.1, 0.1, 4 * n, dtype=np.float32).reshape(n, 4),
        "reward": reward,
        "action": np.arange(n, dtype=np.int64) % 2,
        "action_logp": np.full(n, -0.69, np.float32),
    }
    for key, value in replace.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    return encode("experience", {"policy_version": version}, arrays)


def fetched(address: str) -> Raw:
    client = Raw(address)
    policy = client.request(encode("get_policy"))
    assert policy.type == "policy", policy.header
    return client


# --- the protocol's round trips -----------------------------------------------------------
def test_v2_hello_gets_the_policy_as_onnx_that_onnxruntime_runs(local_server):
    import onnxruntime

    server, export = local_server(num_envs=1)
    client = Raw(server.address)
    welcome = client.welcome.header
    assert welcome["type"] == "welcome" and welcome["protocol"] == 2 and welcome["inference"] == "client"
    assert welcome["policy_version"] == 0 and welcome["max_upload_steps"] == 1024
    assert welcome["max_policy_lag"] == 2 and welcome["max_upload_bytes"] == 8 << 20
    policy = client.request(encode("get_policy"))
    assert policy.header["policy_version"] == 0 and policy.header["format"] == "onnx"
    outputs = [o["name"] for o in policy.header["sidecar"]["outputs"]]
    assert outputs[0] == "action" and "action_logp" in outputs
    model = policy.arrays["model"]
    assert model.dtype == np.uint8 and model.tobytes() == export.model
    session = onnxruntime.InferenceSession(model.tobytes(), providers=["CPUExecutionProvider"])
    action, logp = session.run(["action", "action_logp"], {"obs": np.zeros((3, 4), np.float32)})
    assert action.dtype == np.int64 and action.shape == (3,) and set(action.tolist()) <= {0, 1}
    assert logp.shape == (3,) and (logp <= 0).all()
    # asked again for the same version: the header alone (a model is sent once per version and connection)
    again = client.request(encode("get_policy"))
    assert again.header == {"type": "policy", "policy_version": 0, "unchanged": True} and not again.arrays
    assert export.exports == 1


def test_uploaded_steps_become_timesteps_with_the_clients_actions_taken(local_server):
    server, _ = local_server(num_envs=1)
    client = fetched(server.address)
    frame = rows(5, end=2)  # start, 3 steps, terminated
    ack = client.request(frame)
    assert ack.header == {
        "type": "experience", "policy_version": 0, "accepted": 5, "dropped": 0, "reason": None,
    }  # fmt: skip
    deadline = time.monotonic() + 5
    while not any(ts.step_type[0] == 2 and ts.valid[0] for ts in list(server.timesteps)):
        assert time.monotonic() < deadline, "the uploaded episode was never replayed"
        time.sleep(0.02)
    replayed = [ts for ts in list(server.timesteps) if ts.valid is not None and ts.valid[0]]
    assert [int(ts.step_type[0]) for ts in replayed[:5]] == [0, 1, 1, 1, 2]
    assert [float(ts.reward[0]) for ts in replayed[:5]] == [0, 1, 1, 1, 1]
    assert float(replayed[4].discount[0]) == 0.0  # terminated
    expected_obs = np.linspace(-0.1, 0.1, 20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(np.stack([ts.observation[0] for ts in replayed[:5]]), expected_obs)
    # rows where the client acted carry its action and log-probability; the end row does not
    taken = [ts.taken for ts in replayed[:5]]
    assert all(t is not None and t.rows[0] for t in taken[:4]) and (taken[4] is None or not taken[4].rows[0])
    assert [int(t.actions[0]) for t in taken[:4]] == [0, 1, 0, 1]
    assert all(abs(float(t.action_logp[0]) + 0.69) < 1e-6 for t in taken[:4])
    # prev_action is the client's previous action, as the env took it
    assert [int(ts.prev_action[0]) for ts in replayed[1:5]] == [0, 1, 0, 1]
    metrics = client.request(encode("metrics")).header
    assert metrics["experience"]["steps"] == 5 and metrics["experience"]["client_steps"] == 5


def test_the_sampler_records_the_taken_action_and_behaviour_logp_and_its_own_values():
    """The sampler's hook: taken rows keep the env's action and log-probability, the value is the policy's."""
    from rlgear.sample_batch import SampleBatch
    from rlgear.sampling.sampler import _merge_taken_logp, _with_taken
    from rlgear.timestep import TakenActions, TimeStep

    ts = TimeStep(
        step_type=np.array([0, 1, 1], np.int32), reward=np.zeros(3, np.float32),
        discount=np.ones(3, np.float32), observation=np.zeros((3, 4), np.float32),
        prev_action=np.zeros(3, np.int64), env_id=np.arange(3, dtype=np.int32),
        taken=TakenActions(np.array([False, True, True]), np.array([0, 1, 0]), np.array([0, -0.1, -2.0], np.float32)),
    )  # fmt: skip
    actions, extras = _with_taken(ts, np.array([1, 0, 1]), {SampleBatch.VF_PREDS: np.ones(3, np.float32)})
    assert actions.tolist() == [1, 1, 0]
    columns = {SampleBatch.ACTION_LOGP: np.full(3, -0.5, np.float32), **extras}
    _merge_taken_logp(columns)
    np.testing.assert_allclose(columns[SampleBatch.ACTION_LOGP], [-0.5, -0.1, -2.0])
    assert columns[SampleBatch.VF_PREDS].tolist() == [1, 1, 1] and "_taken_action_logp" not in columns


def test_a_new_version_is_announced_in_replies_and_fetched_again(local_server):
    server, export = local_server(num_envs=1)
    client = fetched(server.address)
    assert client.request(rows(3)).header["policy_version"] == 0
    export.weights = 17  # the learner's weights moved (many SGD steps): one version more
    ack = client.request(rows(2, start=False))
    assert ack.header["policy_version"] == 1
    policy = client.request(encode("get_policy"))
    assert policy.header["policy_version"] == 1 and "model" in policy.arrays
    assert export.exports == 2


def test_the_python_client_acts_locally_and_uploads(local_server):
    server, export = local_server(num_envs=1)
    client = Client(server.address, inference="client", upload_every=4)
    assert client.policy.version == 0 and client.policies_fetched == 1
    for _ in range(2):
        action = client.init(np.zeros(4, np.float32))
        for k in range(5):
            assert action in (0, 1)
            action = client.send(1.0, np.full(4, 0.01 * k, np.float32))
        assert client.send(1.0, np.ones(4, np.float32) * 0.02, terminated=True) is None
    assert client.uploaded_steps == 14 and client.dropped_steps == 0
    export.weights = 3
    client.init(np.zeros(4, np.float32))
    for _ in range(4):
        client.send(1.0, np.zeros(4, np.float32))  # the upload's reply announces version 1: fetched
    assert client.policy.version == 1 and client.policies_fetched == 2
    client.disconnect()


def test_v1_clients_play_as_before_next_to_a_local_client(local_server):
    server, _ = local_server(num_envs=2)
    local = fetched(server.address)
    v1 = Client(server.address)  # protocol 1: the server acts
    # A whole episode: a local client silent mid-episode would hold the v1 client's steps for
    # client_timeout_s (30 s), which test_a_slow_uploader_mid_episode_is_dropped_... covers.
    assert local.request(rows(3, end=2)).header["accepted"] == 3
    actions = [v1.init(np.zeros(4, np.float32))]
    actions += [v1.send(1.0, np.full(4, 0.01, np.float32)) for _ in range(2)]
    assert all(a in (0, 1) for a in actions)
    assert v1.send(1.0, np.zeros(4, np.float32), terminated=True) is None
    v1.disconnect()
    sock = raw(server.address)  # a v1 hello still gets a v1 welcome, and v2 messages are unknown to it
    sock.sendall(encode("hello", {"protocol": 1}))
    decoder = FrameDecoder()
    welcome = []
    while not welcome:
        welcome = decoder.feed(sock.recv(65536))
    assert welcome[0].header["protocol"] == 1 and "inference" not in welcome[0].header
    sock.sendall(encode("get_policy"))
    errors = [m for m in read_until_eof(sock) if m.type == "error"]
    assert errors[-1].header["code"] == ErrorCode.UNKNOWN_TYPE


def test_protocol_3_and_unknown_inference_are_refused(local_server):
    server, _ = local_server(num_envs=1)
    for hello, code in (
        ({"protocol": 3}, ErrorCode.UNSUPPORTED_PROTOCOL),
        ({"protocol": 2, "inference": "gpu"}, ErrorCode.BAD_MESSAGE),
        ({"protocol": 2, "inference": 1}, ErrorCode.BAD_MESSAGE),
    ):
        sock = raw(server.address)
        sock.sendall(encode("hello", hello))
        errors = [m for m in read_until_eof(sock) if m.type == "error"]
        assert errors[-1].header["code"] == code, hello


def test_a_server_without_a_policy_refuses_local_clients_with_no_policy(serve):
    server = serve(num_envs=1)  # no policy export attached (an env outside a training run)
    sock = raw(server.address)
    sock.sendall(encode("hello", {"protocol": 2, "inference": "client"}))
    errors = [m for m in read_until_eof(sock) if m.type == "error"]
    assert errors[-1].header["code"] == ErrorCode.NO_POLICY
    with pytest.raises(ServerError, match="NO_POLICY"):
        Client(server.address, inference="client")


# --- hostile uploads: each gets its documented error, and the server serves another client -------
N = 4
HOSTILE = [
    ("nan observation", {"observation": np.full((N, 4), np.nan, np.float32)}, ErrorCode.NON_FINITE),
    ("observation outside the Box", {"observation": np.full((N, 4), 100.0, np.float32)}, ErrorCode.BAD_ARRAY),
    ("observation float64", {"observation": np.zeros((N, 4), np.float64)}, ErrorCode.BAD_ARRAY),
    ("observation rows mismatch", {"observation": np.zeros((N + 1, 4), np.float32)}, ErrorCode.BAD_ARRAY),
    ("inf reward", {"reward": np.array([0, np.inf, 1, 1], np.float32)}, ErrorCode.NON_FINITE),
    ("reward beyond max_abs_reward", {"reward": np.array([0, 1e20, 1, 1], np.float32)}, ErrorCode.BAD_ARRAY),
    ("reward at a start row", {"reward": np.ones(N, np.float32)}, ErrorCode.BAD_ARRAY),
    ("nan logp", {"action_logp": np.array([np.nan, 0, 0, 0], np.float32)}, ErrorCode.NON_FINITE),
    ("logp -1e30", {"action_logp": np.array([-1e30, 0, 0, 0], np.float32)}, ErrorCode.BAD_ARRAY),
    ("positive logp of a Discrete action", {"action_logp": np.full(N, 3.0, np.float32)}, ErrorCode.BAD_ARRAY),
    ("action outside the space", {"action": np.array([0, 2, 0, 0], np.int64)}, ErrorCode.BAD_ARRAY),
    ("negative action", {"action": np.array([-1, 0, 0, 0], np.int64)}, ErrorCode.BAD_ARRAY),
    ("action int32", {"action": np.zeros(N, np.int32)}, ErrorCode.BAD_ARRAY),
    ("action_raw for a Discrete space", {"action_raw": np.zeros(N, np.float32)}, ErrorCode.BAD_ARRAY),
    ("missing action_logp", {"action_logp": None}, ErrorCode.BAD_ARRAY),
    ("unknown array", {"secret": np.zeros(1, np.uint8)}, ErrorCode.BAD_ARRAY),
    ("step_type 7", {"step_type": np.array([0, 1, 7, 1], np.uint8)}, ErrorCode.BAD_ARRAY),
    ("step_type int64", {"step_type": np.array([0, 1, 1, 1], np.int64)}, ErrorCode.BAD_ARRAY),
    ("a start inside an episode", {"step_type": np.array([0, 1, 0, 1], np.uint8)}, ErrorCode.OUT_OF_ORDER),
]


@pytest.mark.parametrize(("case", "replace", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_upload_gets_its_error_and_the_server_keeps_serving(local_server, case, replace, code):
    server, _ = local_server(num_envs=2)
    good = fetched(server.address)
    bad = fetched(server.address)
    assert good.request(rows(2)).header["accepted"] == 2
    bad.sock.sendall(rows(N, **replace))
    error = bad.error()
    assert error.header["code"] == code, (case, error.header)
    assert len(error.header["message"].splitlines()) == 1
    assert good.request(rows(3, start=False, end=3)).header["accepted"] == 3  # the other client plays on
    still = fetched(server.address)  # and the freed slot takes a new one
    assert still.request(rows(2)).header["accepted"] == 2


@pytest.mark.parametrize(
    ("case", "frame", "code"),
    [
        ("experience before get_policy", None, ErrorCode.OUT_OF_ORDER),
        ("a version never sent", rows(2, version=5), ErrorCode.BAD_MESSAGE),
        ("version not an integer", encode("experience", {"policy_version": "0"}), ErrorCode.BAD_MESSAGE),
        ("a step first", rows(2, start=False), ErrorCode.OUT_OF_ORDER),
        ("empty upload", rows(1, step_type=np.zeros(0, np.uint8)), ErrorCode.BAD_ARRAY),
        ("start from a local client", encode("start", None, {"observation": np.zeros(4, np.float32)}), ErrorCode.OUT_OF_ORDER),
    ],
)  # fmt: skip
def test_uploads_out_of_order_or_of_unknown_versions_are_refused(local_server, case, frame, code):
    server, _ = local_server(num_envs=1)
    client = Raw(server.address)
    if frame is None:
        client.sock.sendall(rows(2))
    else:
        assert client.request(encode("get_policy")).type == "policy"
        client.sock.sendall(frame)
    assert client.error().header["code"] == code, case
    assert fetched(server.address).request(rows(2)).header["accepted"] == 2


def test_a_v1_style_client_cannot_upload(local_server):
    server, _ = local_server(num_envs=1)
    client = Raw(server.address, inference="server")
    client.sock.sendall(encode("experience", {"policy_version": 0}))
    assert client.error().header["code"] == ErrorCode.OUT_OF_ORDER


def test_size_limits_on_uploads(local_server):
    server, _ = local_server(num_envs=1, max_upload_steps=8, max_upload_bytes=4096)
    client = fetched(server.address)
    client.sock.sendall(rows(9))
    error = client.error().header
    assert error["code"] == ErrorCode.BAD_ARRAY and "max_upload_steps" in error["message"]
    client = fetched(server.address)
    big = encode("experience", {"policy_version": 0, "pad": "x" * 5000})
    client.sock.sendall(big)
    assert client.error().header["code"] == ErrorCode.TOO_LARGE
    # a frame other than experience stays within max_message_bytes even from a local client
    client = fetched(server.address)
    client.sock.sendall(encode("metrics", {"pad": "x" * 2000}))
    assert client.reply().type == "metrics"  # 2000 < max_message_bytes (1 MiB)
    client.sock.sendall(encode("metrics", {"pad": "x" * (1 << 20)}))  # beyond it: refused
    assert client.error().header["code"] == ErrorCode.TOO_LARGE
    assert fetched(server.address).request(rows(2)).header["accepted"] == 2


def test_stale_uploads_are_dropped_counted_and_their_episode_never_trained_on(local_server):
    server, export = local_server(num_envs=1, max_policy_lag=1)
    client = fetched(server.address)
    assert client.request(rows(3)).header["accepted"] == 3  # an episode begins (version 0)
    export.weights = 1
    client.request(encode("get_policy"))  # version 1
    export.weights = 2  # version 2: version 0 is 2 behind, more than max_policy_lag 1
    ack = client.request(rows(2, start=False))
    assert ack.header == {
        "type": "experience", "policy_version": 2, "accepted": 0, "dropped": 2, "reason": "stale_policy",
    }  # fmt: skip
    # the rest of that episode, even with a fresh version, is dropped: no episode with a hole
    ack = client.request(rows(2, start=False, end=2, version=1))
    assert ack.header["accepted"] == 0 and ack.header["reason"] == "episode_dropped"
    ack = client.request(rows(3, end=3, version=1))  # a new episode, one version behind: trained on
    assert ack.header["accepted"] == 3 and ack.header["reason"] is None
    metrics = client.request(encode("metrics")).header["experience"]
    assert metrics["steps_dropped"] == 4 and metrics["client_steps_dropped"] == 4 and metrics["steps"] == 6
    deadline = time.monotonic() + 5
    while not any(ts.step_type[0] == 2 and ts.valid[0] for ts in list(server.timesteps)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    column = [(int(ts.step_type[0]), bool(ts.valid[0])) for ts in list(server.timesteps)]
    valid = [c for c in column if c[1]]
    # the first episode's 3 rows were replayed, then aborted by an invalid row; the third trained
    assert valid[:3] == [(0, True), (1, True), (1, True)] and valid[3:6] == [(0, True), (1, True), (2, True)]
    first_abort = next(k for k, c in enumerate(column) if c[1] and c[0] == 0)
    assert (2, False) in column[first_abort + 3 :]


def test_a_flood_of_get_policy_costs_one_model_per_version(local_server):
    server, export = local_server(num_envs=1)
    client = fetched(server.address)
    for _ in range(50):
        reply = client.request(encode("get_policy"))
        assert reply.header.get("unchanged") is True and not reply.arrays
    assert export.exports == 1


def test_a_slow_uploader_mid_episode_is_dropped_after_client_timeout_and_others_go_on(local_server):
    server, _ = local_server(num_envs=2, client_timeout_s=0.5)
    slow = fetched(server.address)
    assert slow.request(rows(2)).header["accepted"] == 2  # mid-episode, then silent
    other = fetched(server.address)
    assert other.request(rows(2)).header["accepted"] == 2
    assert slow.error().header["code"] == ErrorCode.TIMEOUT
    assert other.request(rows(2, start=False, end=2)).header["accepted"] == 2


# --- learning -----------------------------------------------------------------------------
@pytest.mark.slow
def test_ppo_trains_cartpole_from_clients_acting_locally_with_onnx(tmp_path):
    """8 client processes act with the server's policy in onnxruntime and upload every 64 steps or at
    an episode's end; the server never acts for them. See the figures in the module's report."""
    import rlgear

    address_file = tmp_path / "address"
    config = config_mod.load(
        ROOT / "configs" / "ppo-cartpole-external.yaml",
        [
            "env.kwargs.port=0", f"env.kwargs.address_file={address_file}",
            f"logging.dir={tmp_path / 'runs'}", "logging.tensorboard=false", "logging.progress=none",
            "checkpoint.every=0", "checkpoint.at_end=false",
            "training.train_batch_size=2048", "training.sgd_minibatch_size=256", "training.num_sgd_iter=10",
            "stop={episode_return_mean: 150, timesteps_total: 60000}",
        ],
    )  # fmt: skip
    procs: list[subprocess.Popen] = []

    def launch():
        deadline = time.monotonic() + 60
        while not (address_file.exists() and address_file.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        address = address_file.read_text().strip()
        for _ in range(8):
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(ROOT / "examples" / "external_cartpole_client.py"), address,
                     "--inference", "client"],
                    stdout=subprocess.DEVNULL,
                )
            )  # fmt: skip

    launcher = threading.Thread(target=launch, daemon=True)
    launcher.start()
    try:
        result = rlgear.train(config)
    finally:
        launcher.join(60)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
    assert result["episode_return_mean"] >= 150, result
    assert result["timesteps_total"] <= 60_000 + 2048
