"""The engine client handles a burst of engine messages a slice at a time
(issue 16: a GUI stall over 100 ms while runs train), in the order sent."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sys

from engine import protocol
from studio.engine_client import EngineClient

BURST = 400

# A stand-in engine: answers the handshake, then sends a burst of log events
# in one write and waits for stdin to close.
FAKE_ENGINE = f"""
import json, sys
hello = json.loads(sys.stdin.readline())
reply = {{"type": "reply", "reply_to": hello["id"], "result": {{}}}}
lines = [json.dumps(reply)]
for i in range({BURST}):
    lines.append(json.dumps({{"type": "engine.log", "text": str(i)}}))
sys.stdout.write("\\n".join(lines) + "\\n")
sys.stdout.flush()
sys.stdin.read()
"""


def test_a_burst_of_messages_is_handled_over_several_turns_in_order(qtbot) -> None:
    client = EngineClient(program=sys.executable, arguments=["-c", FAKE_ENGINE])
    client.auto_restart = False
    client.DISPATCH_BUDGET_S = 0.0  # a spent budget: one message per turn
    received: list[str] = []
    client.event_received.connect(
        lambda msg: (
            received.append(msg.text) if isinstance(msg, protocol.EngineLog) else None
        )
    )
    client.start()
    try:
        qtbot.waitUntil(lambda: len(received) == BURST, timeout=30_000)
    finally:
        client.stop()
    assert received == [str(i) for i in range(BURST)]


def test_lines_left_when_the_engine_ends_are_handled_before_it_is_gone(
    qtbot,
) -> None:
    client = EngineClient(program=sys.executable, arguments=["-c", "pass"])
    client.auto_restart = False
    client.DISPATCH_BUDGET_S = 0.0
    received: list[str] = []
    client.event_received.connect(
        lambda msg: (
            received.append(msg.text) if isinstance(msg, protocol.EngineLog) else None
        )
    )
    for i in range(3):
        line = protocol.encode(protocol.EngineLog(text=str(i)))
        client._lines.append(line.encode())
    # One message per slice: two are left for the next turns...
    client._drain()
    assert received == ["0"]
    # ...unless the engine ends first: then all are handled, in order.
    client._cleanup_process()
    assert received == ["0", "1", "2"]
