"""The session: the one place where engine messages meet the studio's models.

It turns engine events into model updates (``ProjectState``) and user
intents (open a project, start or stop a run) into engine requests. Panels
call the session's methods and observe the models; they never build
protocol messages themselves.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import QObject, Signal

from engine import contract
from studio.engine_client import READY, EngineClient
from studio.lifetime import is_alive, owner_of
from studio.settings import Settings
from studio.state.job_kinds import JOB_KINDS
from studio.state.metric_store import MetricStore
from studio.state.project_state import ProjectState

if TYPE_CHECKING:
    from engine import protocol

EVAL_REWARD = "eval/mean_reward"


class Session(QObject):
    project_opened = Signal(str)
    """The project at this path is open and loaded into ``state``."""
    project_failed = Signal(str)
    """Opening a project failed; the argument is one readable sentence."""
    run_metrics_received = Signal(str, list)
    run_log_received = Signal(str, list)
    run_ended = Signal(str, str, str)
    """run id, final status, reason (empty when it completed)."""
    message_posted = Signal(str, str, str)
    """level, source, text — for the log console."""
    hardware_changed = Signal(dict)
    gpu_usage_changed = Signal(list)
    """Live GPU load: one dict per GPU (``engine.hardware.GpuUsage``)."""
    request_failed = Signal(str)
    """A request the user made failed; one sentence for a message box."""

    def __init__(
        self,
        client: EngineClient,
        state: ProjectState,
        settings: Settings,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.client = client
        self.state = state
        self.settings = settings
        self.hardware: dict[str, Any] = {}
        self.gpu_usage: list[dict[str, Any]] = []
        self._gpu_usage_pending = False
        self.metrics = MetricStore()
        # Runs whose metrics.jsonl has been read into the store (or that
        # started fresh in this session): only those take live rows, each
        # newer than the last time already held, so nothing is doubled.
        self._metrics_last_time: dict[str, float] = {}
        # Runs this session's engine reports live (started here or streaming
        # metrics); the others (a headless ``rl-studio-engine train`` on the
        # same project) are followed through their metrics file instead.
        self._live_runs: set[str] = set()
        self._file_offsets: dict[str, int] = {}
        self._wanted_project: tuple[str, bool] | None = None
        client.state_changed.connect(self._on_client_state_changed)
        client.event_received.connect(self._on_client_event_received)
        client.stderr_received.connect(self._on_client_stderr_received)

    # ---------------------------------------------------------- project
    def open_project(self, path: str, create: bool = False) -> None:
        """Open (or create) a project; ``project_opened`` or ``project_failed``
        follows. Re-sent automatically after an engine restart."""
        from engine import protocol

        self._wanted_project = (path, create)
        self.client.request(
            protocol.OpenProject(path=path, create=create),
            on_reply=self._on_project_snapshot,
            on_error=self._on_project_error,
        )

    def refresh_project(self) -> None:
        from engine import protocol

        if self.state.is_open:
            self.client.request(
                protocol.GetProjectSnapshot(), on_reply=self._on_snapshot_reply
            )

    def _on_snapshot_reply(self, reply: dict[str, Any]) -> None:
        self.state.load_snapshot(_snapshot(reply))

    def _on_project_snapshot(self, reply: dict[str, Any]) -> None:
        snap = _snapshot(reply)
        if snap.get("path") != self.state.path:
            self.metrics.clear()
            self._metrics_last_time.clear()
            self._file_offsets.clear()
        self.state.load_snapshot(snap)
        self.settings.last_project = self.state.path
        self.settings.add_recent_project(self.state.path)
        # After a restart the project must be re-opened as it exists now,
        # never re-created.
        self._wanted_project = (self.state.path, False)
        self.project_opened.emit(self.state.path)

    def _on_project_error(self, error: protocol.Error) -> None:
        if error.error_type == "EngineGone":
            return  # re-sent when the engine is back
        self._wanted_project = (self.state.path, False) if self.state.is_open else None
        self.message_posted.emit("error", "project", error.message)
        self.project_failed.emit(error.message)

    # ------------------------------------------------------------- runs
    def start_run(
        self,
        kind: str,
        config: dict[str, Any],
        name: str = "",
        on_started: Callable[[str], None] | None = None,
        on_error: Callable[[protocol.Error], None] | None = None,
    ) -> None:
        """Start a run; a refused config goes to ``on_error`` when given
        (a dialog shows it on the field), else to the log and ``request_failed``.
        The callbacks are dropped if the object they belong to is deleted
        before the answer comes."""
        from engine import protocol

        self.client.request(
            protocol.StartRun(kind=kind, config=config, name=name),
            on_reply=lambda r: on_started(r["run_id"]) if on_started else None,
            on_error=on_error or self._on_request_error,
            owner=owner_of(on_started, on_error),
        )

    def request_run_schema(
        self,
        kind: str,
        values: dict[str, Any],
        on_fields: Callable[[list[dict[str, Any]]], None],
        on_error: Callable[[protocol.Error], None] | None = None,
    ) -> None:
        from engine import protocol

        self.client.request(
            protocol.GetRunSchema(kind=kind, values=values),
            on_reply=lambda r: on_fields(list(r.get("fields", []))),
            on_error=on_error or self._on_request_error,
            owner=owner_of(on_fields, on_error),
        )

    def request_data_preview(
        self,
        values: dict[str, Any],
        on_preview: Callable[[dict[str, Any]], None],
        on_error: Callable[[protocol.Error], None] | None = None,
        rows: int = 20,
    ) -> None:
        """The first ``rows`` rows of a dataset import (``llm.import``
        values), mapped, with the detected format and their problems."""
        from engine import protocol

        self.client.request(
            protocol.PreviewData(values=values, rows=rows),
            on_reply=lambda r: on_preview(dict(r)),
            on_error=on_error or self._on_request_error,
            owner=owner_of(on_preview, on_error),
        )

    # ---------------------------------------------------------- metrics
    def ensure_metrics_loaded(self, run_id: str) -> None:
        """Read a run's ``metrics.jsonl`` into the store once; afterwards,
        for a run that no engine event feeds (a headless run writing the same
        project), read the rows its file gained since."""
        run = self.state.run(run_id)
        path = (
            Path(run["run_dir"]) / contract.METRICS_FILE
            if run and run.get("run_dir")
            else None
        )
        if run_id in self._metrics_last_time:
            if path is not None and run_id not in self._live_runs:
                self._follow_metrics_file(run_id, path)
            return
        if path is not None:
            size = path.stat().st_size if path.exists() else 0
            self.metrics.load_jsonl(run_id, path, replace=True)
            self._file_offsets[run_id] = _line_start_before(path, size)
        self._metrics_last_time[run_id] = self._last_time(run_id)
        self._note_best_eval(run_id)

    def _follow_metrics_file(self, run_id: str, path: Path) -> None:
        offset = self._file_offsets.get(run_id, 0)
        try:
            if path.stat().st_size <= offset:
                return
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a torn last line waits for its end
        self._file_offsets[run_id] = offset + end
        rows = []
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict):
                    rows.append(row)
        self._append_fresh(run_id, rows)

    def _last_time(self, run_id: str) -> float:
        times = [
            last[1]
            for key in self.metrics.keys(run_id)
            if (last := self.metrics.last(run_id, key))
        ]
        return max(times, default=-math.inf)

    def read_run_log(
        self, run_id: str, max_lines: int = 500
    ) -> list[tuple[float | None, str]]:
        """The last lines of a run's log as ``(time written, text)``."""
        run = self.state.run(run_id)
        if not run or not run.get("run_dir"):
            return []
        return contract.read_log(Path(run["run_dir"]) / contract.LOG_FILE, max_lines)

    def _on_run_metrics(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        self._live_runs.add(run_id)
        self._append_fresh(run_id, rows)

    def _append_fresh(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Append the rows newer than the last time already held."""
        last = self._metrics_last_time.get(run_id)
        if last is None:
            return  # not shown yet; read from disk when it is
        fresh = [r for r in rows if float(r.get("time", math.inf)) > last]
        if fresh:
            self.metrics.append_rows(run_id, fresh)
            self._metrics_last_time[run_id] = float(fresh[-1].get("time", last))
            if any(EVAL_REWARD in r for r in fresh):
                self._note_best_eval(run_id)

    def _note_best_eval(self, run_id: str) -> None:
        """Tell the run list the best evaluation so far (Best column)."""
        values = self.metrics.series(run_id, EVAL_REWARD)[2]
        if len(values):
            self.state.on_run_eval(run_id, float(values.max()))

    def stop_run(self, run_id: str) -> None:
        from engine import protocol

        self.client.request(
            protocol.StopRun(run_id=run_id, timeout_s=self.settings.stop_timeout_s),
            on_error=self._on_request_error,
        )

    def resume_run(self, run_id: str) -> None:
        from engine import protocol

        self.client.request(
            protocol.ResumeRun(run_id=run_id), on_error=self._on_request_error
        )

    def annotate_run(
        self,
        run_id: str,
        tags: list[str],
        note: str,
        on_saved: Callable[[], None] | None = None,
        on_error: Callable[[protocol.Error], None] | None = None,
    ) -> None:
        """Set a run's tags and note (``protocol.clean_tags`` of ``tags``);
        the run's record in ``state`` follows the engine's reply. Tags or a
        note out of bounds go to ``on_error`` at once, unsent, as the
        engine would refuse them; the other refusals (an unknown run) when
        the engine answers. Without ``on_error``, to the log and
        ``request_failed``."""
        from engine import protocol

        report = on_error or self._on_request_error
        cleaned = protocol.clean_tags(tags)
        problem = protocol.annotation_problem(cleaned, note)
        if problem is not None:
            field, sentence = problem
            report(
                protocol.Error(error_type="ConfigError", message=sentence, field=field)
            )
            return

        caller = owner_of(on_saved, on_error)

        def saved(result: dict[str, Any]) -> None:
            # The state follows even when the asking editor is gone.
            self.state.on_run_annotated(
                str(result.get("run_id", run_id)),
                list(result.get("tags", cleaned)),
                str(result.get("note", note)),
            )
            if on_saved is not None and is_alive(caller):
                on_saved()

        def refused(error: protocol.Error) -> None:
            if is_alive(caller):
                report(error)

        self.client.request(
            protocol.AnnotateRun(run_id=run_id, tags=cleaned, note=note),
            on_reply=saved,
            on_error=refused,
            owner=self,
        )

    def detect_hardware(self) -> None:
        from engine import protocol

        self.client.request(protocol.DetectHardware(), on_reply=self._on_hardware_reply)

    def _on_hardware_reply(self, info: dict[str, Any]) -> None:
        self.hardware = info
        self.hardware_changed.emit(info)

    def has_nvidia_gpu(self) -> bool:
        return any(g.get("backend") == "cuda" for g in self.hardware.get("gpus", []))

    def request_gpu_usage(self) -> None:
        """Ask the engine for live GPU load (``gpu_usage_changed`` follows);
        a request still in flight is not doubled."""
        from engine import protocol

        if self._gpu_usage_pending or self.client.state != READY:
            return
        self._gpu_usage_pending = True
        self.client.request(
            protocol.GetHardwareUsage(),
            on_reply=self._on_gpu_usage_reply,
            on_error=self._on_gpu_usage_error,
        )

    def _on_gpu_usage_reply(self, result: dict[str, Any]) -> None:
        self._gpu_usage_pending = False
        self.gpu_usage = [g for g in result.get("gpus", []) if isinstance(g, dict)]
        self.gpu_usage_changed.emit(self.gpu_usage)

    def _on_gpu_usage_error(self, error: protocol.Error) -> None:
        # A meter reading is not worth a message box; the next tick retries.
        self._gpu_usage_pending = False

    def _on_request_error(self, error: protocol.Error) -> None:
        self.message_posted.emit("error", "engine", error.message)
        self.request_failed.emit(error.message)

    # ----------------------------------------------------------- engine
    def _on_client_state_changed(self, state: str) -> None:
        if state == READY:
            # The engine's own declaration of its kinds (labels, groups).
            JOB_KINDS.update(self.client.engine_info.get("job_kinds", {}))
            if self._wanted_project is not None and not self._project_request_pending():
                path, create = self._wanted_project
                self.open_project(path, create)
            if not self.hardware:
                self.detect_hardware()

    def _project_request_pending(self) -> bool:
        # A request made before the handshake is still queued in the client.
        from engine import protocol

        return any(
            isinstance(p.msg, protocol.OpenProject)
            for p in self.client._pending.values()
        )

    def _on_client_stderr_received(self, line: str) -> None:
        level = "error" if "Traceback" in line or "ERROR" in line else "info"
        self.message_posted.emit(level, "engine", line)

    def _on_client_event_received(self, msg: protocol.Message) -> None:
        from engine import protocol

        match msg:
            case protocol.RunMetrics(run_id=run_id, rows=rows):
                self._on_run_metrics(run_id, rows)
                self.run_metrics_received.emit(run_id, rows)
            case protocol.RunProgress():
                self.state.on_run_progress(
                    msg.run_id, msg.done, msg.total, msg.rate, msg.eta_s, msg.message
                )
            case protocol.RunLog(run_id=run_id, lines=lines):
                self.run_log_received.emit(run_id, lines)
            case protocol.RunStarted():
                self._live_runs.add(msg.run_id)
                new_run = self.state.run(msg.run_id) is None
                if new_run:
                    # A new run: every row it sends is live, none on disk yet.
                    self.metrics.remove_run(msg.run_id)
                    self._metrics_last_time[msg.run_id] = -math.inf
                self.state.on_run_started(msg.run_id, msg.kind, msg.name, msg.run_dir)
                if new_run:
                    # The event carries no config; the project's row does
                    # (Details and Duplicate need it while the run trains).
                    self.refresh_project()
                self.message_posted.emit(
                    "info", "run", f"{msg.name} started (pid {msg.pid})"
                )
            case protocol.RunFinished():
                self.state.on_run_ended(msg.run_id, msg.status, summary=msg.summary)
                self.message_posted.emit(
                    "info", "run", f"run {msg.run_id} {msg.status}"
                )
                self.run_ended.emit(msg.run_id, msg.status, "")
            case protocol.RunFailed():
                self.state.on_run_ended(msg.run_id, "failed", reason=msg.reason)
                self.message_posted.emit(
                    "error", "run", f"run {msg.run_id}: {msg.reason}"
                )
                self.run_ended.emit(msg.run_id, "failed", msg.reason)
            case protocol.ProjectChanged():
                self.refresh_project()
            case protocol.EngineLog(level=level, text=text):
                self.message_posted.emit(level, "engine", text)
            case protocol.Error():
                self.message_posted.emit("error", "engine", msg.message)
            case _:
                pass  # an event this studio has no use for


def _line_start_before(path: Path, size: int) -> int:
    """The offset just past the last newline in the first ``size`` bytes of
    ``path``: where the next complete line a writer adds begins."""
    if size <= 0:
        return 0
    chunk = min(size, 1 << 16)
    try:
        with open(path, "rb") as fh:
            fh.seek(size - chunk)
            data = fh.read(chunk)
    except OSError:
        return 0
    cut = data.rfind(b"\n")
    # No newline in the last 64 KiB: a line that long does not occur here;
    # start from the beginning and let the time filter drop what is held.
    return size - chunk + cut + 1 if cut >= 0 else 0


def _snapshot(reply: dict[str, Any]) -> contract.ProjectSnapshot:
    """The reply to ``open_project`` / ``get_project_snapshot``: the engine
    answers both with ``Project.snapshot()``, a ``ProjectSnapshot``."""
    return cast(contract.ProjectSnapshot, reply)
