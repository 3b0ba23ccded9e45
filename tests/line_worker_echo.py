"""A worker for tests/test_line_worker.py: ``{"op": ...}`` echoes, names a
field, raises, sleeps or dies, as a real worker might."""

import os
import sys
import time
from typing import Any

from engine import line_worker
from engine.errors import ConfigError, EngineError


def handle(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "echo":
        return {"echo": request.get("value"), "pid": os.getpid()}
    if op == "field":
        raise ConfigError("value", "value must be positive.")
    if op == "sentence":
        raise EngineError("The thing is missing.")
    if op == "sleep":
        time.sleep(float(request["s"]))
        return {"slept": True}
    if op == "die":
        os._exit(7)
    if op == "garbage":
        sys.stdout.write("not json\n")
        sys.stdout.flush()
        return {"after": "garbage"}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    line_worker.serve(sys.stdin, sys.stdout, handle, failure="The test worker failed")
