"""What a job sees of the world while it runs in its own process.

A job is a function ``run(ctx: JobContext) -> dict`` (the dict is its summary)
registered in ``engine.jobs.registry``. It reports through the context only:

* ``ctx.metrics(step, {...})`` — buffered, flushed about 10 times a second to
  ``runs/<id>/metrics.jsonl`` (fsync'ed), to the supervisor as one
  ``run.metrics`` event per flush and, when the run is tracked, to MLflow
  (``ctx.tracker``, :mod:`engine.jobs.tracking`);
* ``ctx.progress(done, total)`` — rate and ETA are derived here;
* ``ctx.log(text)`` — to ``log.txt`` (through the supervisor) and the GUI;
* ``ctx.should_stop`` — becomes True when the user presses Stop, the
  engine restarts, the studio or the engine dies, or the process gets
  SIGINT/SIGTERM (:func:`stop_on_signals`); the job then saves what it needs
  and returns. ``ctx.stop_reason`` says which (one of :data:`STOP_REASONS`);
  it becomes the summary's ``stopped_by``.

Events travel to the supervisor as protocol lines on a private copy of the
original stdout; ``sys.stdout`` and fd 1 are pointed at stderr so stray
prints from libraries land in the log instead of corrupting the stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from engine import contract, protocol
from engine.store.metrics import MetricsWriter, clean_row

if TYPE_CHECKING:
    from engine.jobs.tracking import RunTracker

FLUSH_INTERVAL_S = 0.1
CHECKPOINTS_FOLDER = "checkpoints"
"""The folder of a run's checkpoints, in its run folder (``checkpoint_dir``)."""

STOP_REASONS = ("user", "engine_restart", "engine_gone", "gui_gone", "signal")
"""Why a run stopped before its end (its summary's ``stopped_by``): the user
asked (Stop, ``run.stop``, closing the studio), the studio restarted the
engine, the engine died (the job lost its supervisor), the studio died (its
engine stopped the runs), or the job process got SIGINT or SIGTERM."""
STOP_REQUEST_FILE = contract.STOP_REQUEST_FILE
"""Written in the run folder by whoever stops a run it does not supervise
(another engine on the project, before its SIGINT): holds the reason, so
the job records who asked instead of just ``signal``."""


class JobContext:
    """The job's handle on its run folder, its metrics and its stop flag."""

    def __init__(
        self,
        run_id: str,
        run_dir: Path,
        kind: str,
        config: dict[str, Any],
        *,
        resume: bool = False,
        events: TextIO | None = None,
        time_offset: float = 0.0,
    ) -> None:
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.kind = kind
        self.config = config
        self.resume = resume
        self.checkpoint_dir = self.run_dir / CHECKPOINTS_FOLDER
        # runs live at <project>/runs/<run-id>/
        self.project_dir = self.run_dir.parent.parent
        self._events = events
        self._events_lock = threading.Lock()
        self._metrics = MetricsWriter(self.run_dir / contract.METRICS_FILE)
        self._stop = threading.Event()
        # A request left by an earlier stop of this run is not for this one.
        (self.run_dir / STOP_REQUEST_FILE).unlink(missing_ok=True)
        self.stop_reason = ""
        """The first of :data:`STOP_REASONS` asked for; empty until then."""
        # On resume, wall time continues from where the run left off so that
        # curves drawn against time stay continuous.
        self._t0 = time.monotonic() - time_offset
        self._progress_last: tuple[float, float] | None = None
        self.last_progress: tuple[float, float] = (0.0, 0.0)
        """``(done, total)`` of the latest :meth:`progress` call."""
        self.detached = False
        """True once the job keeps its own books (:meth:`detach`)."""
        self.tracker: RunTracker | None = None
        """Where flushed metric rows also go (MLflow, W&B), when the run is
        tracked (:mod:`engine.jobs.tracking`)."""
        self._rate = 0.0
        self._pending_progress: protocol.RunProgress | None = None
        self._closed = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True)
        self._flusher.start()

    # ---------------------------------------------------------------- stop
    @property
    def should_stop(self) -> bool:
        return self._stop.is_set()

    def request_stop(self, reason: str = "user") -> None:
        """Ask the job to stop; the first ``reason`` (of :data:`STOP_REASONS`)
        is the one recorded."""
        if not self._stop.is_set():
            self.stop_reason = reason if reason in STOP_REASONS else "user"
        self._stop.set()

    def wait_for_stop(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on a stop request."""
        return self._stop.wait(timeout)

    # ------------------------------------------------------------- reports
    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def metrics(self, step: int, values: Mapping[str, Any]) -> None:
        row = clean_row(values)
        if not row:
            return
        row["step"] = int(step)
        row["time"] = round(self.elapsed, 4)
        self._metrics.append(row)

    def progress(self, done: float, total: float, message: str = "") -> None:
        now = time.monotonic()
        if self._progress_last is not None:
            t_prev, d_prev = self._progress_last
            if now - t_prev >= 0.5 and done > d_prev:
                inst = (done - d_prev) / (now - t_prev)
                # Exponential smoothing keeps the ETA from jumping around.
                self._rate = inst if self._rate == 0 else 0.7 * self._rate + 0.3 * inst
                self._progress_last = (now, done)
        else:
            self._progress_last = (now, done)
        self.last_progress = (float(done), float(total))
        eta = (total - done) / self._rate if self._rate > 0 and total > 0 else None
        self._pending_progress = protocol.RunProgress(
            run_id=self.run_id,
            done=float(done),
            total=float(total),
            rate=round(self._rate, 3),
            eta_s=None if eta is None else round(max(eta, 0.0), 1),
            message=message,
        )

    def log(self, text: str) -> None:
        """A line for the run's log (also printed to stderr, captured there)."""
        print(text, file=sys.stderr, flush=True)

    def emit(self, msg: protocol.Message) -> None:
        """Send one protocol message to the supervisor."""
        if self._events is None:
            return
        line = protocol.encode(msg)
        with self._events_lock:
            try:
                self._events.write(line + "\n")
                self._events.flush()
            except (BrokenPipeError, ValueError, OSError):
                # The supervisor is gone; stop instead of dying on a write.
                self.request_stop("engine_gone")

    def detach(self) -> None:
        """Go on without the supervisor (``run.detach``: the studio died).
        ``run.detached`` is the last line on the event stream; from then on
        nothing is sent there (its reader is going away), and stdout and
        stderr go to the run's ``log.txt``, so neither a write nor the end of
        stdin stops the job."""
        with self._events_lock:
            events, self._events = self._events, None
            self.detached = True
            if events is not None:
                with contextlib.suppress(BrokenPipeError, ValueError, OSError):
                    line = protocol.encode(protocol.RunDetached(run_id=self.run_id))
                    events.write(line + "\n")
                    events.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        log_fd = os.open(
            self.run_dir / contract.LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT
        )
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)

    # --------------------------------------------------------------- flush
    def flush(self, sync: bool = False) -> None:
        """Write buffered metrics (fsync'ed with ``sync``) and send them."""
        rows = self._metrics.flush(sync)
        if rows and self.tracker is not None:
            self.tracker.metrics(rows)
        if rows:
            self.emit(protocol.RunMetrics(run_id=self.run_id, rows=rows))
        progress, self._pending_progress = self._pending_progress, None
        if progress is not None:
            self.emit(progress)

    def stop_flushing(self) -> None:
        """Stop the flusher thread and write what is buffered (fsync'ed)."""
        self._closed.set()
        self._flusher.join(timeout=2)
        self.flush(sync=True)

    def close(self) -> None:
        self.stop_flushing()

    def _flush_loop(self) -> None:
        while not self._closed.wait(FLUSH_INTERVAL_S):
            try:
                self.flush()
            except OSError as exc:  # disk full: tell the log, keep training
                print(f"could not write metrics: {exc}", file=sys.stderr, flush=True)


def _on_stop_signals(
    handler: Callable[[int, FrameType | None], None],
) -> Callable[[], None]:
    """``handler`` for SIGINT and SIGTERM; returns a function that restores
    the previous handlers."""
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


_THREAD_JOBS: set[JobContext] = set()
"""Jobs running on threads other than the main one, which cannot take
signals: :func:`stop_threads_on_signals` stops them."""
_THREAD_JOBS_LOCK = threading.Lock()


def stop_threads_on_signals(say: Callable[[str], None]) -> Callable[[], None]:
    """For a main thread whose jobs run on threads of their own (a sweep
    worker training trials together): SIGINT and SIGTERM ask every such job
    to stop, as :func:`stop_on_signals` does for one; a second aborts.
    Returns a function that restores the previous handlers."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        with _THREAD_JOBS_LOCK:
            jobs = list(_THREAD_JOBS)
        if any(ctx.should_stop for ctx in jobs):
            raise KeyboardInterrupt(f"{name} while stopping")
        say(f"stopping {len(jobs)} runs: saving checkpoints ({name} again to abort)")
        for ctx in jobs:
            ctx.request_stop(_requested_reason(ctx.run_dir) or "signal")

    return _on_stop_signals(handler)


def stop_on_signals(ctx: JobContext, say: Callable[[str], None]) -> Callable[[], None]:
    """Handle SIGINT and SIGTERM as a cooperative stop of ``ctx`` (reason
    ``signal``): the job saves its checkpoint and ends as stopped. A signal
    after a stop was asked for aborts at once (``KeyboardInterrupt``).
    ``say`` tells the user; returns a function that restores the previous
    handlers. Off the main thread, which cannot take signals, ``ctx`` is
    left to :func:`stop_threads_on_signals` instead."""
    if threading.current_thread() is not threading.main_thread():
        with _THREAD_JOBS_LOCK:
            _THREAD_JOBS.add(ctx)

        def forget() -> None:
            with _THREAD_JOBS_LOCK:
                _THREAD_JOBS.discard(ctx)

        return forget

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if ctx.should_stop:
            raise KeyboardInterrupt(f"{name} while stopping")
        say(f"stopping: saving a checkpoint ({name} again to abort)")
        ctx.request_stop(_requested_reason(ctx.run_dir) or "signal")

    return _on_stop_signals(handler)


def _requested_reason(run_dir: Path) -> str:
    try:
        reason = (run_dir / STOP_REQUEST_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return reason if reason in STOP_REASONS else ""


def read_run_config(run_dir: Path) -> dict[str, Any]:
    with open(run_dir / contract.CONFIG_FILE, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def private_event_stream() -> TextIO:
    """Keep the real stdout for events and point fd 1 and ``sys.stdout`` at
    stderr, so nothing else can write into the event stream."""
    sys.stdout.flush()
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(events_fd, "w", encoding="utf-8", buffering=1)
