"""The studio's side of the engine: a ``QProcess`` speaking the protocol.

Requests are sent without waiting; their reply (or error) arrives later on
the callbacks given to :meth:`EngineClient.request`, unless the object that
asked (its owner, see ``studio.lifetime``) was deleted meanwhile: then the
answer is dropped instead of calling into a dead widget. Events become the
``event_received`` signal. When the engine dies unexpectedly the client says
so (``crashed``), fails the requests still waiting, and starts a new engine
after a short backoff; the session re-opens the project on ``ready``.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from studio.lifetime import is_alive, owner_of

if TYPE_CHECKING:
    from engine import protocol

ReplyCallback = Callable[[dict[str, Any]], None]
ErrorCallback = Callable[["protocol.Error"], None]

STOPPED, STARTING, READY, CRASHED, FAILED = (
    "stopped",
    "starting",
    "ready",
    "crashed",
    "failed",
)


@dataclass
class _Pending:
    msg: protocol.Request
    on_reply: ReplyCallback | None
    on_error: ErrorCallback | None
    owner: QObject | None = None
    """Who asked: the callbacks are dropped once it is deleted."""


class EngineClient(QObject):
    state_changed = Signal(str)
    """``starting``, ``ready``, ``crashed``, ``failed`` (gave up), ``stopped``."""
    hello_received = Signal(dict)
    event_received = Signal(object)
    """A ``protocol.Event`` (or an ``Error`` no request caused)."""
    stderr_received = Signal(str)
    crashed = Signal(str)
    """The engine died; the argument says how, in one sentence."""

    MAX_RAPID_RESTARTS = 5
    STABLE_AFTER_MS = 30_000
    DISPATCH_BUDGET_S = 0.025
    """Most seconds of engine messages handled in one slice of the GUI
    thread; the rest wait for the next turn of the event loop, so a burst
    (runs reporting while the window was busy) never stalls it."""

    def __init__(
        self,
        program: str | None = None,
        arguments: list[str] | None = None,
        auto_restart: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._program = program or sys.executable
        self._arguments = (
            arguments if arguments is not None else ["-m", "engine", "serve"]
        )
        self.auto_restart = auto_restart
        self.environment: dict[str, str] = {}
        """Variables set for the engine when it (re)starts, over the studio's."""
        self._proc: QProcess | None = None
        self._state = STOPPED
        self._pending: dict[str, _Pending] = {}
        self._queued: list[str] = []  # request ids waiting for the handshake
        self._stdout_buf = b""
        self._stderr_buf = b""
        self._lines: deque[bytes] = deque()  # read, not handled yet
        self._drain_timer = QTimer(self, singleShot=True, interval=0)
        self._drain_timer.timeout.connect(self._drain)
        self._intentional_stop = False
        self._rapid_restarts = 0
        self.restarts = 0
        self.engine_info: dict[str, Any] = {}
        self._restart_timer = QTimer(self, singleShot=True)
        self._restart_timer.timeout.connect(self.start)
        self._stable_timer = QTimer(self, singleShot=True)
        self._stable_timer.timeout.connect(self._on_stable_timer_timeout)

    # ------------------------------------------------------------ state
    @property
    def state(self) -> str:
        return self._state

    @property
    def pid(self) -> int | None:
        if self._proc is None:
            return None
        pid = int(self._proc.processId())
        return pid or None

    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(state)

    # --------------------------------------------------------- lifecycle
    def start(self) -> None:
        from engine import protocol

        if self._proc is not None:
            return
        self._intentional_stop = False
        self._stdout_buf = self._stderr_buf = b""
        self._lines.clear()
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")
        for key, value in self.environment.items():
            env.insert(key, value)
        proc.setProcessEnvironment(env)
        proc.readyReadStandardOutput.connect(self._on_proc_stdout)
        proc.readyReadStandardError.connect(self._on_proc_stderr)
        proc.finished.connect(self._on_proc_finished)
        proc.errorOccurred.connect(self._on_proc_error)
        self._proc = proc
        self._set_state(STARTING)
        proc.start(self._program, self._arguments)
        hello = protocol.Hello(id=protocol.next_id("h"), client="rl-studio")
        self._pending[hello.id] = _Pending(
            hello, self._on_hello_reply, self._on_hello_error
        )
        self._write(hello)

    def stop(
        self,
        timeout_ms: int = 15_000,
        *,
        restart: bool = False,
        keep_runs: bool = False,
    ) -> None:
        """Ask the engine to shut down (it stops its runs, recording the user
        or, with ``restart``, the engine restart as why; with ``keep_runs``
        they go on headless), wait, then kill."""
        from engine import protocol

        self._restart_timer.stop()
        proc = self._proc
        if proc is None:
            self._set_state(STOPPED)
            return
        self._intentional_stop = True
        if proc.state() == QProcess.ProcessState.Running:
            self._write(
                protocol.Shutdown(
                    id=protocol.next_id("s"), restart=restart, keep_runs=keep_runs
                )
            )
            proc.closeWriteChannel()
            if not proc.waitForFinished(timeout_ms):
                proc.kill()
                proc.waitForFinished(2000)
        self._cleanup_process()
        self._set_state(STOPPED)

    def restart(self) -> None:
        self.stop(restart=True)
        self._rapid_restarts = 0
        self.start()

    # ---------------------------------------------------------- requests
    def request(
        self,
        msg: protocol.Request,
        on_reply: ReplyCallback | None = None,
        on_error: ErrorCallback | None = None,
        owner: QObject | None = None,
    ) -> str:
        """Send ``msg`` (its id is filled in if empty); never blocks.

        Before the handshake completes the request waits in a queue; if the
        engine dies before answering, ``on_error`` receives an ``Error``.
        ``owner`` (by default the QObject a callback is a bound method of)
        ties the callbacks to its life: once it is deleted, the answer is
        dropped. Callers whose callbacks are lambdas name it.
        """
        from engine import protocol

        if not msg.id:
            msg = _with_id(msg, protocol.next_id())
        owner = owner or owner_of(on_reply, on_error)
        self._pending[msg.id] = _Pending(msg, on_reply, on_error, owner)
        if self._state == READY:
            self._write(msg)
        else:
            self._queued.append(msg.id)
            if self._state in (STOPPED, FAILED) and self._proc is None:
                self._fail_pending_queued("The engine is not running.")
        return msg.id

    def has_pending(self, message_type: type[protocol.Request]) -> bool:
        """Whether a request of this type waits for its answer (or to be sent)."""
        return any(isinstance(p.msg, message_type) for p in self._pending.values())

    def _write(self, msg: protocol.Message) -> None:
        from engine import protocol

        if self._proc is None:
            return
        self._proc.write((protocol.encode(msg) + "\n").encode("utf-8"))

    # ----------------------------------------------------------- reading
    def _on_proc_stdout(self) -> None:
        assert self._proc is not None
        self._stdout_buf += bytes(self._proc.readAllStandardOutput().data())
        *lines, self._stdout_buf = self._stdout_buf.split(b"\n")
        self._lines.extend(line for line in lines if line.strip())
        self._drain()

    def _drain(self, budget_s: float | None = None) -> None:
        """Handle the lines read, in order, for at most ``budget_s`` seconds
        (default :attr:`DISPATCH_BUDGET_S`; ``math.inf``: all of them)."""
        budget = self.DISPATCH_BUDGET_S if budget_s is None else budget_s
        deadline = time.perf_counter() + budget
        while self._lines:
            # Popped before it is handled: a handler that runs a nested event
            # loop may drain the lines after it, and they stay in order.
            self._dispatch_line(self._lines.popleft())
            if self._lines and time.perf_counter() > deadline:
                self._drain_timer.start()
                return

    def _dispatch_line(self, line: bytes) -> None:
        from engine import protocol

        try:
            msg = protocol.decode(line)
        except protocol.UnknownMessageType as exc:
            # A newer engine may send events this studio does not know.
            self.stderr_received.emit(f"ignored a message from the engine: {exc}")
            return
        except protocol.ProtocolError as exc:
            self.stderr_received.emit(f"unreadable line from the engine: {exc}")
            return
        if isinstance(msg, protocol.Reply):
            pending = self._pending.pop(msg.reply_to, None)
            if pending and pending.on_reply and is_alive(pending.owner):
                pending.on_reply(msg.result)
        elif isinstance(msg, protocol.Error) and msg.reply_to is not None:
            pending = self._pending.pop(msg.reply_to, None)
            if pending is not None and not is_alive(pending.owner):
                return  # who asked is gone
            if pending and pending.on_error:
                pending.on_error(msg)
            elif pending is None or pending.on_error is None:
                self.event_received.emit(msg)
        else:
            self.event_received.emit(msg)

    def _on_proc_stderr(self) -> None:
        assert self._proc is not None
        self._stderr_buf += bytes(self._proc.readAllStandardError().data())
        *lines, self._stderr_buf = self._stderr_buf.split(b"\n")
        for line in lines:
            self.stderr_received.emit(line.decode("utf-8", "replace"))

    # --------------------------------------------------------- handshake
    def _on_hello_reply(self, result: dict[str, Any]) -> None:
        self.engine_info = result
        self._set_state(READY)
        self._stable_timer.start(self.STABLE_AFTER_MS)
        queued, self._queued = self._queued, []
        for req_id in queued:
            pending = self._pending.get(req_id)
            if pending is not None and not is_alive(pending.owner):
                del self._pending[req_id]  # who asked is gone: do not ask
            elif pending is not None:
                self._write(pending.msg)
        self.hello_received.emit(result)

    def _on_hello_error(self, error: protocol.Error) -> None:
        self.stderr_received.emit(f"handshake refused: {error.message}")
        self.auto_restart = False  # a version mismatch will not fix itself
        self.crashed.emit(error.message)
        self.stop()
        self._set_state(FAILED)

    # ------------------------------------------------------------ ending
    def _on_proc_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._handle_exit(f"The engine could not start ({self._program}).")

    def _on_proc_finished(self, exit_code: int, status: QProcess.ExitStatus) -> None:
        if self._intentional_stop:
            return
        if status == QProcess.ExitStatus.CrashExit:
            reason = "The engine crashed"
        else:
            reason = f"The engine exited with code {exit_code}"
        self._handle_exit(reason)

    def _handle_exit(self, reason: str) -> None:
        if self._proc is None:
            return
        self._stable_timer.stop()
        self._cleanup_process()
        self._fail_all_pending(f"{reason} before answering.")
        self._set_state(CRASHED)
        self.crashed.emit(reason + ".")
        if not self.auto_restart:
            self._set_state(FAILED)
            return
        self._rapid_restarts += 1
        if self._rapid_restarts > self.MAX_RAPID_RESTARTS:
            self._set_state(FAILED)
            return
        self.restarts += 1
        self._restart_timer.start(min(250 * 2 ** (self._rapid_restarts - 1), 8000))

    def _on_stable_timer_timeout(self) -> None:
        self._rapid_restarts = 0

    def _cleanup_process(self) -> None:
        # What the engine said before it ended is handled before anything
        # waiting for it is failed.
        self._drain(math.inf)
        self._drain_timer.stop()
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.readyReadStandardOutput.disconnect(self._on_proc_stdout)
            proc.readyReadStandardError.disconnect(self._on_proc_stderr)
            proc.finished.disconnect(self._on_proc_finished)
            proc.errorOccurred.disconnect(self._on_proc_error)
            proc.deleteLater()

    def _fail_all_pending(self, message: str) -> None:
        from engine import protocol

        pending, self._pending = self._pending, {}
        queued = set(self._queued)
        self._queued = []
        for req_id, p in pending.items():
            if p.msg.TYPE == "hello":
                continue
            if req_id in queued:
                # Not sent yet: keep it for the next engine.
                self._pending[req_id] = p
                self._queued.append(req_id)
                continue
            if p.on_error and is_alive(p.owner):
                p.on_error(
                    protocol.Error(
                        reply_to=req_id, error_type="EngineGone", message=message
                    )
                )

    def _fail_pending_queued(self, message: str) -> None:
        from engine import protocol

        for req_id in self._queued:
            p = self._pending.pop(req_id, None)
            if p and p.on_error and is_alive(p.owner):
                p.on_error(
                    protocol.Error(
                        reply_to=req_id, error_type="EngineGone", message=message
                    )
                )
        self._queued = []


def _with_id(msg: protocol.Request, req_id: str) -> protocol.Request:
    import dataclasses

    return dataclasses.replace(msg, id=req_id)
