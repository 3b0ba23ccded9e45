"""Entry point of a job process: ``python -m engine.jobs.runner RUN_DIR``.

Reads ``RUN_DIR/config.json`` (written by the supervisor), runs the job
function of its kind through :func:`engine.jobs.lifecycle.execute` (the
supervisor does the lifecycle's other steps around this process), and
reports through the protocol on the private event stream. Stop requests
arrive as ``run.stop`` lines on stdin (their ``reason`` says who asked); end
of stdin (the supervisor vanished) is a stop too, so an orphaned job saves
its checkpoint and exits instead of training forever; so are SIGINT and
SIGTERM (another engine stopping the run, a terminal, a service manager). A
stopped run's summary says why in ``stopped_by``. A ``run.detach`` line (the
studio died) makes the job go on headless: it logs to ``log.txt``, keeps its
progress in the project and records its own end (the lifecycle's last step),
as ``rl-studio-engine train --project`` does.

A job runs :data:`JOB_NICENESS` nicer than the process that started it, and
so does its session (:mod:`engine.jobs.priority`: Linux shares the CPU
between sessions first).
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from engine import protocol
from engine.jobs.context import (
    JobContext,
    private_event_stream,
    read_run_config,
    stop_on_signals,
)
from engine.jobs.lifecycle import Outcome, execute, finish_own, resume_time_offset
from engine.jobs.memory import keep_freed_memory
from engine.jobs.priority import lower_priority
from engine.jobs.registry import get_kind

PROGRESS_SAVE_S = 2.0
"""How often a detached job saves its progress in the project."""
JOB_NICENESS = 19
"""Jobs yield the CPU to the studio window and its engine, as far as Linux
lets them: on a two-core machine training three runs while the user works
(``tests/benchmarks/test_bench_gui_stall.py``), the window's longest stall
was 166-198 ms with jobs 5 or 10 nicer and 63-91 ms with them at 19. A job
alone on the machine loses nothing; it gives way only while the CPU is
contested. Its session gets the same value
(:func:`engine.jobs.priority.lower_priority`), and the sweep's workers, in
sessions of their own, take the job's."""


def _watch_stdin(ctx: JobContext) -> None:
    for line in sys.stdin:
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError:
            continue
        if isinstance(msg, protocol.StopRun):
            ctx.request_stop(msg.reason)
        elif isinstance(msg, protocol.DetachRun) and not ctx.detached:
            ctx.detach()
            threading.Thread(target=_save_progress, args=(ctx,), daemon=True).start()
    if not ctx.detached:
        ctx.request_stop("engine_gone")


def _save_progress(ctx: JobContext) -> None:
    """While detached: the progress in the project's run list, as a headless
    run keeps it, so a studio opened later shows it."""
    from engine.store.project import Project

    project = Project.open(ctx.project_dir)
    try:
        while not ctx.wait_for_stop(PROGRESS_SAVE_S):
            done, total = ctx.last_progress
            project.update_run(ctx.run_id, progress_done=done, progress_total=total)
    finally:
        project.close()


def _finish_detached(ctx: JobContext, outcome: Outcome) -> None:
    """The supervisor's last step, done by the job itself (lifecycle step 3)."""
    from engine.store.project import Project

    project = Project.open(ctx.project_dir)
    try:
        _, problems = finish_own(
            project,
            ctx.run_id,
            outcome,
            ctx.stop_reason,
            exit_code=None if outcome.error else 0,
            progress=ctx.last_progress,
        )
    finally:
        project.close()
    for problem in problems:
        ctx.log(problem)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine.jobs.runner")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    lower_priority(JOB_NICENESS)
    keep_freed_memory()
    events = private_event_stream()
    run_dir: Path = args.run_dir
    record = read_run_config(run_dir)
    kind = get_kind(record["kind"])
    ctx = JobContext(
        run_id=record["run_id"],
        run_dir=run_dir,
        kind=kind.name,
        config=record["config"],
        resume=args.resume,
        events=events,
        time_offset=resume_time_offset(run_dir) if args.resume else 0.0,
    )
    threading.Thread(target=_watch_stdin, args=(ctx,), daemon=True).start()
    stop_on_signals(ctx, ctx.log)
    outcome = execute(ctx, kind.entry)
    sys.stderr.flush()
    if ctx.detached:
        _finish_detached(ctx, outcome)
        return 1 if outcome.error is not None else 0
    if outcome.error is not None:
        # The supervisor reads result.json for the summary (a failed flow's
        # models) and the log's last line for the reason.
        return 1
    summary = outcome.summary or {}
    ctx.emit(
        protocol.RunFinished(run_id=ctx.run_id, status=outcome.status, summary=summary)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
