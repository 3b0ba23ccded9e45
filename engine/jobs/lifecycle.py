"""The life of a run, the same wherever it runs.

A run started in the studio (the supervisor spawns ``engine.jobs.runner``),
by ``rl-studio-engine train --project`` or by ``rl-studio-engine run`` goes
through the same steps, declared here once:

1. :func:`mark_running` — the row says ``running`` with the owning pid;
2. :func:`execute` — the job function runs; how it ended (an
   :class:`Outcome`) is written to the run's ``result.json`` at once, so a
   run whose recorder vanished is still reconciled;
3. :func:`finish` — the models its summary lists are registered (also when
   it failed or stopped: a flow failing at its last node keeps what its
   earlier nodes made), and the row gets its final status. A run stopped by
   force, killed before it said how it ended, is finished by
   :func:`finish_forced` with the summary its kind reads from what the run
   saved (``JobKind.summary_on_disk``).

The supervisor does steps 1 and 3 around the job process, which does step 2;
the headless commands do all three in their own process
(:func:`run_in_process`).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from engine import alerts, contract
from engine.errors import EngineError
from engine.jobs.context import JobContext
from engine.store.atomic import atomic_write_json
from engine.store.metrics import iter_metrics

if TYPE_CHECKING:
    from engine.store.project import Project, RunRecord

FORCED_REASON = "Stopped by force: the run did not stop in time."
"""The reason of a run whose stop the supervisor forced."""
ABORTED_REASON = "Aborted with a second Ctrl-C."
"""The reason of a headless run aborted by force (``interrupted``)."""
PROGRESS_SAVE_INTERVAL_S = 2.0
"""How often a headless run writes its progress to the project's run list."""

Entry = Callable[[JobContext], "Mapping[str, Any] | None"]


class RunFailed(EngineError):
    """A job that failed after producing something worth keeping: its
    ``summary`` (a flow whose last node failed lists the models its earlier
    nodes made) is recorded and its models registered."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class Outcome:
    """How a run ended."""

    status: str
    """``completed``, ``stopped``, ``failed`` or ``interrupted``."""
    summary: dict[str, Any] | None = field(default_factory=dict)
    """The job's summary; None when it left none (the row keeps the one it
    had: a resumed run that then failed; see :func:`finish_forced` for a
    run stopped by force)."""
    reason: str = ""
    """One sentence when it did not complete."""
    error: BaseException | None = None
    """The exception that ended it, for a caller that re-raises it."""

    def result(self) -> dict[str, Any]:
        """The ``result.json`` record."""
        out: dict[str, Any] = {"status": self.status}
        if self.summary is not None:
            out["summary"] = self.summary
        if self.reason:
            out["reason"] = self.reason
        return out


def mark_running(project: Project, run_id: str, pid: int) -> None:
    """Step 1: the row is ``running`` in process ``pid`` (a studio open on the
    project leaves a live owner's row alone, and Stop signals it)."""
    project.update_run(
        run_id,
        status="running",
        started=time.time(),
        pid=pid,
        ended=None,
        exit_code=None,
        signal=None,
        reason="",
    )


def resume_time_offset(run_dir: Path) -> float:
    """Wall time a resumed run had trained (its last metrics row), so that
    curves against time continue instead of starting over."""
    times = [
        float(t)
        for row in iter_metrics(run_dir / contract.METRICS_FILE)
        if isinstance(t := row.get("time"), int | float)
    ]
    return max(times, default=0.0)


def execute(
    ctx: JobContext, entry: Entry, *, trace: Callable[[str], None] | None = None
) -> Outcome:
    """Step 2: run ``entry`` in ``ctx``, close the context and write
    ``result.json``. Never raises: the exception that ended the run is the
    outcome's ``error``, its traceback goes to ``trace`` (default: the run's
    log)."""
    from engine.jobs import tracking, wandb_tracking

    try:
        ctx.tracker = tracking.combined(
            [tracking.start(ctx), wandb_tracking.start(ctx)]
        )
        summary = dict(entry(ctx) or {})
    except KeyboardInterrupt as exc:
        # Ended by force: it has no summary to give (run_in_process records
        # the one its kind reads from what it saved, see finish_forced).
        outcome = Outcome("interrupted", None, ABORTED_REASON, error=exc)
    except Exception as exc:
        if trace is None and isinstance(ctx, HeadlessContext):
            # A headless command shows the error's sentence; its traceback
            # is for the run's log (and the terminal with --debug).
            expected = isinstance(exc, EngineError)
            quiet = expected and not os.environ.get(contract.DEBUG_ENV)
            trace = ctx.log_to_file if quiet else ctx.log
        (trace or ctx.log)(traceback.format_exc().rstrip())
        if isinstance(exc, RunFailed):
            outcome = Outcome("failed", dict(exc.summary), str(exc), error=exc)
        else:
            # The engine's own errors are sentences already; anything else
            # (a bug, a library's error) is named by its type.
            reason = (
                str(exc)
                if isinstance(exc, EngineError)
                else (f"{type(exc).__name__}: {exc}")
            )
            outcome = Outcome("failed", None, reason, error=exc)
    else:
        status = _status(ctx, summary)
        # A job that stopped itself (a sweep's pruned trial) says why.
        reason = str(summary.get("reason", "")) if status == "stopped" else ""
        outcome = Outcome(status, summary, reason)
    ctx.stop_flushing()
    atomic_write_json(ctx.run_dir / contract.RESULT_FILE, outcome.result())
    if ctx.tracker is not None:
        # After the last metrics, with result.json written and the run's log
        # still open for what the tracker has to say.
        ctx.tracker.finish(outcome.status, outcome.summary)
        ctx.tracker = None
    ctx.close()
    return outcome


def _status(ctx: JobContext, summary: dict[str, Any]) -> str:
    """``stopped`` or ``completed``. A job that says how it ended is
    believed (a flow: stopped when a node was; training: ``stopped_by`` is
    ``steps`` or ``target`` when it reached its end before the stop request
    came); otherwise a stop request made it stopped. A stopped run's summary
    says who stopped it in ``stopped_by``."""
    from engine.jobs.context import STOP_REASONS

    status = summary.get("status")
    if status not in ("completed", "stopped"):
        stopped_by = summary.get("stopped_by")
        ended_itself = stopped_by is not None and stopped_by not in STOP_REASONS
        status = "stopped" if ctx.should_stop and not ended_itself else "completed"
    if status == "stopped":
        summary.setdefault("stopped_by", ctx.stop_reason or "user")
    return str(status)


def read_outcome(run_dir: Path) -> Outcome | None:
    """The outcome a job process recorded, if it recorded one; its summary
    is None when it recorded none (a job that failed: the row keeps the
    summary it had)."""
    data = contract.read_json_object(run_dir / contract.RESULT_FILE)
    if not data or data.get("status") not in contract.FINAL_STATUSES:
        return None
    summary = data.get("summary")
    return Outcome(
        str(data["status"]),
        dict(summary) if isinstance(summary, dict) else None,
        str(data.get("reason", "")),
    )


DERIVED_FACTS = ("env", "algo", "base")
"""What a model made from another (an ONNX export of a policy, a GGUF of a
merged model) is of, as its parent is, when its job does not say."""


def _derived_facts(project: Project, entries: object) -> Any:
    """``entries`` (a summary's ``models``) with each one's missing
    :data:`DERIVED_FACTS` taken from its first parent the project has (by
    id or file), so that an export's row names its env and algorithm."""
    if not isinstance(entries, list) or not any(
        isinstance(e, dict) and e.get("parents") for e in entries
    ):
        return entries
    known: dict[str, Any] = {}
    for model in project.list_models():
        known[model.id] = known[str(Path(model.path).resolve())] = model
    filled = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("parents"), list):
            parents = [str(p) for p in entry["parents"]]
            found = [known.get(p) or known.get(str(Path(p).resolve())) for p in parents]
            parent = next((m for m in found if m is not None), None)
            if parent is not None:
                missing = [f for f in DERIVED_FACTS if not entry.get(f)]
                entry = {**entry, **{f: getattr(parent, f) for f in missing}}
        filled.append(entry)
    return filled


def finish(
    project: Project,
    run_id: str,
    outcome: Outcome,
    *,
    exit_code: int | None = 0,
    signal_number: int | None = None,
    progress: tuple[float, float] | None = None,
    register: bool = True,
) -> tuple[dict[str, Any] | None, list[str]]:
    """Step 3: register the models ``outcome``'s summary lists (whatever the
    status: a stopped run's best model so far, a failed flow's finished
    nodes' models; not with ``register`` False), rewrite ``result.json``
    with their ids and give the row its final status. Ids the summary
    already lists in ``registered_models`` stay after the new ones. Returns
    the summary as recorded and one sentence per model that could not be
    registered."""
    summary = None if outcome.summary is None else dict(outcome.summary)
    problems: list[str] = []
    if summary is not None and register:
        if "models" in summary:
            summary["models"] = _derived_facts(project, summary["models"])
        registered, problems = project.register_run_models(run_id, summary)
        if registered:
            earlier = summary.get("registered_models") or []
            kept = [i for i in earlier if i not in registered]
            summary["registered_models"] = [*registered, *kept]
    recorded = Outcome(outcome.status, summary, outcome.reason)
    atomic_write_json(project.run_dir(run_id) / contract.RESULT_FILE, recorded.result())
    fields: dict[str, Any] = {
        "status": outcome.status,
        "ended": time.time(),
        "exit_code": exit_code,
        "signal": signal_number,
        "reason": outcome.reason,
    }
    if summary is not None:
        fields["summary"] = summary
    if progress is not None:
        fields["progress_done"], fields["progress_total"] = progress
    project.update_run(run_id, **fields)
    _alert_end(project, run_id, outcome)
    return summary, problems


def _alert_end(project: Project, run_id: str, outcome: Outcome) -> None:
    """Tell the webhooks how the run ended (in the background: a webhook
    never delays a run's end, and a failure to tell is only logged)."""
    try:
        urls = alerts.webhook_urls(project.setting(alerts.SETTING_KEY))
        if not urls or outcome.status not in alerts.RUN_EVENTS:
            return
        run = project.get_run(run_id)
        alert = alerts.run_ended(
            run_id, run.name, run.kind, outcome.status, outcome.reason
        )
        if alert is not None:
            alerts.SENDER.post(urls, alert)
    except Exception:  # the run's end is recorded whatever the alert does
        alerts.log.exception("The alert for run %s was not sent.", run_id)


def read_checkpoint_state(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON state file, which names at least the ``step`` it
    was saved at; raises :class:`EngineError` in one sentence when it cannot
    be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EngineError(
            f"The checkpoint state {path} cannot be read ({exc.strerror or exc})."
        ) from None
    except ValueError as exc:  # also a UnicodeDecodeError
        raise EngineError(
            f"The checkpoint state {path} is not valid JSON ({exc})."
        ) from None
    step = data.get("step") if isinstance(data, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise EngineError(
            f"The checkpoint state {path} does not say at which step it was saved."
        )
    return dict(data)


def finish_forced(
    project: Project,
    run_id: str,
    stopped_by: str,
    *,
    progress: tuple[float, float] | None = None,
    status: str = "stopped",
    reason: str = FORCED_REASON,
) -> tuple[dict[str, Any], list[str]]:
    """Step 3 for a run stopped by force (killed by the supervisor after its
    stop timed out; a headless run aborted by a second Ctrl-C, ``status``
    ``interrupted``): :func:`finish_from_disk`, its summary saying
    ``forced`` and ``stopped_by``."""
    marks = {"forced": True, "stopped_by": stopped_by}
    return finish_from_disk(
        project,
        run_id,
        marks,
        "was stopped by force",
        status=status,
        reason=reason,
        progress=progress,
    )


def finish_from_disk(
    project: Project,
    run_id: str,
    marks: dict[str, Any],
    ended: str,
    *,
    status: str,
    reason: str,
    progress: tuple[float, float] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Step 3 for a run that ended before it said how (stopped by force, its
    process gone): its row would keep the summary of its previous attempt (a
    resumed run's). A kind that declares ``summary_on_disk`` gets the
    summary that reader gives from the run's folder (its last checkpoint's
    steps, its best evaluation, its models, registered again under their
    ids), with the ids of ``registered_models`` that are still in the
    project; when the run saved nothing yet, or its newest checkpoint cannot
    be read, the row keeps its summary and nothing is registered. Either way
    the summary gets ``marks``. Other kinds keep the row's summary as it was.
    ``ended`` says how the run ended, in the problems' sentences.

    Returns the summary for the ``run.finished`` event and one sentence per
    problem (a checkpoint that cannot be read, a model not registered)."""
    from engine.jobs import registry

    run = project.get_run(run_id)
    kind = registry.get_kind(run.kind)
    reader = kind.summary_on_disk
    problems: list[str] = []
    on_disk: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None  # no reader: the row keeps its own
    if reader is not None:
        try:
            on_disk = reader(Path(run.run_dir), kind.load(run.config))
        except Exception as exc:  # the run's end is recorded whatever it does
            detail = (
                str(exc)
                if isinstance(exc, EngineError)
                else (f"{type(exc).__name__}: {exc}")
            )
            problems.append(
                f"Run {run_id} {ended} and keeps the summary it had: {detail}"
            )
        if on_disk is None:
            summary = {**run.summary, **marks}
        else:
            known = {m.id for m in project.list_models()}
            registered = run.summary.get("registered_models") or []
            earlier = [i for i in registered if i in known]
            summary = {**on_disk, **marks}
            if earlier:
                summary["registered_models"] = earlier
    recorded, more = finish(
        project,
        run_id,
        Outcome(status, summary, reason),
        exit_code=None,
        progress=progress,
        register=on_disk is not None,
    )
    return recorded or summary or marks, [*problems, *more]


def finish_own(
    project: Project,
    run_id: str,
    outcome: Outcome,
    stop_reason: str,
    *,
    exit_code: int | None = 0,
    progress: tuple[float, float] | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """Step 3 taken by the run's own process (a headless command, a
    detached job): :func:`finish`, or :func:`finish_forced` for a run
    aborted by a second Ctrl-C (``stop_reason``, else ``signal``, as its
    ``stopped_by``), as the supervisor finishes a job it had to kill."""
    if isinstance(outcome.error, KeyboardInterrupt):
        return finish_forced(
            project,
            run_id,
            stop_reason or "signal",
            progress=progress,
            status=outcome.status,
            reason=outcome.reason,
        )
    return finish(project, run_id, outcome, exit_code=exit_code, progress=progress)


TRACEBACK_HEAD = "Traceback (most recent call last):"


class HeadlessContext(JobContext):
    """The context of a run in a headless command's own process: its log
    lines go to the terminal (:meth:`say`) and to the run's ``log.txt``, and
    its progress to the project's run list, as the supervisor keeps them for
    a studio run (a studio open on the project shows both live)."""

    def __init__(
        self, *args: Any, project: Project | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._project = project
        self._saved_at = 0.0
        self._log_file = open(  # noqa: SIM115 - closed in close()
            self.run_dir / contract.LOG_FILE, "a", encoding="utf-8"
        )

    @classmethod
    def of_run(cls, project: Project, record: RunRecord, **kwargs: Any) -> Self:
        """The context of ``project``'s run ``record``: its id, folder, kind
        and recorded config, no event stream (``kwargs``: the rest)."""
        return cls(
            record.id,
            Path(record.run_dir),
            record.kind,
            record.config,
            events=None,
            project=project,
            **kwargs,
        )

    def say(self, text: str) -> None:
        """Show a line on the terminal (stderr)."""
        super().log(text)

    def log(self, text: str) -> None:
        if text.startswith(TRACEBACK_HEAD) and not os.environ.get(contract.DEBUG_ENV):
            # An expected failure is its sentence on the terminal; the
            # traceback is for the log (and the terminal with --debug).
            self.say(f"(the traceback is in {self.run_dir / contract.LOG_FILE})")
        else:
            self.say(text)
        self.log_to_file(text)

    def log_to_file(self, text: str) -> None:
        """Append to the run's ``log.txt`` only (not the terminal)."""
        if not self._log_file.closed:
            self._log_file.write(contract.log_line(text.rstrip("\n")) + "\n")
            self._log_file.flush()

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        now = time.monotonic()
        if self._project is not None and (
            now - self._saved_at >= PROGRESS_SAVE_INTERVAL_S or done >= total
        ):
            self._saved_at = now
            self._project.update_run(
                self.run_id, progress_done=float(done), progress_total=float(total)
            )

    def close(self) -> None:
        super().close()
        self._log_file.close()


def run_in_process(
    project: Project,
    run_id: str,
    ctx: HeadlessContext,
    entry: Entry,
    *,
    trace: Callable[[str], None] | None = None,
    progress: Callable[[Outcome], tuple[float, float] | None] = lambda _o: None,
) -> Outcome:
    """All three steps in this process, for the headless commands: Ctrl-C
    (or a studio stopping the run, or SIGTERM) asks the job to stop, telling
    the user through ``ctx.say``; a second signal aborts it. ``trace``
    takes a failure's traceback (default: the log), ``progress`` gives the
    final progress of the row. The outcome's summary is the recorded one
    (with ``registered_models``)."""
    from engine.jobs.context import stop_on_signals

    mark_running(project, run_id, os.getpid())
    restore_signals = stop_on_signals(ctx, ctx.say)
    try:
        outcome = execute(ctx, entry, trace=trace)
    finally:
        restore_signals()
    summary, problems = finish_own(
        project, run_id, outcome, ctx.stop_reason, progress=progress(outcome)
    )
    for problem in problems:
        ctx.say(problem)
    outcome.summary = summary
    return outcome
