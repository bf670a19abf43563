"""The external-env wire format (rlgear.external.wire): round trips, and a decoder that only ever raises WireError."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlgear.external.wire import DTYPES, ErrorCode, FrameDecoder, WireError, decode_body, encode

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

arrays = st.dictionaries(
    st.text(min_size=1, max_size=8),
    hnp.arrays(
        dtype=st.sampled_from(sorted(DTYPES)).map(np.dtype),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    ),
    max_size=3,
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@FUZZ
@given(
    arrays=arrays,
    fields=st.dictionaries(st.sampled_from(["a", "b", "reward"]), st.integers()),
    cuts=st.lists(st.integers(0, 10**6), max_size=6),
)
def test_frames_round_trip_whatever_the_chunking(arrays, fields, cuts):
    frame = encode("step", fields, arrays) + encode("bye")
    decoder = FrameDecoder()
    messages = [m for chunk in split(frame, cuts) for m in decoder.feed(chunk)]
    assert [m.type for m in messages] == ["step", "bye"]
    assert {k: v for k, v in messages[0].header.items() if k != "type"} == fields
    assert list(messages[0].arrays) == list(arrays)
    for name, value in arrays.items():
        got = messages[0].arrays[name]
        assert got.dtype == value.dtype.newbyteorder("=") and got.shape == value.shape
        np.testing.assert_array_equal(got, value)
    assert decoder.buffered == 0


def test_arrays_are_little_endian_c_order_on_the_wire():
    frame = encode("x", None, {"a": np.array([[1, 2], [3, 4]], dtype=">i4").T})  # big-endian, F order in
    head_len = struct.unpack(">I", frame[4:8])[0]
    header = json.loads(frame[8 : 8 + head_len])
    assert header["arrays"] == [{"name": "a", "dtype": "int32", "shape": [2, 2]}]
    assert frame[8 + head_len :] == np.array([[1, 3], [2, 4]], dtype="<i4").tobytes()


@FUZZ
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 10**6), max_size=4))
def test_decoder_on_random_bytes_returns_messages_or_raises_wire_error(data, cuts):
    decoder = FrameDecoder(max_message_bytes=4096)
    try:
        for chunk in split(data, cuts):
            for message in decoder.feed(chunk):
                assert isinstance(message.type, str)
    except WireError as err:
        assert isinstance(err.code, ErrorCode)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@FUZZ
@given(
    header=st.dictionaries(st.sampled_from(["type", "arrays", "reward"]), json_values),
    payload=st.binary(max_size=64),
)
def test_decoder_on_random_headers_and_array_specs(header, payload):
    head = json.dumps(header).encode()
    try:
        message = decode_body(struct.pack(">I", len(head)) + head + payload)
    except WireError as err:
        assert isinstance(err.code, ErrorCode)
    else:
        assert isinstance(message.type, str)


@pytest.mark.parametrize(
    "body, code",
    [
        (b'\x00\x00\x00\x05{"ty', ErrorCode.BAD_FRAME),  # header length beyond the frame
        (b"\x00\x00\x00\x02[]", ErrorCode.BAD_FRAME),  # not an object
        (b'\x00\x00\x00\x0b{"type":1}', ErrorCode.BAD_FRAME),  # type not a string
        (b'\x00\x00\x00\x0e{"type":"bye"}\x00', ErrorCode.BAD_FRAME),  # payload not described
    ],
)
def test_malformed_bodies_get_the_documented_codes(body, code):
    with pytest.raises(WireError) as info:
        decode_body(body)
    assert info.value.code is code


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_nan_and_infinity_are_refused(constant):
    head = b'{"type":"step","reward":' + constant.encode() + b"}"
    with pytest.raises(WireError) as info:
        decode_body(struct.pack(">I", len(head)) + head)
    assert info.value.code is ErrorCode.NON_FINITE


def test_oversized_length_is_refused_before_buffering():
    decoder = FrameDecoder(max_message_bytes=1000)
    with pytest.raises(WireError) as info:
        decoder.feed(struct.pack(">I", 10**9))
    assert info.value.code is ErrorCode.TOO_LARGE


def test_array_bytes_must_match_the_announced_shape():
    head = json.dumps({"type": "x", "arrays": [{"name": "o", "dtype": "float32", "shape": [4]}]}).encode()
    with pytest.raises(WireError) as info:
        decode_body(struct.pack(">I", len(head)) + head + b"\x00" * 12)
    assert info.value.code is ErrorCode.BAD_FRAME
    head = json.dumps({"type": "x", "arrays": [{"name": "o", "dtype": "object", "shape": [1]}]}).encode()
    with pytest.raises(WireError) as info:
        decode_body(struct.pack(">I", len(head)) + head + b"\x00" * 8)
    assert info.value.code is ErrorCode.BAD_ARRAY


def test_no_pickle_in_the_wire_module():
    import inspect

    import rlgear.external.client
    import rlgear.external.wire

    for module in (rlgear.external.wire, rlgear.external.client):
        source = inspect.getsource(module)
        for banned in ("import pickle", "pickle.load", "np.load(", "allow_pickle", "marshal"):
            assert banned not in source, (module.__name__, banned)
