"""Foundation benchmarks: launch-to-window time and protocol round trips.

Each figure is printed beside the bare alternative measured in the same run
(a bare PySide6 + pyqtgraph window; a bare JSON-lines echo process), because
absolute times on these machines are noisy.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from engine_harness import EngineProcess

from engine import protocol

ROOT = Path(__file__).resolve().parents[2]
RUNS = 5
MESSAGES = 10_000

BARE_WINDOW = """
import os, sys, time, json
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtWidgets import QApplication, QMainWindow
import pyqtgraph
app = QApplication([])
w = QMainWindow()
w.resize(1280, 800)
w.show()
app.processEvents()
print(json.dumps({"shown": True, "cpu_s": time.process_time()}), flush=True)
"""

ECHO = """
import sys, json
out = sys.stdout
for line in sys.stdin:
    msg = json.loads(line)
    reply = {"type": "reply", "reply_to": msg["id"], "result": {}}
    out.write(json.dumps(reply) + "\\n")
    out.flush()
"""


def _launch(cmd: list[str]) -> tuple[float, float]:
    """Seconds from start to the first line the process prints, and the CPU
    seconds it says it had used by then (bytecode cached, as on a user's
    machine: ``conftest.py``)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.wait(timeout=60)
    assert line.strip(), "the process printed nothing"
    return elapsed, float(json.loads(line)["cpu_s"])


def test_bench_launch_to_window_shown(tmp_path: Path) -> None:
    """Issue 16's target: launch to window within 1.2x of a bare PySide6 +
    pyqtgraph window. Alternating rounds after one warm-up launch of each
    (which writes the bytecode caches)."""
    bare_cmd = [sys.executable, "-c", BARE_WINDOW]

    def studio_cmd(i: int) -> list[str]:
        project = str(tmp_path / f"p{i}")
        return [
            sys.executable,
            "-m",
            "studio",
            "--exit-when-shown",
            "--project",
            project,
        ]

    _launch(studio_cmd(-1)), _launch(bare_cmd)  # warm-up
    studio, bare = [], []
    for i in range(RUNS):
        studio.append(_launch(studio_cmd(i)))
        bare.append(_launch(bare_cmd))
    s = statistics.median(t for t, _ in studio)
    b = statistics.median(t for t, _ in bare)
    sc = statistics.median(c for _, c in studio)
    bc = statistics.median(c for _, c in bare)
    print(
        f"\nBENCH startup: launch to window shown {s:.2f} s (median of {RUNS}); "
        f"bare PySide6+pyqtgraph window {b:.2f} s; ratio {s / b:.2f} "
        f"(target <= 1.2); CPU to shown {sc:.2f} s vs {bc:.2f} s, "
        f"ratio {sc / bc:.2f}"
    )
    assert s < 15


def _round_trips(send, receive) -> list[float]:
    times = []
    for i in range(MESSAGES):
        start = time.perf_counter()
        send(i)
        receive(i)
        times.append(time.perf_counter() - start)
    return times


def _summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99)] * 1e6


def test_bench_protocol_round_trip_latency() -> None:
    engine = EngineProcess()
    engine.call(protocol.Hello())

    def send_engine(i: int) -> None:
        engine.send_line(protocol.encode(protocol.Ping(id=f"b{i}", payload="x")))

    def receive_engine(i: int) -> None:
        msg = engine.messages.get(timeout=10)
        assert isinstance(msg, protocol.Reply) and msg.reply_to == f"b{i}"

    try:
        studio_times = _round_trips(send_engine, receive_engine)
    finally:
        engine.close()

    echo = subprocess.Popen(
        [sys.executable, "-u", "-c", ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert echo.stdin is not None and echo.stdout is not None

    def send_echo(i: int) -> None:
        echo.stdin.write(
            json.dumps({"type": "ping", "id": f"b{i}", "payload": "x"}) + "\n"
        )  # type: ignore[union-attr]
        echo.stdin.flush()  # type: ignore[union-attr]

    def receive_echo(i: int) -> None:
        assert json.loads(echo.stdout.readline())["reply_to"] == f"b{i}"  # type: ignore[union-attr]

    bare_times = _round_trips(send_echo, receive_echo)
    echo.stdin.close()
    echo.wait(timeout=10)
    med, p99 = _summary(studio_times)
    bmed, bp99 = _summary(bare_times)
    print(
        f"\nBENCH protocol: {MESSAGES} ping round trips through the engine: "
        f"median {med:.0f} µs, p99 {p99:.0f} µs; bare JSON-lines echo process: "
        f"median {bmed:.0f} µs, p99 {bp99:.0f} µs; ratio (median) {med / bmed:.2f}"
    )
    assert p99 < 50_000
