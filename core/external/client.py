"""Client of an rlgear policy server (``env.adapter: external``): numpy + standard library only.

Your environment runs wherever it runs and asks the learner for actions::

    from rlgear.external.client import Client

    client = Client("127.0.0.1:9900", token=None)
    action = client.init(observation)                 # starts an episode
    while True:
        observation, reward, terminated, truncated, _ = env.step(action)
        action = client.send(reward, observation, terminated, truncated)
        if terminated or truncated:                   # action is None: the episode is over
            observation, _ = env.reset()
            action = client.init(observation)

With ``Client(address, inference="client")`` (protocol 2, needs ``pip install onnxruntime``) the
same calls act locally: the client fetches the server's policy as ONNX, runs it itself, and
uploads the steps it played every ``upload_every`` steps and at each episode's end; when a reply
announces a newer policy version it fetches that one. The server trains on the uploads.

When the connection drops, the client reconnects with exponential backoff
(and jitter) and continues: the server has discarded the unfinished episode,
so the observation in hand starts a new one there. Errors that retrying
cannot fix (wrong token, wrong observation shape) raise
:class:`~rlgear.external.wire.ServerError`. The wire format is ``docs/protocol.md``.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from typing import Any

import numpy as np

from rlgear.external.experience import START, STEP, TERMINATED, TRUNCATED, ExperienceBuffer
from rlgear.external.wire import (
    ErrorCode,
    Message,
    ServerError,
    WireError,
    encode,
    recv_message,
)
from rlgear.spaces import Discrete, Space, space_from_json

#: The largest policy frame this client reads (a model far larger than any MLP or small conv net).
MAX_POLICY_BYTES = 1 << 30

#: Error codes worth retrying (elsewhere or later): the server is busy or restarting.
RETRYABLE = {ErrorCode.SERVER_FULL, ErrorCode.OVERLOADED, ErrorCode.SHUTTING_DOWN, ErrorCode.TIMEOUT}


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(address, tuple):
        return address[0], int(address[1])
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be 'host:port', got {address!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class Client:
    """One environment connected to a policy server; one request in flight at a time.

    Args:
        address: ``"host:port"`` or ``(host, port)``.
        token: the server's token, if it has one.
        reconnect_timeout_s: give up reconnecting after this long (raises ``ConnectionError``).
        backoff_s: ``(first, max)`` delay between reconnection attempts (doubling, with jitter).
        timeout_s: socket timeout per reply; None waits as long as the learner trains.
        inference: ``"server"`` (the server acts; protocol 1) or ``"client"`` (this client acts
            with the server's policy, exported as ONNX, and uploads its steps; protocol 2).
        upload_every: with ``inference="client"``, upload after this many steps (and at every
            episode's end); capped by the server's ``max_upload_steps``.
    """

    def __init__(
        self,
        address: str | tuple[str, int],
        token: str | None = None,
        *,
        reconnect_timeout_s: float = 60.0,
        backoff_s: tuple[float, float] = (0.05, 2.0),
        timeout_s: float | None = None,
        inference: str = "server",
        upload_every: int = 64,
    ):
        if inference not in ("server", "client"):
            raise ValueError(f"inference must be 'server' or 'client', got {inference!r}")
        if upload_every < 1:
            raise ValueError(f"upload_every must be at least 1, got {upload_every}")
        self.local = inference == "client"
        self.upload_every = upload_every
        self.policy: Any = None  # inference="client": the LocalPolicy acting now
        self._buffer: ExperienceBuffer | None = None
        #: inference="client": uploaded rows the server accepted / dropped (stale policy), policies fetched
        self.uploaded_steps = self.dropped_steps = self.policies_fetched = 0
        self.address = parse_address(address)
        self.token = token
        self.reconnect_timeout_s = reconnect_timeout_s
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self.observation_space: Space | None = None
        self.action_space: Space | None = None
        self.slot: int | None = None
        self.max_message_bytes = 1 << 20
        self.reconnects = 0
        self._in_episode = False
        self._connect_with_backoff()

    # --- public API -------------------------------------------------------------
    def init(self, observation: Any) -> Any:
        """Start an episode with its first observation; returns the first action."""
        if self._in_episode:
            raise RuntimeError("init() during an episode: end it with send(..., terminated/truncated=True)")
        if self.local:
            return self._act_locally(START, observation, 0.0)
        return self._episode_request("start", {}, observation)

    def send(self, reward: float, observation: Any, terminated: bool = False, truncated: bool = False) -> Any:
        """Report a step's reward and new observation; returns the next action.

        With ``terminated`` or ``truncated`` the episode ends and None is
        returned. Called again after that (instead of ``init``), it starts a
        new episode with ``observation`` (``reward`` is ignored).
        """
        if self.local:
            return self._send_locally(reward, observation, terminated, truncated)
        if not self._in_episode:
            return self.init(observation)
        fields = {"reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated)}
        return self._episode_request("step", fields, observation)

    def metrics(self) -> dict[str, Any]:
        """Server-wide and per-client counters (``{"server": {...}, "client": {...}}``)."""
        reply = None
        while reply is None:
            reply = self._request(encode("metrics"))
        return {k: v for k, v in reply.header.items() if k != "type"}

    def flush(self) -> None:
        """Upload the steps played since the last upload (inference="client"); called for you every
        ``upload_every`` steps and at each episode's end."""
        buffer = self._buffer
        if buffer is None or not len(buffer):
            return
        frame = buffer.frame(self.policy.version)
        buffer.clear()
        reply = self._request(frame)
        if reply is None:  # reconnected: the server dropped this connection's unfinished episode
            return
        self.uploaded_steps += int(reply.header.get("accepted", 0))
        self.dropped_steps += int(reply.header.get("dropped", 0))
        if int(reply.header.get("policy_version", 0)) > self.policy.version:
            self._refresh_policy()

    def disconnect(self) -> None:
        """Say goodbye and close (an unfinished episode is discarded by the server; with
        inference="client" the rows not uploaded yet are uploaded first)."""
        if self.sock is None:
            return
        if self.local:
            with contextlib.suppress(OSError, WireError, ServerError, ConnectionError):
                self.flush()
            if self.sock is None:
                return
        try:
            self.sock.sendall(encode("bye"))
            recv_message(self.sock, self.max_message_bytes)
        except (OSError, WireError):
            pass
        finally:
            self._close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()

    # --- inference="client" -------------------------------------------------------
    def _act_locally(self, kind: int, observation: Any, reward: float) -> Any:
        obs = self._checked_observation(observation)
        action, raw, logp = self.policy.act(obs)
        assert self._buffer is not None
        self._buffer.add(kind, obs, reward, action, raw, logp)
        self._in_episode = True
        if len(self._buffer) >= self.upload_every:
            self.flush()  # may reconnect: then the next send() starts a new episode there
        return int(action) if isinstance(self.action_space, Discrete) else action

    def _send_locally(self, reward: float, observation: Any, terminated: bool, truncated: bool) -> Any:
        done = terminated or truncated
        if not self._in_episode:  # after a reconnect the server has no episode running
            return None if done else self._act_locally(START, observation, 0.0)
        if not done:
            return self._act_locally(STEP, observation, reward)
        assert self._buffer is not None
        self._buffer.add(
            TERMINATED if terminated else TRUNCATED, self._checked_observation(observation), reward
        )
        self._in_episode = False
        self.flush()
        return None

    def _checked_observation(self, observation: Any) -> np.ndarray:
        assert self.observation_space is not None
        obs = np.asarray(observation, dtype=self.observation_space.dtype)
        if obs.shape != tuple(self.observation_space.shape):
            raise ValueError(
                f"observation shape {obs.shape}, the server expects {self.observation_space.shape}"
            )
        return obs

    def _refresh_policy(self) -> None:
        reply = self._request(encode("get_policy"), MAX_POLICY_BYTES)
        if reply is not None:  # else reconnected, which fetched the policy already
            self._take_policy(reply)

    def _take_policy(self, reply: Message) -> None:
        from rlgear.external.local_policy import LocalPolicy

        if reply.type != "policy":
            raise WireError(ErrorCode.OUT_OF_ORDER, f"expected policy, got {reply.type!r}")
        if reply.header.get("unchanged"):
            return
        self.policy = LocalPolicy(
            reply.arrays["model"].tobytes(),
            reply.header.get("sidecar") or {},
            int(reply.header["policy_version"]),
        )
        self.policies_fetched += 1

    # --- internals --------------------------------------------------------------
    def _episode_request(self, kind: str, fields: dict[str, Any], observation: Any) -> Any:
        assert self.observation_space is not None
        obs = np.asarray(observation, dtype=self.observation_space.dtype)
        if obs.shape != tuple(self.observation_space.shape):
            raise ValueError(
                f"observation shape {obs.shape}, the server expects {self.observation_space.shape}"
            )
        frame = encode(kind, fields, {"observation": obs})
        while True:
            reply = self._request(frame)
            if reply is not None:
                break
            # reconnected: the server discarded the old connection's episode, so this observation
            # starts a new one (a final step has nothing left to report)
            self._in_episode = False
            if kind == "step" and (fields["terminated"] or fields["truncated"]):
                return None
            kind, frame = "start", encode("start", None, {"observation": obs})
        if reply.type == "episode_end":
            self._in_episode = False
            return None
        self._in_episode = True
        action = reply.arrays["action"]
        return int(action) if isinstance(self.action_space, Discrete) else action

    def _request(self, frame: bytes, max_reply_bytes: int | None = None) -> Message | None:
        """Send ``frame`` and return the reply; None if the connection had to be re-made meanwhile."""
        try:
            if self.sock is None:
                raise ConnectionError("not connected")
            self.sock.sendall(frame)
            reply = recv_message(self.sock, max_reply_bytes or self.max_message_bytes)
        except (OSError, WireError) as err:
            self._close()
            self._connect_with_backoff(err)
            return None
        if reply.type == "error":
            self._close()
            code = int(reply.header.get("code", 0))
            if code in RETRYABLE:
                self._connect_with_backoff()
                return None
            raise ServerError(code, str(reply.header.get("name")), str(reply.header.get("message")))
        return reply

    def _connect_with_backoff(self, cause: BaseException | None = None) -> None:
        deadline = time.monotonic() + self.reconnect_timeout_s
        delay = self.backoff_s[0]
        first = self.sock is None and self.observation_space is None
        while True:
            try:
                self._connect()
                if not first:
                    self.reconnects += 1
                self._in_episode = False
                return
            except ServerError as err:
                if err.code not in RETRYABLE:
                    raise
                cause = err
            except (OSError, WireError) as err:
                cause = err
            self._close()
            if time.monotonic() + delay > deadline:
                raise ConnectionError(
                    f"could not reach the policy server at {self.address[0]}:{self.address[1]} "
                    f"within {self.reconnect_timeout_s:g} s: {cause}"
                ) from cause
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, self.backoff_s[1])

    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=10.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        hello = {"protocol": 2, "inference": "client"} if self.local else {"protocol": 1}
        sock.sendall(encode("hello", {**hello, "token": self.token}))
        reply = recv_message(sock, self.max_message_bytes)
        if reply.type == "error":
            raise ServerError(
                int(reply.header.get("code", 0)),
                str(reply.header.get("name")),
                str(reply.header.get("message")),
            )
        if reply.type != "welcome":
            raise WireError(ErrorCode.OUT_OF_ORDER, f"expected welcome, got {reply.type!r}")
        self.observation_space = space_from_json(reply.header["observation_space"])
        self.action_space = space_from_json(reply.header["action_space"])
        self.slot = int(reply.header["slot"])
        self.max_message_bytes = max(self.max_message_bytes, int(reply.header.get("max_message_bytes", 0)))
        sock.settimeout(self.timeout_s)
        if self.local:  # every connection starts with the policy (versions are per server run)
            self.upload_every = min(
                self.upload_every, int(reply.header.get("max_upload_steps", self.upload_every))
            )
            action_dtype = np.int64 if isinstance(self.action_space, Discrete) else self.action_space.dtype
            self._buffer = ExperienceBuffer(
                self.observation_space.dtype, action_dtype, self.action_space.shape
            )
            sock.sendall(encode("get_policy"))
            policy = recv_message(sock, MAX_POLICY_BYTES)
            if policy.type == "error":
                raise ServerError(
                    int(policy.header.get("code", 0)),
                    str(policy.header.get("name")),
                    str(policy.header.get("message")),
                )
            self._take_policy(policy)

    def _close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
