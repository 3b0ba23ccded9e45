"""Entry point of a job process: ``python -m engine.jobs.runner RUN_DIR``.

Reads ``RUN_DIR/config.json`` (written by the supervisor), runs the job
function of its kind through :func:`engine.jobs.lifecycle.execute` (the
supervisor does the lifecycle's other steps around this process), and
reports through the protocol on the private event stream. Stop requests
arrive as ``run.stop`` lines on stdin (their ``reason`` says who asked); end
of stdin (the supervisor vanished) is a stop too, so an orphaned job saves
its checkpoint and exits instead of training forever; so are SIGINT and
SIGTERM (another engine stopping the run, a terminal, a service manager). A
stopped run's summary says why in ``stopped_by``.
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
from engine.jobs.lifecycle import execute, resume_time_offset
from engine.jobs.registry import get_kind, load


def _watch_stdin(ctx: JobContext) -> None:
    for line in sys.stdin:
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError:
            continue
        if isinstance(msg, protocol.StopRun):
            ctx.request_stop(msg.reason)
    ctx.request_stop("engine_gone")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine.jobs.runner")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
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
    outcome = execute(ctx, load(kind.entry))
    sys.stderr.flush()
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
