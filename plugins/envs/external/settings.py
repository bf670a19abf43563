"""Server settings of the external env, read from ``env.kwargs`` and validated key by key."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rlgear.config import REDACTED
from rlgear.errors import ConfigError, did_you_mean
from rlgear.external.wire import DEFAULT_MAX_MESSAGE_BYTES
from rlgear.spaces import Box, Discrete, Space, space_from_json

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Default bound on |reward| and |observation| from clients. Why 1e6: 100x the largest per-step
#: rewards of common envs (1e3-1e4), yet far below where float32 training overflows. A value loss
#: squares returns, infinite beyond 1.8e19; measured with configs/ppo-cartpole-external.yaml, one
#: reward of 1e17 trains on and 1e20 stopped the run, one observation of 1e10 trains on with relu
#: layers and 1e30 stopped it. The margin covers returns that sum thousands of rewards.
DEFAULT_MAX_ABS_VALUE = 1e6


@dataclass
class ServerSettings:
    """What ``env.kwargs`` may hold for ``env.adapter: external`` (see docs/protocol.md)."""

    observation_space: Space
    action_space: Space
    host: str = "127.0.0.1"  # another address needs a token
    port: int = 9900  # 0: any free port (see address_file)
    token: str | None = None  # clients must send it in hello; required off loopback
    token_env: str | None = None  # or: the name of an environment variable holding the token
    address_file: str | None = None  # write "host:port" here once listening
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # open sockets of every kind; a new one takes room from refused then from not-yet-hello sockets,
    # never from handshaken clients; default: slots + 2 * max_pending_handshakes
    max_connections: int | None = None
    max_pending_handshakes: int = 32  # sockets before a good hello; a new one evicts the oldest
    # per client, counted as messages arrive (token bucket, bursts of a tenth of a second's worth)
    max_messages_per_s: float = 20_000.0
    max_memory_mb: float | None = None  # refuse new clients above this RSS; default 80% of RAM
    min_clients: int = 1  # the first step waits until this many clients are connected
    client_timeout_s: float = 30.0  # drop a mid-episode client silent for this long (others wait)
    handshake_timeout_s: float = 5.0
    frame_timeout_s: float = 10.0  # a frame must be complete this long after its first bytes arrived
    idle_timeout_s: float = 60.0  # drop a handshaken client that sends nothing between episodes this long
    start_grace_s: float = 0.002  # how long a step waits for a client between episodes
    check_bounds: bool = True  # refuse Box observations outside the observation space's low/high
    # refuse rewards beyond this magnitude (BAD_MESSAGE: the client is dropped, training goes on);
    # None: any finite float32, so that one client's reward of 1e20 can stop the run
    max_abs_reward: float | None = DEFAULT_MAX_ABS_VALUE
    # refuse Box observation values beyond this magnitude (BAD_ARRAY); default: DEFAULT_MAX_ABS_VALUE,
    # or the observation space's largest finite |low|/|high| if larger; None: any finite float32
    max_abs_observation: float | None = None
    # --- version 2: clients that act locally (docs/protocol.md section 10) ---
    max_upload_steps: int = 1024  # rows in one experience upload at most (BAD_ARRAY beyond)
    max_upload_bytes: int = (
        8 << 20
    )  # largest experience frame (TOO_LARGE beyond); other frames: max_message_bytes
    max_policy_lag: int = (
        2  # uploads acted on with a policy this many versions older are trained on, older ones dropped
    )
    # refuse behaviour log-probabilities beyond this magnitude (BAD_ARRAY): PPO's ratio exp(new - old)
    # overflows float32 beyond 88; None: any finite float32
    max_abs_logp: float | None = 50.0


_SPACE_KEYS = ("observation_space", "action_space")


def _number(key: str, value: Any, *, integer: bool, minimum: float, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
        what = "an integer" if integer else "a number"
        raise ConfigError(f"env.kwargs.{key}: expected {what} >= {minimum}, got {value!r}")
    return value


def parse_settings(kwargs: dict[str, Any], num_slots: int) -> ServerSettings:
    """``env.kwargs`` -> ServerSettings, or a ConfigError naming the key."""
    known = [f.name for f in fields(ServerSettings)]
    for key in kwargs:
        if key not in known:
            raise ConfigError(
                f"env.kwargs.{key}: unknown setting of the external env{did_you_mean(key, known)} "
                f"(known: {', '.join(known)})"
            )
    spaces = {}
    for key in _SPACE_KEYS:
        if key not in kwargs:
            raise ConfigError(
                f"env.kwargs.{key}: required for the external env (clients send observations and "
                "receive actions of these spaces), e.g. {type: Discrete, n: 2} or "
                "{type: Box, shape: [4], dtype: float32, low: [-inf, ...], high: [inf, ...]}"
            )
        try:
            spaces[key] = space_from_json(dict(kwargs[key]))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"env.kwargs.{key}: not a valid space ({type(err).__name__}: {err})") from None
        if not isinstance(spaces[key], Box | Discrete):
            raise ConfigError(
                f"env.kwargs.{key}: the external env supports Box and Discrete spaces only, got "
                f"{spaces[key]!r} (flatten structured observations on the client's side)"
            )
    s = ServerSettings(**spaces)
    s.host = kwargs.get("host", s.host)
    if not isinstance(s.host, str) or not s.host:
        raise ConfigError(f"env.kwargs.host: expected an address string, got {s.host!r}")
    s.port = _number("port", kwargs.get("port", s.port), integer=True, minimum=0)
    if s.port > 65535:
        raise ConfigError(f"env.kwargs.port: expected 0..65535, got {s.port}")
    for key in ("token", "token_env", "address_file"):
        value = kwargs.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            shown = "a blank string" if isinstance(value, str) else repr(value)
            raise ConfigError(f"env.kwargs.{key}: expected a non-blank string, got {shown}")
        setattr(s, key, value)
    if s.token == REDACTED:
        raise ConfigError(
            "env.kwargs.token: this config was read back from a run folder or checkpoint, where the token "
            "is redacted; give it again (--set env.kwargs.token=...) or, better, use env.kwargs.token_env"
        )
    if s.token_env is not None:
        if s.token is not None:
            raise ConfigError("env.kwargs.token_env: give either token or token_env, not both")
        s.token = os.environ.get(s.token_env)
        if not s.token:
            raise ConfigError(f"env.kwargs.token_env: environment variable {s.token_env} is not set")
        if not s.token.strip():
            raise ConfigError(
                f"env.kwargs.token_env: environment variable {s.token_env} holds only whitespace; "
                "a token must be hard to guess"
            )
    if not is_loopback(s.host) and not s.token:
        raise ConfigError(
            f"env.kwargs.host: binding {s.host} (not loopback) needs a token: set env.kwargs.token "
            "or env.kwargs.token_env, so that only your clients can connect"
        )
    s.max_message_bytes = _number(
        "max_message_bytes", kwargs.get("max_message_bytes", s.max_message_bytes), integer=True, minimum=256
    )
    s.max_pending_handshakes = _number(
        "max_pending_handshakes",
        kwargs.get("max_pending_handshakes", s.max_pending_handshakes),
        integer=True,
        minimum=1,
    )
    s.max_connections = _number(
        "max_connections",
        kwargs.get("max_connections", num_slots + 2 * s.max_pending_handshakes),
        integer=True,
        minimum=1,
    )
    s.max_messages_per_s = float(
        _number(
            "max_messages_per_s",
            kwargs.get("max_messages_per_s", s.max_messages_per_s),
            integer=False,
            minimum=1,
        )
    )
    s.max_memory_mb = _number(
        "max_memory_mb",
        kwargs.get("max_memory_mb", default_memory_mb()),
        integer=False,
        minimum=1,
        allow_none=True,
    )
    s.min_clients = _number("min_clients", kwargs.get("min_clients", s.min_clients), integer=True, minimum=1)
    if s.min_clients > num_slots:
        raise ConfigError(
            f"env.kwargs.min_clients: {s.min_clients} is more than the env slots "
            f"(workers.num_envs_per_worker = {num_slots})"
        )
    for key in (
        "client_timeout_s",
        "handshake_timeout_s",
        "frame_timeout_s",
        "idle_timeout_s",
        "start_grace_s",
    ):
        setattr(s, key, float(_number(key, kwargs.get(key, getattr(s, key)), integer=False, minimum=0)))
    check_bounds = kwargs.get("check_bounds", s.check_bounds)
    if not isinstance(check_bounds, bool):
        raise ConfigError(f"env.kwargs.check_bounds: expected true or false, got {check_bounds!r}")
    s.check_bounds = check_bounds
    s.max_abs_reward = _bound("max_abs_reward", kwargs.get("max_abs_reward", s.max_abs_reward))
    s.max_abs_observation = _bound(
        "max_abs_observation",
        kwargs.get("max_abs_observation", default_max_abs_observation(s.observation_space)),
    )
    s.max_upload_steps = _number(
        "max_upload_steps", kwargs.get("max_upload_steps", s.max_upload_steps), integer=True, minimum=1
    )
    s.max_upload_bytes = _number(
        "max_upload_bytes", kwargs.get("max_upload_bytes", s.max_upload_bytes), integer=True, minimum=256
    )
    s.max_policy_lag = _number(
        "max_policy_lag", kwargs.get("max_policy_lag", s.max_policy_lag), integer=True, minimum=0
    )
    s.max_abs_logp = _bound("max_abs_logp", kwargs.get("max_abs_logp", s.max_abs_logp))
    return s


def _bound(key: str, value: Any) -> float | None:
    """A magnitude bound: a number >= 0, or None (null) for none beyond float32."""
    value = _number(key, value, integer=False, minimum=0, allow_none=True)
    return None if value is None else float(value)


def default_max_abs_observation(space: Space) -> float | None:
    """DEFAULT_MAX_ABS_VALUE, raised to the Box's largest finite bound: declared values are never refused.

    Discrete observations are already bounded by ``n`` (None: no check).
    """
    if not isinstance(space, Box):
        return None
    bounds = np.abs(np.concatenate([np.ravel(space.low), np.ravel(space.high)]).astype(np.float64))
    finite = bounds[np.isfinite(bounds)]
    return max(DEFAULT_MAX_ABS_VALUE, float(finite.max()) if finite.size else 0.0)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_memory_mb() -> float | None:
    """80% of physical memory (None where the OS does not say)."""
    try:
        return 0.8 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def rss_mb() -> float | None:
    """This process's resident memory (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None
