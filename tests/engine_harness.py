"""Drive a real ``python -m engine serve`` subprocess from a test, without Qt."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import protocol

ROOT = Path(__file__).resolve().parents[1]


class EngineProcess:
    def __init__(self, *extra_args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "serve", *extra_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
            bufsize=1,
        )
        self.messages: queue.Queue[protocol.Message] = queue.Queue()
        self.raw_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._seen: list[protocol.Message] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            self.messages.put(protocol.decode(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))

    def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def send(self, msg: protocol.Request) -> str:
        if not msg.id:
            import dataclasses

            msg = dataclasses.replace(msg, id=protocol.next_id("t"))
        self.send_line(protocol.encode(msg))
        return msg.id

    def wait_for(
        self, predicate: Callable[[protocol.Message], bool], timeout: float = 30.0
    ) -> protocol.Message:
        """The first message (seen before or arriving) that satisfies ``predicate``."""
        for msg in self._seen:
            if predicate(msg):
                self._seen.remove(msg)
                return msg
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no matching message in {timeout}s; stderr:\n"
                    + "\n".join(self.stderr_lines[-30:])
                )
            try:
                msg = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if predicate(msg):
                return msg
            self._seen.append(msg)

    def reply_to(self, req_id: str, timeout: float = 30.0) -> protocol.Message:
        return self.wait_for(
            lambda m: (
                isinstance(m, protocol.Reply | protocol.Error)
                and getattr(m, "reply_to", None) == req_id
            ),
            timeout,
        )

    def call(self, msg: protocol.Request, timeout: float = 30.0) -> dict[str, Any]:
        """Send a request and return its result; raise on an error reply."""
        reply = self.reply_to(self.send(msg), timeout)
        if isinstance(reply, protocol.Error):
            raise RuntimeError(reply.message)
        assert isinstance(reply, protocol.Reply)
        return reply.result

    def close(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            try:
                self.send(protocol.Shutdown())
                self.proc.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
