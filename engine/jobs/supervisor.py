"""The supervisor: one job process per run, watched from the engine process.

For each run it spawns ``python -m engine.jobs.runner RUN_DIR`` in its own
session, forwards the job's protocol events, appends its stderr to
``log.txt`` and forwards it as batched ``run.log`` events, and turns the
process's end into ``run.finished`` or ``run.failed`` (with the exit code or
signal and the last log lines). Stopping is cooperative first (a ``run.stop``
line on the job's stdin), then the job's whole process tree is terminated
and, if it still lingers, killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signal_module
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from engine import contract, protocol
from engine.errors import EngineError, ProjectError, UnknownRunError
from engine.jobs import lifecycle, registry
from engine.jobs.context import STOP_REQUEST_FILE
from engine.jobs.reconcile import reconcile_runs
from engine.line_worker import engine_pythonpath
from engine.store.project import Project, process_owns_run

log = logging.getLogger("engine.supervisor")

LOG_TAIL_LINES = 40
TICK_S = 0.2
KILL_GRACE_S = 3.0
DETACH_TIMEOUT_S = 5.0
"""How long a job gets to answer ``run.detach``."""
RECONCILE_S = 5.0
"""How often runs that no live process owns are settled from their folders."""

Emit = Callable[[protocol.Message], None]


@dataclass
class _Job:
    run_id: str
    run_dir: Path
    proc: subprocess.Popen[bytes]
    log_file: IO[str]
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    pending_log: list[str] = field(default_factory=list)
    finished: protocol.RunFinished | None = None
    progress: tuple[float, float] = (0.0, 0.0)
    stop_requested: bool = False
    detached: threading.Event = field(default_factory=threading.Event)
    """Set when the job answered ``run.detach``: it records its own end."""
    stop_reason: str = ""
    stop_grace_s: float = 0.0
    """Its kind's least stop timeout (``JobKind.stop_grace_s``)."""
    forced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    readers: list[threading.Thread] = field(default_factory=list)


NO_PROGRESS_BARS = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}
"""A job's output is its log, read line by line into the studio's: a
library's progress bar (tqdm: Hugging Face downloads, datasets' maps),
redrawn with carriage returns, showed there as raw bars. Jobs report their
progress as events."""


def terminate_tree(pid: int, grace_s: float = KILL_GRACE_S) -> None:
    """Terminate a process and all its descendants; kill what survives."""
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [*parent.children(recursive=True), parent]
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)


class Supervisor:
    def __init__(self, emit: Emit, examples: Path | None = None) -> None:
        self._emit = emit
        self._examples = examples
        self.project: Project | None = None
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, daemon=True)
        self._ticker.start()

    # ------------------------------------------------------------ project
    def open_project(self, path: str, create: bool, with_examples: bool) -> Project:
        with self._lock:
            if self._jobs:
                raise EngineError(
                    f"Stop the {len(self._jobs)} active run(s) before opening "
                    "another project."
                )
            examples = self._examples if with_examples else None
            project = Project.open(path, create=create, examples=examples)
            if self.project is not None:
                self.project.close()
            self.project = project
            reconcile_runs(project, self._jobs)
            return project

    def require_project(self) -> Project:
        if self.project is None:
            raise ProjectError("No project is open; open or create one first.")
        return self.project

    # --------------------------------------------------------------- runs
    def start_run(self, kind: str, config: dict[str, Any], name: str = "") -> str:
        project = self.require_project()
        field = registry.get_kind(kind).project_field
        if field and not config.get(field):
            config = {**config, field: str(project.path)}
        config = registry.validate_config(kind, config)
        name, config = registry.named_run(kind, config, name, project.run_names())
        # Under the lock: the tick's reconcile must not see the queued row
        # before its job is registered.
        with self._lock:
            record = project.create_run(kind, config, name)
            self._spawn(project, record.id, kind, resume=False)
        return record.id

    def resume_run(self, run_id: str) -> str:
        project = self.require_project()
        run = project.get_run(run_id)
        if run_id in self._jobs:
            raise EngineError(f"The run {run_id} is still running.")
        if not registry.get_kind(run.kind).resumable:
            raise EngineError(f"Runs of kind {run.kind!r} cannot be resumed.")
        if run.status == "completed":
            raise EngineError(
                f"The run {run_id} already completed; duplicate it instead."
            )
        (Path(run.run_dir) / contract.RESULT_FILE).unlink(missing_ok=True)
        self._spawn(project, run_id, run.kind, resume=True)
        return run_id

    def stop_run(
        self, run_id: str, timeout_s: float = 10.0, reason: str = "user"
    ) -> None:
        """Stop a run cooperatively (then by force after ``timeout_s``);
        ``reason`` (``engine.jobs.context.STOP_REASONS``) becomes its
        ``stopped_by``. A run of another process (a headless run, a job of
        another engine) gets SIGINT after the reason is written beside it."""
        with self._lock:
            job = self._jobs.get(run_id)
        if job is None:
            run = self.require_project().get_run(run_id)  # unknown id -> clear error
            if run.status == "running" and run.pid and process_owns_run(run):
                # A headless run in a terminal: stop it as Ctrl-C would (it
                # saves a checkpoint and records its end itself).
                if os.name != "posix":
                    raise EngineError(
                        f"The run {run_id} runs in another program (pid {run.pid}); "
                        "stop it there."
                    )
                # Say who asks, so the run records it truthfully.
                request = Path(run.run_dir) / STOP_REQUEST_FILE
                request.write_text(reason, encoding="utf-8")
                os.kill(run.pid, signal_module.SIGINT)
                return
            raise EngineError(f"The run {run_id} is not running.")
        if not job.stop_requested:
            job.stop_reason = reason
        job.stop_requested = True
        timeout_s = max(timeout_s, job.stop_grace_s)
        stop = protocol.StopRun(run_id=run_id, timeout_s=timeout_s, reason=reason)
        stop_line = protocol.encode(stop) + "\n"
        try:
            assert job.proc.stdin is not None
            job.proc.stdin.write(stop_line.encode())
            job.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # already exiting; the waiter reports it
        threading.Thread(
            target=self._enforce_stop, args=(job, timeout_s), daemon=True
        ).start()

    def active_runs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def detach(self, timeout_s: float = 10.0) -> None:
        """The studio died: let every run go on headless (``run.detach``) and
        close the project; a run that does not answer within
        :data:`DETACH_TIMEOUT_S` is stopped (``gui_gone``). A studio opened
        later shows the detached runs live, as it shows runs started by
        ``rl-studio-engine train``."""
        with self._lock:
            jobs = list(self._jobs.values())
        line = protocol.encode(protocol.DetachRun()) + "\n"
        for job in jobs:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                assert job.proc.stdin is not None
                job.proc.stdin.write(line.encode())
                job.proc.stdin.flush()
        deadline = time.monotonic() + DETACH_TIMEOUT_S
        for job in jobs:
            if job.detached.wait(max(0.0, deadline - time.monotonic())):
                with self._lock:  # its end is its own business now
                    self._jobs.pop(job.run_id, None)
        self.shutdown(timeout_s, "gui_gone")  # the runs that did not answer

    def shutdown(self, timeout_s: float = 10.0, reason: str = "user") -> None:
        """Stop every run (cooperatively, then by force) and close the project;
        ``reason`` as for :meth:`stop_run`."""
        for run_id in self.active_runs():
            with contextlib.suppress(EngineError):
                self.stop_run(run_id, timeout_s, reason)
        deadline = time.monotonic() + timeout_s + KILL_GRACE_S * 2 + 2
        while self.active_runs() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._closed.set()
        if self.project is not None:
            self.project.close()

    # ------------------------------------------------------------ process
    def _spawn(self, project: Project, run_id: str, kind: str, resume: bool) -> None:
        run_dir = project.run_dir(run_id)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            # The job imports the same engine as the supervisor.
            "PYTHONPATH": engine_pythonpath(),
            **NO_PROGRESS_BARS,
        }
        cmd = [sys.executable, "-m", "engine.jobs.runner", str(run_dir)]
        if resume:
            cmd.append("--resume")
        log_file = open(run_dir / contract.LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=run_dir,
                env=env,
                # Own session: a Ctrl-C in a terminal that started the studio
                # does not hit the jobs; they stop through the supervisor.
                start_new_session=True,
            )
        except OSError as exc:
            log_file.close()
            project.update_run(run_id, status="failed", reason=str(exc))
            raise EngineError(f"The job process could not start ({exc}).") from None
        job = _Job(
            run_id=run_id,
            run_dir=run_dir,
            proc=proc,
            log_file=log_file,
            stop_grace_s=registry.get_kind(kind).stop_grace_s,
        )
        with self._lock:
            self._jobs[run_id] = job
        lifecycle.mark_running(project, run_id, proc.pid)
        run = project.get_run(run_id)
        self._emit(
            protocol.RunStarted(
                run_id=run_id,
                kind=kind,
                name=run.name,
                pid=proc.pid,
                run_dir=str(run_dir),
            )
        )
        job.readers = [
            threading.Thread(target=self._read_events, args=(job,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(job,), daemon=True),
        ]
        for t in job.readers:
            t.start()
        threading.Thread(target=self._wait, args=(job, project), daemon=True).start()

    def _read_events(self, job: _Job) -> None:
        assert job.proc.stdout is not None
        for raw in job.proc.stdout:
            try:
                msg = protocol.decode(raw)
            except protocol.ProtocolError:
                self._add_log(job, raw.decode("utf-8", "replace").rstrip("\n"))
                continue
            if isinstance(msg, protocol.RunDetached):
                job.detached.set()
            elif isinstance(msg, protocol.RunFinished):
                job.finished = msg  # reported by the waiter, after the exit
            elif isinstance(msg, protocol.RunProgress):
                job.progress = (msg.done, msg.total)
                self._emit(msg)
            else:
                self._emit(msg)

    def _read_stderr(self, job: _Job) -> None:
        assert job.proc.stderr is not None
        for raw in job.proc.stderr:
            self._add_log(job, raw.decode("utf-8", "replace").rstrip("\n"))

    def _add_log(self, job: _Job, line: str) -> None:
        with job.lock:
            job.tail.append(line)
            job.pending_log.append(line)
            with contextlib.suppress(OSError, ValueError):
                job.log_file.write(contract.log_line(line) + "\n")

    def _flush_log(self, job: _Job) -> None:
        with job.lock:
            lines, job.pending_log = job.pending_log, []
            with contextlib.suppress(OSError, ValueError):
                job.log_file.flush()
        if lines:
            self._emit(protocol.RunLog(run_id=job.run_id, lines=lines))

    def _tick_loop(self) -> None:
        last_progress_save = 0.0
        last_outside_check = 0.0
        last_reconcile = time.monotonic()
        while not self._closed.wait(TICK_S):
            with self._lock:
                jobs = list(self._jobs.values())
            for job in jobs:
                self._flush_log(job)
            now = time.monotonic()
            if self.project is not None and now - last_outside_check > 1.0:
                last_outside_check = now
                # A headless run on this project (rl-studio-engine train/run)
                # writes the database from its own process; show it live.
                with contextlib.suppress(Exception):
                    if self.project.changed_elsewhere():
                        self._emit(protocol.ProjectChanged(what="runs"))
            if self.project is not None and now - last_reconcile > RECONCILE_S:
                last_reconcile = now
                # Runs of other processes (headless runs, jobs of an engine
                # that died) that ended without updating their row.
                with contextlib.suppress(Exception), self._lock:
                    if reconcile_runs(self.project, self._jobs):
                        self._emit(protocol.ProjectChanged(what="runs"))
            if self.project is not None and now - last_progress_save > 2.0:
                last_progress_save = now
                for job in jobs:
                    with contextlib.suppress(Exception):
                        self.project.update_run(
                            job.run_id,
                            progress_done=job.progress[0],
                            progress_total=job.progress[1],
                        )

    def _enforce_stop(self, job: _Job, timeout_s: float) -> None:
        try:
            job.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "run %s ignored stop for %.0f s; terminating", job.run_id, timeout_s
            )
            job.forced = True
            terminate_tree(job.proc.pid)

    def _wait(self, job: _Job, project: Project) -> None:
        code = job.proc.wait()
        for t in job.readers:
            t.join(timeout=5)
        self._flush_log(job)
        with contextlib.suppress(OSError):
            job.log_file.close()
        with contextlib.suppress(OSError):
            if job.proc.stdin:
                job.proc.stdin.close()
        final: protocol.Message | None = None
        try:
            if not job.detached.is_set():  # else the job recorded its end
                final = self._report_end(job, project, code)
        except UnknownRunError:
            pass  # project closed or replaced meanwhile
        finally:
            # Forget the job before telling anyone it ended, so that a resume
            # sent in reply to the final event is not refused as "running".
            with self._lock:
                self._jobs.pop(job.run_id, None)
        if final is not None:
            self._emit(final)
        self._emit(protocol.ProjectChanged(what="runs"))

    def _report_end(self, job: _Job, project: Project, code: int) -> protocol.Message:
        """Record how the run ended (the lifecycle's last step: its models
        registered, its final status); return the event that says so."""
        progress = job.progress
        if code == 0 and job.finished is not None:
            outcome = lifecycle.Outcome(job.finished.status, dict(job.finished.summary))
            summary = self._finish(project, job.run_id, outcome, progress=progress)
            return protocol.RunFinished(
                run_id=job.run_id, status=outcome.status, summary=summary or {}
            )
        if job.stop_requested and (job.forced or code != 0):
            # Killed before it reported its summary: the one its kind reads
            # from what the run saved (a resumed run's row still holds its
            # previous attempt's).
            forced, problems = lifecycle.finish_forced(
                project, job.run_id, job.stop_reason, progress=progress
            )
            for text in problems:
                self._emit(protocol.EngineLog(level="error", text=text))
            return protocol.RunFinished(
                run_id=job.run_id, status="stopped", summary=forced
            )
        exit_code = code if code >= 0 else None
        sig = -code if code < 0 else None
        # A job that failed after making models (a flow whose last node
        # failed) recorded them in its result.json with the sentence saying
        # why; they are registered. One that recorded no summary (a crash, a
        # kill) leaves the row's: a resumed run keeps its previous attempt's,
        # registered_models too, and the reason is read from its log's end.
        recorded = lifecycle.read_outcome(job.run_dir)
        summary = recorded.summary if recorded is not None else None
        if recorded is not None and summary is not None and recorded.reason:
            reason = recorded.reason  # not its traceback's "FlowFailed: ..."
        else:
            reason = _failure_reason(code, list(job.tail))
        outcome = lifecycle.Outcome("failed", summary, reason)
        self._finish(
            project, job.run_id, outcome, progress=progress, code=exit_code, sig=sig
        )
        return protocol.RunFailed(
            run_id=job.run_id,
            reason=reason,
            exit_code=exit_code,
            signal=sig,
            last_log_lines=list(job.tail)[-20:],
        )

    def _finish(
        self,
        project: Project,
        run_id: str,
        outcome: lifecycle.Outcome,
        *,
        progress: tuple[float, float],
        code: int | None = 0,
        sig: int | None = None,
    ) -> dict[str, Any] | None:
        summary, problems = lifecycle.finish(
            project,
            run_id,
            outcome,
            exit_code=code,
            signal_number=sig,
            progress=progress,
        )
        for text in problems:
            self._emit(protocol.EngineLog(level="error", text=text))
        return summary


def _failure_reason(code: int, tail: list[str]) -> str:
    if code < 0:
        try:
            name = signal_module.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        reason = f"The run's process was killed by {name} (signal {-code})."
        if -code == signal_module.SIGKILL:
            # Linux's out-of-memory killer sends SIGKILL and leaves no trace
            # in the job's own log; this is the likeliest cause to suggest.
            reason += (
                " If nobody killed it, the machine probably ran out of memory:"
                " try fewer parallel envs, a smaller batch or a smaller model."
            )
        return reason
    # A Python traceback ends with "ExceptionType: message"; that is the reason.
    for line in reversed(tail):
        stripped = line.strip()
        if (
            stripped
            and not stripped.startswith(("File ", "^", "~"))
            and ":" in stripped
        ):
            return f"The run failed: {stripped}"
    return f"The run's process exited with code {code}."
