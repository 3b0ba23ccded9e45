"""A worker process that answers JSON Lines requests one at a time, and the
client that keeps it.

Heavy work a long-lived process must not import (torch in the supervisor
and in ``serve-http``) runs in such a worker: the chat worker
(:mod:`engine.llm.chat_worker`) and the act worker
(:mod:`engine.rl.act_worker`). Both sides live here once:

* :class:`LineWorker` starts ``python -m MODULE ARGS...`` on the first
  request and keeps it for the next ones; a request that outlives its
  deadline kills the worker; a worker that dies costs one request an error
  sentence, and the next request starts a fresh one; a worker left idle for
  ``idle_s`` is closed, so the memory a model holds comes back.
* :func:`serve` is the worker's loop: one JSON object per line in, one
  ``{"...": result}`` or ``{"error": sentence[, "field": name]}`` per line
  out.

:func:`engine_pythonpath` is the ``PYTHONPATH`` under which any child
``python -m engine...`` (a job, an env worker, a training rank) imports this
same engine.

This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from engine.errors import ConfigError, EngineError


def engine_pythonpath() -> str:
    """``PYTHONPATH`` for a child process that must import the same engine as
    this one, installed or not: the folder holding ``engine`` first, then
    this process's ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[1])
    existing = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + existing if existing else "")


class LineWorker:
    """A client's handle on one worker process (thread-safe: one request at
    a time).

    ``label`` names the worker in error sentences ("the chat worker");
    ``lost_hint`` is added when the worker dies without a timeout (for
    example "out of memory?")."""

    def __init__(
        self,
        module: str,
        args: list[str],
        *,
        label: str,
        timeout_s: float,
        idle_s: float | None = None,
        lost_hint: str = "",
    ) -> None:
        self._command = [sys.executable, "-m", module, *args]
        self._label = label
        self._timeout_s = timeout_s
        self._idle_s = idle_s
        self._lost_hint = lost_hint
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._idle_timer: threading.Timer | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            # stderr is inherited: the worker's warnings reach the log.
            self._proc = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        return self._proc

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer to ``payload``. Raises :class:`ConfigError`
        when the worker names a field, :class:`EngineError` with its sentence
        for any other error, a timeout or a dead worker."""
        line = json.dumps(payload)
        with self._lock:
            self._cancel_idle_timer()
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            # A request that outlives the deadline kills the worker, which
            # ends the read below.
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(self._timeout_s, kill)
            timer.start()
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
                answer_line = proc.stdout.readline()
            except OSError:
                answer_line = ""
            finally:
                timer.cancel()
            if not answer_line:
                code = proc.wait()
                self._proc = None
                if timed_out.is_set():
                    why = f"took longer than {self._timeout_s:.0f} s and was stopped"
                else:
                    hint = f" ({self._lost_hint})" if self._lost_hint else ""
                    why = f"stopped with exit code {code}{hint}"
                raise EngineError(
                    f"The {self._label} {why}; the next request starts a new one."
                )
            self._arm_idle_timer()
        try:
            answer = json.loads(answer_line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise EngineError(f"The {self._label} sent an unreadable answer.")
        if "error" in answer:
            if answer.get("field"):
                # The request is wrong, not the worker.
                raise ConfigError(str(answer["field"]), str(answer["error"]))
            raise EngineError(str(answer["error"]))
        return answer

    def _arm_idle_timer(self) -> None:
        if self._idle_s is None:
            return
        self._idle_timer = threading.Timer(self._idle_s, self._close_if_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _close_if_idle(self) -> None:
        # A request that started meanwhile holds the lock and cancelled this
        # timer; one waiting for the lock would restart the worker anyway.
        if self._lock.acquire(blocking=False):
            try:
                proc, self._proc = self._proc, None
            finally:
                self._lock.release()
            _end(proc)

    def close(self) -> None:
        with self._lock:
            self._cancel_idle_timer()
            proc, self._proc = self._proc, None
        _end(proc)


def _end(proc: subprocess.Popen[str] | None) -> None:
    if proc is None:
        return
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()  # the worker ends when its input does
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve(
    lines: TextIO,
    out: TextIO,
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    failure: str,
) -> None:
    """The worker's loop: ``handle`` each request line and write its answer.
    An error the engine names keeps its sentence (and field); anything else
    becomes ``failure`` followed by the exception (``"The model could not
    answer"``)."""
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise EngineError("A worker request must be a JSON object.")
            answer = handle(request)
        except ConfigError as exc:
            answer = {"error": str(exc), "field": exc.field}
        except EngineError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:
            answer = {"error": f"{failure}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
