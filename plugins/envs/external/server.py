"""The policy server: sockets, handshake, validation, limits and admission control.

Single-threaded and non-blocking (``selectors``): the vector env calls
:meth:`PolicyServer.poll` while it waits for clients, so no lock, no thread
hand-off and no GIL contention sit between a client's step and the batched
inference (measured: see bench/external_latency.py). While the learner trains,
nobody polls: clients wait for their action as they would for any synchronous
env, and new connections wait in the listen backlog.

Every protocol violation by one client ends with an ``error`` frame to that
client and its connection closed; the server and the other clients go on.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hmac
import logging
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.errors import ConfigError
from rlgear.external.wire import (
    PROTOCOL_VERSIONS,
    ErrorCode,
    FrameDecoder,
    Message,
    WireError,
    check_bool,
    check_finite_number,
    encode,
    error_frame,
)

from .checks import ObservationCheck
from .policy_versions import PolicyVersions
from .settings import ServerSettings, rss_mb
from .upload import START, STEP, TERMINATED, Upload, UploadCheck

_MAX_OUTBOX = 8 << 20  # a client that stops reading is dropped once this much waits for it
_CLOSING_LINGER_S = 1.0  # keep reading a failed client this long so it gets its error frame
_PAUSE_S = 0.5  # a longer gap between polls is the learner's: frame deadlines and backlogs skip it
_RECV_BYTES = 1 << 16
_LISTEN_BACKLOG = 1024  # connections the kernel completes while nobody accepts (a flood, a training step)
_RATE_BURST_S = 0.1  # the message rate limit allows bursts of a tenth of a second's worth...
_RATE_MIN_BURST = 10.0  # ...and of at least this many messages
_BACKLOG_S = 1.0  # a client that keeps the server reading it, without a break, this long is over the limit
_BACKLOG_MESSAGES = 64  # a read with this many messages (or a full buffer) shows the client is ahead
_LOG_WINDOW_S = 10.0  # at most _LOG_LINES_PER_WINDOW lines per reason in this window, then a summary
_LOG_LINES_PER_WINDOW = 5

log = logging.getLogger("rlgear.external")


class RateLimitedLog:
    """One warning per refused or dropped client, at most N per reason every window.

    Why: an operator needs to see who was refused and why (a wrong token, a
    flood), but a flood must not flood the log too: past the limit the lines of
    a reason are counted and reported once when its window ends.
    """

    def __init__(self, window_s: float = _LOG_WINDOW_S, lines: int = _LOG_LINES_PER_WINDOW):
        self.window_s, self.lines = window_s, lines
        self._windows: dict[str, tuple[float, int, int]] = {}  # reason -> (start, logged, suppressed)

    def warning(self, reason: str, text: str) -> None:
        now = time.monotonic()
        start, logged, suppressed = self._windows.get(reason, (now, 0, 0))
        if now - start >= self.window_s:
            if suppressed:
                log.warning(
                    "external env: %d more %s line(s) suppressed in %.0f s", suppressed, reason, now - start
                )
            start, logged, suppressed = now, 0, 0
        if logged < self.lines:
            log.warning("external env: %s", text)
            logged += 1
        else:
            suppressed += 1
        self._windows[reason] = (start, logged, suppressed)


@dataclass
class Request:
    """A start or step message waiting for the next env step, or a row of an upload to replay."""

    kind: str  # "start" | "step" | "abort" (an uploaded episode dropped: its replayed rows are discarded)
    observation: np.ndarray
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    # uploaded rows (protocol 2) where the client acted: the action as the env took it, what the
    # learner trains on (action_raw where sent) and its log-probability; None for version 1
    action: np.ndarray | None = None
    trained: np.ndarray | None = None
    logp: float = 0.0


@dataclass
class Connection:
    sock: socket.socket
    peer: str
    decoder: FrameDecoder
    opened: float
    state: str = "handshake"  # handshake | ready | closing
    slot: int | None = None
    request: Request | None = None  # received, not yet taken by a step
    last_request: Request | None = None  # the request taken by the last step
    in_reply: bool = False  # a request was taken; its reply is not sent yet
    in_episode: bool = False  # between start and a terminated/truncated step (client's view)
    expect_by: float = 0.0  # a step waits for this client's next request until then
    outbox: bytearray = field(default_factory=bytearray)
    frame_deadline: float | None = None  # a frame has begun arriving: the rest must be in by then
    tokens: float = 0.0  # rate-limit bucket
    last_refill: float = 0.0
    backlog_since: float | None = None  # every read since then found many messages waiting
    backlog_messages: int = 0  # messages read since then
    corked: bool = False  # replies wait in the outbox until the messages of one read are handled
    metrics_frame: bytes | None = None  # the metrics reply, the same for every request of one read
    last_activity: float = 0.0  # last frame received from or sent to this client
    closing_until: float = 0.0
    episodes: int = 0
    steps: int = 0
    episode_return: float = 0.0
    # --- protocol 2, a client that acts locally (docs/protocol.md section 10) ---
    protocol: int = 1
    local: bool = False  # hello said inference "client": it uploads experience, never start/step
    replay: collections.deque[Request] = field(default_factory=collections.deque)  # rows to emit
    ack_after: int | None = None  # the pending experience reply goes out once this many rows were taken
    ack: dict[str, Any] = field(default_factory=dict)  # ... with these fields
    policy_sent: int | None = None  # the latest policy version sent to this client
    upload_in_episode: bool = False  # the client's episode runs (its view, from its uploads)
    upload_live: bool = False  # ... and its rows are trained on (not dropped as stale)
    outbox_allowance: int = 0  # bytes of a policy frame allowed beyond _MAX_OUTBOX
    experience_steps: int = 0  # uploaded rows queued for training
    experience_dropped: int = 0  # uploaded rows dropped (stale policy, or their episode was)


class PolicyServer:
    """Listens, admits clients into env slots, validates their messages.

    The vector env owns the episode semantics; this class owns the sockets.
    ``slot_conn[i]`` is the connection playing env slot ``i`` (or None);
    ``reserved[i]`` says the env still owes slot ``i`` the invalid row that
    aborts the previous client's episode; a new client there waits one step.
    """

    def __init__(self, settings: ServerSettings, num_slots: int):
        self.settings = settings
        self.num_slots = num_slots
        self.obs_space = settings.observation_space
        self.obs_shape = tuple(self.obs_space.shape)
        self.obs_dtype = np.dtype(self.obs_space.dtype)
        self.obs_float = self.obs_dtype.kind == "f"
        self.slot_conn: list[Connection | None] = [None] * num_slots
        self.reserved = [False] * num_slots
        self.conns: dict[int, Connection] = {}
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.refusals = RateLimitedLog()
        self.check_observation = ObservationCheck(settings)
        self.check_upload = UploadCheck(settings, self.check_observation)
        #: The acting policy's versions (set by the env once the run hands it the policy export);
        #: None: clients that act locally are refused (NO_POLICY).
        self.versions: PolicyVersions | None = None
        self.experience_total = 0
        self.experience_dropped_total = 0
        self.policies_sent = 0
        self.episodes_total = 0
        self.dropped_total = 0
        self.selector = selectors.DefaultSelector()
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((settings.host, settings.port))
        except OSError as err:
            self.listener.close()
            raise ConfigError(
                f"env.kwargs.host/port: cannot listen on {settings.host}:{settings.port}: {err.strerror or err}"
            ) from None
        self.listener.listen(_LISTEN_BACKLOG)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self._polled_at = time.monotonic()
        self._welcome_fields = {
            "observation_space": self.obs_space.to_json(),
            "action_space": settings.action_space.to_json(),
            "max_message_bytes": settings.max_message_bytes,
        }
        if settings.address_file:
            with open(settings.address_file, "w") as f:
                f.write(f"{self.address[0]}:{self.address[1]}\n")

    # --- the event loop -------------------------------------------------------
    def poll(self, timeout: float) -> None:
        """Accept, read and validate whatever arrives within ``timeout`` seconds (one select)."""
        self._forgive_pause(time.monotonic() - self._polled_at)
        for key, events in self.selector.select(timeout):
            if key.data is None:
                self._accept()
                continue
            conn: Connection = key.data
            if events & selectors.EVENT_WRITE:
                self._flush(conn)
            if events & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                self._read(conn)
        self._expire(time.monotonic())
        self._polled_at = time.monotonic()

    def _forgive_pause(self, paused: float) -> None:
        """Nobody read while the learner trained: that time counts against no frame deadline or backlog."""
        if paused > _PAUSE_S:
            self._forgive(paused)

    def _forgive(self, paused: float) -> None:
        """Shift every client's deadlines by ``paused`` seconds the server spent not reading."""
        for conn in self.conns.values():
            if conn.frame_deadline is not None:
                conn.frame_deadline += paused
            if conn.backlog_since is not None:
                conn.backlog_since += paused
            conn.expect_by += paused
            conn.last_activity += paused
            conn.opened += paused  # the handshake deadline

    # --- admission: the connection budget ----------------------------------------------
    def _accept(self) -> None:
        for _ in range(64):  # then the others get read
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # e.g. EMFILE: leave it in the backlog
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return
                raise
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            now = time.monotonic()
            conn = Connection(
                sock,
                f"{peer[0]}:{peer[1]}",
                FrameDecoder(self.settings.max_message_bytes),
                now,
                tokens=self._burst(),
                last_refill=now,
                last_activity=now,
            )
            if not self._make_room():
                self._refuse_at_once(conn)
                continue
            self.conns[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)
            self._read(conn)  # accepted late (a backlog), its hello may be waiting already
            self._limit_pending()

    def _make_room(self) -> bool:
        """Below ``max_connections`` for one more socket, never at a playing client's expense.

        Room is taken first from refused sockets still lingering for their error
        frame (closed now), then from the oldest socket still before its hello.
        A refused socket therefore never keeps anyone out. False only when every
        open socket is a handshaken client (``max_connections`` <= the slots).
        """
        while len(self.conns) >= self.settings.max_connections:
            victim = self._oldest("closing") or self._oldest("handshake")
            if victim is None:
                return False
            if victim.state == "closing":
                self.close(victim)
            else:
                self._evict(victim, f"connection limit {self.settings.max_connections} reached")
        return True

    def _limit_pending(self) -> None:
        """At most ``max_pending_handshakes`` sockets before their hello: the oldest makes way.

        A flood of silent sockets then only rotates through its own budget,
        while a real client's hello, which follows its connect at once, is read
        before its socket gets old (see ``_evict``).
        """
        limit = self.settings.max_pending_handshakes
        while sum(c.state == "handshake" for c in self.conns.values()) > limit:
            oldest = self._oldest("handshake")
            assert oldest is not None
            self._evict(
                oldest,
                f"more than {limit} connections waiting for their hello (env.kwargs.max_pending_handshakes); "
                "the oldest is refused",
            )

    def _oldest(self, state: str) -> Connection | None:
        # self.conns is in accept order: a closed socket's entry is removed, a new one goes last
        return next((c for c in self.conns.values() if c.state == state), None)

    def _evict(self, conn: Connection, reason: str) -> None:
        """Refuse a socket still before its hello, after one last read: its hello may be waiting."""
        self._read(conn)
        if conn.state == "handshake":
            self.fail(conn, ErrorCode.SERVER_FULL, reason)

    def _refuse_at_once(self, conn: Connection) -> None:
        """Refuse a new socket without keeping it: it holds no place while its error frame goes out."""
        message = f"connection limit {self.settings.max_connections} reached, every socket a playing client"
        self.refusals.warning("SERVER_FULL", f"client {conn.peer} refused: SERVER_FULL (5): {message}")
        with contextlib.suppress(OSError):
            conn.sock.send(error_frame(ErrorCode.SERVER_FULL, message))
        conn.sock.close()

    # --- reading ------------------------------------------------------------------
    def _read(self, conn: Connection) -> bool:
        """Read what is there (up to 64 KiB) and handle its messages; False when nothing was."""
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if not data:
            self.close(conn)
            return False
        now = conn.last_activity = time.monotonic()
        if conn.state == "closing":
            return True  # draining: the client gets its error frame, not a reset
        conn.corked, conn.metrics_frame = True, None
        try:
            messages = conn.decoder.feed(data)
            self._track_frame(conn, bool(messages), now)
            if messages:
                self._rate_limit(conn, len(messages), now)
            ahead = len(data) == _RECV_BYTES or len(messages) >= _BACKLOG_MESSAGES
            self._track_backlog(conn, ahead, len(messages), now)
            for msg in messages:
                if conn.state not in ("handshake", "ready"):
                    break
                self._handle(conn, msg)
        except WireError as err:
            self.fail(conn, err.code, err.detail)
        finally:
            self._uncork(conn)
        return True

    def _rate_limit(self, conn: Connection, count: int, now: float) -> None:
        """Charge one read's ``count`` messages, before any is handled (a flood costs no more work).

        A token bucket: ``max_messages_per_s`` a second, bursts of a tenth of a
        second's worth. The messages of a read arrived since the last read, so
        the bucket refills for that time before it pays for them. Counting as
        the server reads, the limit holds while the server reads faster than it:
        hence replies batched per read and one metrics reply per read, which
        take a flood's cost per message down to decoding it.
        """
        rate = self.settings.max_messages_per_s
        conn.tokens = min(self._burst(), conn.tokens + (now - conn.last_refill) * rate - count)
        conn.last_refill = now
        if conn.tokens < 0.0:
            raise WireError(
                ErrorCode.RATE_LIMITED,
                f"more than {rate:g} messages per second (env.kwargs.max_messages_per_s)",
            )

    def _track_backlog(self, conn: Connection, ahead: bool, count: int, now: float) -> None:
        """The rate limit where the server reads slower than ``max_messages_per_s``.

        Such a client is held back by TCP to what the server reads, so its rate
        never looks high, yet it takes all the server's time. Every read then
        finds many messages waiting (``ahead``): a client that keeps that up
        for ``_BACKLOG_S`` (the server's pauses forgiven) with more than a burst
        of messages sends faster than it is read. A client that waits for its
        replies has a message or two per read; a large frame is one message.
        """
        if not ahead:
            conn.backlog_since, conn.backlog_messages = None, 0
            return
        if conn.backlog_since is None:
            conn.backlog_since, conn.backlog_messages = now, 0
        conn.backlog_messages += count
        if now - conn.backlog_since > _BACKLOG_S and conn.backlog_messages > self._burst():
            raise WireError(
                ErrorCode.RATE_LIMITED,
                f"{conn.backlog_messages} messages sent faster than the server reads them for "
                f"{now - conn.backlog_since:.1f} s (env.kwargs.max_messages_per_s: "
                f"{self.settings.max_messages_per_s:g} a second at most)",
            )

    def _burst(self) -> float:
        return max(_RATE_MIN_BURST, self.settings.max_messages_per_s * _RATE_BURST_S)

    def _track_frame(self, conn: Connection, completed_some: bool, now: float) -> None:
        """Start a frame's deadline with its first bytes; a complete frame ends it."""
        if not conn.decoder.buffered:
            conn.frame_deadline = None
        elif completed_some or conn.frame_deadline is None:  # what is buffered is a new frame
            conn.frame_deadline = now + self.settings.frame_timeout_s

    def _finish_frame(self, conn: Connection) -> None:
        """Past its deadline, read what the kernel already holds of the frame before judging it."""
        for _ in range(self.settings.max_message_bytes // _RECV_BYTES + 2):
            if (
                conn.frame_deadline is None
                or conn.state not in ("handshake", "ready")
                or not self._read(conn)
            ):
                return

    def _expire(self, now: float) -> None:
        idle_timeout = self.settings.idle_timeout_s
        for conn in list(self.conns.values()):
            if conn.state == "handshake" and now - conn.opened > self.settings.handshake_timeout_s:
                self.fail(conn, ErrorCode.TIMEOUT, f"no hello within {self.settings.handshake_timeout_s:g} s")
            elif conn.state == "closing" and now > conn.closing_until:
                self.close(conn)
            elif conn.frame_deadline is not None and now > conn.frame_deadline and conn.state != "closing":
                self._expire_frame(conn)
            elif (
                conn.state == "ready"
                and not (conn.in_episode or conn.in_reply or conn.request is not None)
                and not (conn.replay or conn.ack_after is not None)
                and now - conn.last_activity > idle_timeout
            ):
                self.fail(
                    conn,
                    ErrorCode.TIMEOUT,
                    f"idle for {idle_timeout:g} s between episodes (env.kwargs.idle_timeout_s); slot freed",
                )

    def _expire_frame(self, conn: Connection) -> None:
        """Drop a client whose frame is still incomplete past its deadline (it holds a slot otherwise)."""
        self._finish_frame(conn)
        late = conn.frame_deadline is not None and time.monotonic() > conn.frame_deadline
        if late and conn.state in ("handshake", "ready"):
            self.fail(
                conn,
                ErrorCode.TIMEOUT,
                f"a frame was not complete {self.settings.frame_timeout_s:g} s after its first bytes "
                f"({conn.decoder.buffered} bytes arrived; env.kwargs.frame_timeout_s)",
            )

    # --- messages -------------------------------------------------------------
    def _handle(self, conn: Connection, msg: Message) -> None:
        kind = msg.type
        if conn.state == "handshake":
            if kind != "hello":
                raise WireError(ErrorCode.OUT_OF_ORDER, f"expected hello first, got '{kind}'")
            self._hello(conn, msg)
            return
        if msg.nbytes > self.settings.max_message_bytes and kind != "experience":
            raise WireError(
                ErrorCode.TOO_LARGE,
                f"a '{kind[:64]}' frame of {msg.nbytes} bytes exceeds max_message_bytes "
                f"{self.settings.max_message_bytes} (only 'experience' may be up to max_upload_bytes)",
            )
        if kind in ("start", "step") and conn.local:
            raise WireError(
                ErrorCode.OUT_OF_ORDER,
                f"'{kind}' from a client that acts locally (hello inference 'client'): send 'experience'",
            )
        if kind in ("get_policy", "experience") and conn.protocol >= 2:
            if conn.ack_after is not None:
                raise WireError(ErrorCode.OUT_OF_ORDER, f"'{kind}' sent before the previous reply arrived")
            if kind == "get_policy":
                self._get_policy(conn)
            else:
                self._experience(conn, msg)
        elif kind in ("start", "step"):
            if conn.request is not None or conn.in_reply:
                raise WireError(ErrorCode.OUT_OF_ORDER, f"'{kind}' sent before the previous reply arrived")
            if kind == "start" and conn.in_episode:
                raise WireError(
                    ErrorCode.OUT_OF_ORDER, "'start' during an episode (end it with terminated or truncated)"
                )
            if kind == "step" and not conn.in_episode:
                raise WireError(ErrorCode.OUT_OF_ORDER, "'step' outside an episode (send 'start' first)")
            conn.request = self._request(kind, msg)
        elif kind == "metrics":
            if conn.metrics_frame is None:
                conn.metrics_frame = encode("metrics", self.metrics(conn))
            self.send(conn, conn.metrics_frame)
        elif kind == "bye":
            self.send(conn, encode("bye"))
            self._release(conn)
            conn.state = "closing"
            conn.closing_until = time.monotonic() + _CLOSING_LINGER_S
            self._shutdown_write(conn)
        elif kind == "hello":
            raise WireError(ErrorCode.OUT_OF_ORDER, "hello sent twice")
        else:
            raise WireError(ErrorCode.UNKNOWN_TYPE, f"unknown message type '{kind[:64]}'")

    def _hello(self, conn: Connection, msg: Message) -> None:
        version = msg.header.get("protocol")
        if type(version) is not int or version not in PROTOCOL_VERSIONS:  # not 1.0, not true
            raise WireError(
                ErrorCode.UNSUPPORTED_PROTOCOL,
                f"server speaks protocols {', '.join(map(str, PROTOCOL_VERSIONS))} (the integer), "
                f"client asked {version!r}",
            )
        inference = msg.header.get("inference", "server") if version >= 2 else "server"
        if inference not in ("server", "client"):
            raise WireError(
                ErrorCode.BAD_MESSAGE, f'\'inference\' must be "server" or "client", got {inference!r}'[:200]
            )
        token = msg.header.get("token")
        if token is not None and not isinstance(token, str):
            raise WireError(ErrorCode.BAD_MESSAGE, f"'token' must be a string, got {type(token).__name__}")
        expected = self.settings.token
        if expected is not None and not (token is not None and _same_secret(token, expected)):
            raise WireError(ErrorCode.AUTH_FAILED, "missing token" if token is None else "wrong token")
        limit = self.settings.max_memory_mb
        if limit is not None:
            rss = rss_mb()
            if rss is not None and rss > limit:
                raise WireError(ErrorCode.OVERLOADED, f"server memory {rss:.0f} MB above {limit:.0f} MB")
        free = [i for i in range(self.num_slots) if self.slot_conn[i] is None]
        slot = min(free, key=lambda i: self.reserved[i], default=None)  # unreserved slots first
        if slot is None:
            raise WireError(ErrorCode.SERVER_FULL, f"all {self.num_slots} env slots are taken")
        welcome = {"protocol": version, **self._welcome_fields, "slot": slot}
        if version >= 2:
            welcome["inference"] = inference
        if inference == "client":
            if self.versions is None:
                raise WireError(
                    ErrorCode.NO_POLICY,
                    'this server has no policy to give (it runs outside a training run); use inference "server"',
                )
            conn.local = True
            conn.decoder.max_message_bytes = max(
                self.settings.max_message_bytes, self.settings.max_upload_bytes
            )
            welcome.update(
                policy_version=self.versions.current(),
                max_upload_steps=self.settings.max_upload_steps,
                max_upload_bytes=self.settings.max_upload_bytes,
                max_policy_lag=self.settings.max_policy_lag,
            )
        conn.protocol = version
        conn.slot = slot
        self.slot_conn[slot] = conn
        conn.state = "ready"
        conn.expect_by = time.monotonic() + self.settings.start_grace_s
        self.send(conn, encode("welcome", welcome))

    # --- protocol 2: clients that act locally ---------------------------------------
    def _get_policy(self, conn: Connection) -> None:
        """The current policy as ONNX; a client that has it already gets the version alone.

        Why once per version and connection: a model can be megabytes, and a client asking again
        and again must not make the server copy it again and again.
        """
        if self.versions is None:
            raise WireError(
                ErrorCode.NO_POLICY, "this server has no policy to give (it runs outside a training run)"
            )
        version = self.versions.current()
        if conn.policy_sent == version:
            self.send(conn, encode("policy", {"policy_version": version, "unchanged": True}))
            return
        version, frame = self.versions.frame()
        self._forgive(self.versions.export_seconds)  # an export is time nobody read, as training is
        conn.policy_sent = version
        self.policies_sent += 1
        conn.outbox_allowance = len(frame)
        self.send(conn, frame)
        if not conn.outbox:
            conn.outbox_allowance = 0

    def _experience(self, conn: Connection, msg: Message) -> None:
        """Queue an upload's rows for replay in the client's slot (or drop them as stale); the reply
        goes out once the rows of the client's earlier uploads have been taken (``ack_after``)."""
        if not conn.local:
            raise WireError(
                ErrorCode.OUT_OF_ORDER,
                "'experience' from a client that acts on the server (hello inference \"server\")",
            )
        if msg.nbytes > self.settings.max_upload_bytes:
            raise WireError(
                ErrorCode.TOO_LARGE,
                f"an 'experience' frame of {msg.nbytes} bytes exceeds env.kwargs.max_upload_bytes "
                f"{self.settings.max_upload_bytes}",
            )
        if conn.policy_sent is None:
            raise WireError(ErrorCode.OUT_OF_ORDER, "'experience' before any 'get_policy' on this connection")
        upload = self.check_upload(msg, conn.upload_in_episode)
        if upload.policy_version > conn.policy_sent:
            raise WireError(
                ErrorCode.BAD_MESSAGE,
                f"'policy_version' {upload.policy_version} is newer than the latest sent to this client "
                f"({conn.policy_sent})",
            )
        current = self.versions.current() if self.versions is not None else 0
        stale = current - upload.policy_version > self.settings.max_policy_lag
        accepted = self._queue(conn, upload, stale)
        dropped = len(upload) - accepted
        conn.experience_steps += accepted
        conn.experience_dropped += dropped
        self.experience_total += accepted
        self.experience_dropped_total += dropped
        reason = "stale_policy" if stale else ("episode_dropped" if dropped else None)
        conn.ack = {"accepted": accepted, "dropped": dropped, "reason": reason}
        conn.ack_after = len(conn.replay) - accepted  # rows queued before this upload's
        self._ack_if_due(conn)

    def _queue(self, conn: Connection, upload: Upload, stale: bool) -> int:
        """Append the upload's trainable rows to ``conn.replay``; the number queued.

        A stale upload queues nothing; where it continues an episode whose rows were queued, an
        ``abort`` row discards them (as a disconnect does), and the rest of that episode, in later
        uploads too, is dropped: training never sees an episode with a hole in it.
        """
        queued = 0
        kinds = upload.step_type.tolist()
        for i, kind in enumerate(kinds):
            if kind == START:
                conn.upload_live = not stale
            elif conn.upload_live and stale:
                conn.replay.append(Request("abort", upload.observation[i]))
                conn.upload_live = False
            conn.upload_in_episode = kind <= STEP
            if not conn.upload_live:
                continue
            obs = upload.observation[i]
            if kind <= STEP:
                request = Request(
                    "start" if kind == START else "step",
                    obs,
                    float(upload.reward[i]),
                    action=upload.action[i],
                    trained=upload.trained[i],
                    logp=float(upload.action_logp[i]),
                )
            else:
                request = Request(
                    "step", obs, float(upload.reward[i]), kind == TERMINATED, kind != TERMINATED
                )
            conn.replay.append(request)
            queued += 1
            if kind > STEP:
                conn.upload_live = False
        return queued

    def take_row(self, conn: Connection) -> Request | None:
        """The next uploaded row to emit in the client's slot (the env calls this while gathering)."""
        if not conn.replay:
            return None
        row = conn.replay.popleft()
        if conn.ack_after is not None:
            conn.ack_after -= 1
            self._ack_if_due(conn)
        return row

    def _ack_if_due(self, conn: Connection) -> None:
        if conn.ack_after is None or conn.ack_after > 0 or conn.state != "ready":
            return
        conn.ack_after = None
        version = self.versions.current() if self.versions is not None else 0
        self.send(conn, encode("experience", {"policy_version": version, **conn.ack}))

    def _request(self, kind: str, msg: Message) -> Request:
        obs = msg.arrays.get("observation")
        if obs is None or len(msg.arrays) != 1:
            raise WireError(ErrorCode.BAD_ARRAY, f"'{kind}' must carry exactly one array, 'observation'")
        self.check_observation(obs)
        if kind == "start":
            return Request("start", obs)
        reward = check_finite_number(msg.header, "reward")
        limit = self.settings.max_abs_reward
        if limit is not None and abs(reward) > limit:  # finite, yet its square would overflow float32
            raise WireError(
                ErrorCode.BAD_MESSAGE,
                f"reward {reward:g} is beyond the server's env.kwargs.max_abs_reward = {limit:g} "
                "(set it higher where rewards are this large)",
            )
        return Request(
            "step", obs, reward, check_bool(msg.header, "terminated"), check_bool(msg.header, "truncated")
        )

    def metrics(self, conn: Connection) -> dict[str, Any]:
        returns = list(self.recent_returns)
        return {
            "server": {
                "clients": sum(c is not None for c in self.slot_conn),
                "slots": self.num_slots,
                "episodes": self.episodes_total,
                "episode_return_mean": float(np.mean(returns)) if returns else None,
                "clients_dropped": self.dropped_total,
            },
            "client": {"slot": conn.slot, "episodes": conn.episodes, "steps": conn.steps},
        } | ({} if conn.protocol < 2 else self._metrics_v2(conn))

    def _metrics_v2(self, conn: Connection) -> dict[str, Any]:
        """What protocol 2 adds to ``metrics`` (a version 1 reply stays as it was)."""
        return {
            "experience": {
                "policy_version": self.versions.current() if self.versions is not None else None,
                "steps": self.experience_total,
                "steps_dropped": self.experience_dropped_total,
                "policies_sent": self.policies_sent,
                "client_steps": conn.experience_steps,
                "client_steps_dropped": conn.experience_dropped,
            }
        }

    # --- sending and closing ----------------------------------------------------
    def send(self, conn: Connection, frame: bytes) -> None:
        """Queue ``frame`` and write what the socket takes now (never blocks)."""
        conn.last_activity = time.monotonic()
        if conn.outbox or conn.corked:
            conn.outbox += frame
        else:
            try:
                sent = conn.sock.send(frame)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.close(conn)
                return
            if sent == len(frame):
                return
            conn.outbox += frame[sent:]
            self._want_write(conn, True)
        if len(conn.outbox) > _MAX_OUTBOX + conn.outbox_allowance:
            self.refusals.warning(
                "NOT_READING", f"client {conn.peer} dropped: {len(conn.outbox)} bytes of replies unread"
            )
            self.close(conn)

    def _uncork(self, conn: Connection) -> None:
        """Send the replies to one read's messages together: one system call, not one per reply."""
        conn.corked = False
        if conn.outbox and conn.state != "closed":
            self._flush(conn)
            if conn.outbox and conn.state != "closed":
                self._want_write(conn, True)

    def _flush(self, conn: Connection) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(conn)
            return
        del conn.outbox[:sent]
        if not conn.outbox:
            conn.outbox_allowance = 0
            self._want_write(conn, False)
            if conn.state == "closing":
                self._shutdown_write(conn)

    def _want_write(self, conn: Connection, on: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.modify(conn.sock, events, conn)

    def _shutdown_write(self, conn: Connection) -> None:
        if conn.outbox:
            return  # after the flush
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)

    def fail(self, conn: Connection, code: ErrorCode, message: str) -> None:
        """Send an error frame and drop this client alone (its episode is aborted)."""
        if conn.state == "closing":
            return
        self.dropped_total += conn.state == "ready"
        self.refusals.warning(
            code.name, f"client {conn.peer} {_stage(conn)}: {code.name} ({int(code)}): {message}"
        )
        self._release(conn)
        conn.state = "closing"
        conn.closing_until = time.monotonic() + _CLOSING_LINGER_S
        self.send(conn, error_frame(code, message))
        if conn.state == "closing":
            self._shutdown_write(conn)

    def _release(self, conn: Connection) -> None:
        """Free the client's slot; the env emits an abort row there before reusing it."""
        if conn.slot is not None and self.slot_conn[conn.slot] is conn:
            self.slot_conn[conn.slot] = None
            self.reserved[conn.slot] = self.reserved[conn.slot] or conn.in_episode
        conn.slot = None
        conn.request = None
        conn.in_reply = False

    def close(self, conn: Connection) -> None:
        if conn.state == "closed":
            return
        if conn.state == "ready":
            self.dropped_total += conn.in_episode
            if conn.in_episode:
                self.refusals.warning(
                    "DISCONNECTED",
                    f"client {conn.peer} (slot {conn.slot}) disconnected mid-episode; episode dropped",
                )
        self._release(conn)
        conn.state = "closed"
        self.conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()

    def shutdown(self, linger_s: float = _CLOSING_LINGER_S) -> None:
        """Stop: every open connection gets ``SHUTTING_DOWN``, then is closed (docs/protocol.md).

        The listening socket closes first (new connections are refused). Every
        connection that has not had an error frame yet, those still before their
        ``hello`` included, gets ``SHUTTING_DOWN`` after the replies still queued
        for it, and is closed once it has read them and closed its end, or after
        ``linger_s`` in all. Meanwhile what clients still send is read and
        dropped: closing a socket with unread input sends a reset, which makes
        some systems discard the error frame before the client reads it.
        """
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()
        deadline = time.monotonic() + linger_s
        for conn in list(self.conns.values()):
            if conn.state in ("handshake", "ready"):
                self._release(conn)
                conn.state = "closing"
                conn.closing_until = deadline
                self.send(conn, error_frame(ErrorCode.SHUTTING_DOWN, "the server is stopping"))
                if conn.state == "closing":
                    self._shutdown_write(conn)
        while self.conns and time.monotonic() < deadline:
            self.poll(min(0.05, max(0.0, deadline - time.monotonic())))
        for conn in list(self.conns.values()):
            self.close(conn)
        self.selector.close()

    def announce(self) -> None:
        host, port = self.address
        print(
            f"rlgear external env: listening on {host}:{port} ({self.num_slots} env slots)", file=sys.stderr
        )


def _same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison that never raises: any string, lone surrogates included, is just wrong."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def _stage(conn: Connection) -> str:
    if conn.state == "handshake":
        return "refused"
    return f"dropped (slot {conn.slot})" if conn.slot is not None else "dropped"
