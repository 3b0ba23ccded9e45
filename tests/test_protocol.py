"""Protocol round trips and malformed input, without any process."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import protocol

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def test_every_message_type_round_trips_with_defaults() -> None:
    for type_name, cls in protocol.message_types().items():
        msg = cls()
        line = protocol.encode(msg)
        assert "\n" not in line
        back = protocol.decode(line)
        assert back == msg, type_name
        assert json.loads(line)["v"] == protocol.PROTOCOL_VERSION


@given(
    run_id=st.text(max_size=30),
    rows=st.lists(
        st.dictionaries(st.text(max_size=10), json_values, max_size=5), max_size=5
    ),
)
def test_metrics_round_trip(run_id: str, rows: list) -> None:
    msg = protocol.RunMetrics(run_id=run_id, rows=rows)
    assert protocol.decode(protocol.encode(msg)) == msg


@given(
    reply_to=st.none() | st.text(max_size=10),
    message=st.text(),
    tb=st.text(),
)
def test_error_round_trip(reply_to: str | None, message: str, tb: str) -> None:
    msg = protocol.Error(
        reply_to=reply_to, error_type="X", message=message, traceback=tb
    )
    assert protocol.decode(protocol.encode(msg)) == msg


@given(config=st.dictionaries(st.text(max_size=10), json_values, max_size=6))
def test_start_run_round_trip(config: dict) -> None:
    msg = protocol.StartRun(id="a1", kind="selftest", config=config, name="n")
    assert protocol.decode(protocol.encode(msg)) == msg


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"v": 1}', "no 'type'"),
        ('{"type": 5}', "no 'type'"),
        ('{"type": "run.stop", "id": "1", "timeout_s": "soon"}', "wrong type"),
        ('{"type": "run.start", "id": "1", "config": []}', "wrong type"),
    ],
)
def test_malformed_lines_raise_protocol_error(line: str, expected: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=expected):
        protocol.decode(line)


def test_unknown_type_is_its_own_error_and_keeps_the_id() -> None:
    line = '{"v": 1, "type": "warp.drive", "id": "q7"}'
    with pytest.raises(protocol.UnknownMessageType):
        protocol.decode(line)
    assert protocol.request_id_of(line) == "q7"
    assert protocol.request_id_of("garbage") is None


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    msg = protocol.decode(
        '{"v": 1, "type": "ping", "id": "p", "payload": "x", "new": 1}'
    )
    assert msg == protocol.Ping(id="p", payload="x")


def test_nan_is_refused_at_encode_time() -> None:
    with pytest.raises(ValueError):
        protocol.encode(protocol.RunMetrics(rows=[{"x": float("nan")}]))


def test_messages_are_frozen() -> None:
    msg = protocol.Ping(id="1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.payload = "changed"  # type: ignore[misc]


def test_int_is_accepted_for_float_fields_but_bool_is_not() -> None:
    assert (
        protocol.decode('{"type": "run.stop", "id": "1", "timeout_s": 3}').timeout_s
        == 3
    )
    with pytest.raises(protocol.ProtocolError):
        protocol.decode('{"type": "run.stop", "id": "1", "timeout_s": true}')
