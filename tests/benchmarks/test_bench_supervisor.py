"""Supervisor reply medians: hello, catalogs, run schema and hardware, each
timed 50 times on a real ``engine serve`` after one warm-up call, beside a
bare JSON-lines echo process measured in the same run (absolute times on
these machines are noisy)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from engine_harness import EngineProcess
from test_supervisor_light import hello, supervisor_medians

ECHO = """
import sys, json
for line in sys.stdin:
    msg = json.loads(line)
    sys.stdout.write(json.dumps({"type": "reply", "reply_to": msg["id"]}) + "\\n")
    sys.stdout.flush()
"""


def _echo_median_ms(n: int = 50) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-c", ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None and proc.stdout is not None
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        proc.stdin.write(json.dumps({"id": str(i)}) + "\n")
        proc.stdin.flush()
        proc.stdout.readline()
        times.append(time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=10)
    return 1000 * statistics.median(times)


def test_bench_supervisor_reply_medians() -> None:
    engine = EngineProcess()
    try:
        medians = supervisor_medians(engine, n=50)
        heavy = engine.call(hello())["heavy_modules"]
    finally:
        engine.close()
    echo = _echo_median_ms()
    for name, ms in medians.items():
        print(f"supervisor {name}: median {ms:.2f} ms")
    print(f"bare echo process: median {echo:.2f} ms")
    print(f"heavy modules in the supervisor: {heavy or 'none'}")
    assert max(medians.values()) < 50 and heavy == []
