"""The external-env wire format: length-prefixed frames with a JSON header and raw array bytes.

Shared by :mod:`rlgear.external.client` and the ``external`` env server, and written
so that a client in any language can speak it (``docs/protocol.md`` is the
specification; keep the two in step). A frame is::

    uint32 big-endian  frame_length    bytes that follow this field
    uint32 big-endian  header_length   bytes of the JSON header
    header_length      UTF-8 JSON object, with at least "type"
    the rest           payload: the arrays listed in header["arrays"],
                       concatenated in that order, C order, little-endian

No pickle, no numpy-specific format: an array is described by a dtype name
from :data:`DTYPES`, a shape, and its raw bytes. Standard library + numpy only.
"""

from __future__ import annotations

import json
import math
import socket
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from rlgear.errors import RLGearError

#: The newest protocol version; a server speaks every version of :data:`PROTOCOL_VERSIONS`.
#: Version 2 adds clients that act locally (docs/protocol.md section 10); version 1 is unchanged.
PROTOCOL_VERSION = 2
PROTOCOL_VERSIONS = (1, 2)
FLOAT32_MAX = float(np.finfo(np.float32).max)
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">II")

#: dtype names allowed on the wire (all little-endian, C order).
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float16", "float32", "float64",
    )
}  # fmt: skip
_DTYPE_NAMES = {np.dtype(name): name for name in DTYPES}


class ErrorCode(IntEnum):
    """Codes of ``error`` frames (the server closes the connection after sending one)."""

    BAD_FRAME = 1  # framing or header is malformed (not JSON, lengths inconsistent)
    TOO_LARGE = 2  # frame_length above the server's max_message_bytes
    UNSUPPORTED_PROTOCOL = 3  # hello asked for a protocol version the server does not speak
    AUTH_FAILED = 4  # missing or wrong token
    SERVER_FULL = 5  # connection limit or all env slots taken: retry later or elsewhere
    OVERLOADED = 6  # server memory above its threshold: retry later or elsewhere
    UNKNOWN_TYPE = 7  # a message type the server does not know
    BAD_MESSAGE = 8  # a field is missing or has the wrong JSON type
    BAD_ARRAY = 9  # an array has the wrong name, dtype or shape, or its bytes do not match
    NON_FINITE = 10  # NaN or infinity where a number is expected
    OUT_OF_ORDER = 11  # a message not allowed now (step before start, two requests in flight, ...)
    RATE_LIMITED = 12  # more messages per second than the server allows
    TIMEOUT = 13  # handshake or a mid-episode step took longer than the server waits
    SHUTTING_DOWN = 14  # the server is stopping
    NO_POLICY = 15  # (v2) the server cannot give its policy to a client that acts locally


class WireError(RLGearError):
    """A frame or message broke the protocol; ``code`` is what goes into the error frame."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.detail = message


class ServerError(RLGearError):
    """The server answered with an error frame (client side)."""

    def __init__(self, code: int, name: str, message: str):
        super().__init__(f"server error {code} {name}: {message}")
        self.code = code
        self.name = name
        self.detail = message


@dataclass
class Message:
    """One decoded frame: its JSON header (``type`` and fields) and its arrays."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    nbytes: int = 0  # the frame's frame_length (bytes after the length prefix), set by FrameDecoder

    @property
    def type(self) -> str:
        return self.header["type"]


def _reject_constant(name: str) -> float:
    raise WireError(ErrorCode.NON_FINITE, f"JSON constant {name} is not allowed (numbers must be finite)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: ``{"type":"bye","type":"hello"}`` must not be a hello."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise WireError(ErrorCode.BAD_FRAME, f"header repeats the key '{key[:64]}'")
        out[key] = value
    return out


def finite_or_null(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON null), at any depth.

    Why: the encoder sends strict JSON; a statistic that became infinite (a
    return summed past float64) must reach the client as null, not stop the server.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    if isinstance(value, np.floating):
        return finite_or_null(float(value))
    return value


def encode(
    msg_type: str, fields: dict[str, Any] | None = None, arrays: dict[str, np.ndarray] | None = None
) -> bytes:
    """One frame: ``msg_type`` plus ``fields`` in the header, ``arrays`` as raw little-endian bytes."""
    header: dict[str, Any] = {"type": msg_type}
    if fields:
        header.update(fields)
    chunks: list[bytes] = []
    if arrays:
        specs = []
        for name, value in arrays.items():
            arr = np.asarray(value)
            dtype_name = _DTYPE_NAMES.get(arr.dtype.newbyteorder("=")) or _DTYPE_NAMES.get(arr.dtype)
            if dtype_name is None:
                raise WireError(ErrorCode.BAD_ARRAY, f"array '{name}': dtype {arr.dtype} cannot be sent")
            arr = np.asarray(arr, dtype=DTYPES[dtype_name], order="C")  # (ascontiguousarray makes 0-d 1-d)
            specs.append({"name": name, "dtype": dtype_name, "shape": list(arr.shape)})
            chunks.append(arr.tobytes())
        header["arrays"] = specs
    head = json.dumps(finite_or_null(header), separators=(",", ":"), allow_nan=False).encode()
    payload = b"".join(chunks)
    return _PREFIX.pack(4 + len(head) + len(payload), len(head)) + head + payload


def _decode_arrays(specs: Any, payload: memoryview) -> dict[str, np.ndarray]:
    if not isinstance(specs, list):
        raise WireError(ErrorCode.BAD_FRAME, "header 'arrays' must be a list")
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise WireError(
                ErrorCode.BAD_FRAME, "each entry of 'arrays' must be an object with a string 'name'"
            )
        name = spec["name"]
        dtype = DTYPES.get(spec.get("dtype")) if isinstance(spec.get("dtype"), str) else None
        if dtype is None:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"array '{name}': dtype must be one of {sorted(DTYPES)}, got {spec.get('dtype')!r}",
            )
        shape = spec.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > 32
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise WireError(ErrorCode.BAD_ARRAY, f"array '{name}': shape must be a list of non-negative ints")
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if offset + nbytes > len(payload):
            raise WireError(
                ErrorCode.BAD_FRAME, f"array '{name}': {nbytes} bytes announced, payload too short"
            )
        if name in arrays:
            raise WireError(ErrorCode.BAD_FRAME, f"array '{name}' appears twice")
        arr = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(tuple(shape))
        arrays[name] = arr.astype(dtype.newbyteorder("="), copy=True)  # native order, owned memory
        offset += nbytes
    if offset != len(payload):
        raise WireError(
            ErrorCode.BAD_FRAME, f"payload has {len(payload) - offset} bytes not described by 'arrays'"
        )
    return arrays


def decode_body(body: bytes | bytearray | memoryview) -> Message:
    """Decode a frame without its 4-byte length prefix (header length, header, payload)."""
    view = memoryview(body)
    if len(view) < 4:
        raise WireError(ErrorCode.BAD_FRAME, "frame shorter than its 4-byte header length")
    (head_len,) = _U32.unpack_from(view, 0)
    if head_len > len(view) - 4:
        raise WireError(ErrorCode.BAD_FRAME, f"header length {head_len} exceeds the frame")
    try:
        header = json.loads(
            bytes(view[4 : 4 + head_len]).decode("utf-8"),
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_keys,
        )
    except WireError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise WireError(ErrorCode.BAD_FRAME, f"header is not UTF-8 JSON: {err}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise WireError(ErrorCode.BAD_FRAME, "header must be a JSON object with a string 'type'")
    arrays = _decode_arrays(header.pop("arrays", []), view[4 + head_len :])
    return Message(header, arrays)


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes as they arrive, get whole messages back.

    Raises :class:`WireError` for a frame larger than ``max_message_bytes``
    as soon as its length prefix arrives (before buffering the body).
    """

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        self.max_message_bytes = max_message_bytes
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Message]:
        self._buffer += data
        out: list[Message] = []
        buf = self._buffer
        start = 0
        while len(buf) - start >= 4:
            (length,) = _U32.unpack_from(buf, start)
            if length > self.max_message_bytes:
                raise WireError(
                    ErrorCode.TOO_LARGE,
                    f"frame of {length} bytes exceeds the limit of {self.max_message_bytes}",
                )
            if len(buf) - start - 4 < length:
                break
            message = decode_body(memoryview(buf)[start + 4 : start + 4 + length])
            message.nbytes = length
            out.append(message)
            start += 4 + length
        if start:
            del buf[:start]
        return out


def recv_message(sock: socket.socket, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Message:
    """Read exactly one frame from a blocking socket (``ConnectionError`` on EOF)."""
    (length,) = _U32.unpack(_recv_exact(sock, 4))
    if length > max_message_bytes:
        raise WireError(
            ErrorCode.TOO_LARGE, f"frame of {length} bytes exceeds the limit of {max_message_bytes}"
        )
    return decode_body(_recv_exact(sock, length))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("connection closed by peer")
        got += k
    return bytes(buf)


def error_frame(code: ErrorCode, message: str) -> bytes:
    return encode("error", {"code": int(code), "name": code.name, "message": message})


def check_finite_number(header: dict[str, Any], key: str) -> float:
    """A required finite JSON number field (booleans are not numbers here)."""
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(ErrorCode.BAD_MESSAGE, f"'{key}' must be a number, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise WireError(ErrorCode.NON_FINITE, f"'{key}' must be finite, got {value}")
    if abs(value) > FLOAT32_MAX:  # finite here, infinite once stored as float32 for training
        raise WireError(ErrorCode.NON_FINITE, f"'{key}' {value:g} is beyond float32 (max {FLOAT32_MAX:.4g})")
    return value


def check_bool(header: dict[str, Any], key: str, default: bool = False) -> bool:
    value = header.get(key, default)
    if not isinstance(value, bool):
        raise WireError(ErrorCode.BAD_MESSAGE, f"'{key}' must be true or false, got {type(value).__name__}")
    return value
