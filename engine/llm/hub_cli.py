"""``rl-studio-engine hub download REPO_ID [--revision R] [--project DIR]``:
a model from the Hugging Face Hub into the HF cache, with a progress bar.

With ``--project`` the download is a run of the project (``hub.download``),
listed, logged and stoppable as a studio run is. Ctrl-C stops it; running the
command again resumes the file it was on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.llm.hub import HubDownloadConfig


def configure(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="hub_command", metavar="ACTION", required=True)
    configure_download(
        subs.add_parser(
            "download",
            help="download a model repository into the Hugging Face cache",
            description="Download a model repository into the Hugging Face cache "
            "($HF_HOME), from $HF_ENDPOINT (default huggingface.co), with "
            "$HF_TOKEN.",
        )
    )


def configure_download(down: argparse.ArgumentParser) -> None:
    """The arguments of ``hub download`` (``engine.rl.hub_cli`` adds the
    agent's)."""
    down.add_argument("repo_id", metavar="REPO_ID", help="org/name")
    down.add_argument("--revision", default="main", help="branch, tag or commit")
    down.add_argument(
        "--project", type=Path, default=None, help="record it as a run of DIR"
    )
    down.add_argument("--quiet", action="store_true", help="no progress bar")
    down.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a download that takes longer (default: a day; running it "
        "again resumes)",
    )
    down.add_argument(
        "--stall-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail when the server sends nothing for this long (default: 60)",
    )


def run(args: argparse.Namespace) -> int:
    from engine.llm import hub
    from engine.progress import ProgressBar

    given = {"repo_id": args.repo_id, "revision": args.revision}
    if args.deadline is not None:
        given["deadline_s"] = args.deadline
    if args.stall_timeout is not None:
        given["stall_s"] = args.stall_timeout
    config = hub.validate(given)
    bar = ProgressBar("download", quiet=args.quiet)
    if args.project is None:
        result = _direct(config, bar)
    else:
        result = in_project(
            args.project, hub.KIND, config, f"Download {config.repo_id}", bar
        )
    print(json.dumps(result, indent=2))
    return 0


def _direct(config: HubDownloadConfig, bar: Any) -> dict[str, Any]:
    import signal

    from engine.llm import hub

    stop = {"asked": False}

    def on_sigint(_signum: int, _frame: object) -> None:
        if stop["asked"]:
            raise KeyboardInterrupt
        stop["asked"] = True
        print("\nstopping (Ctrl-C again to abort)", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return hub.download(
            config.repo_id,
            config.revision,
            progress=lambda done, total, _file: bar(done, total),
            should_stop=lambda: stop["asked"],
            deadline_s=config.deadline_s,
            stall_s=config.stall_s,
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def in_project(
    folder: Path, kind: str, config: Any, name: str, bar: Any
) -> dict[str, Any]:
    """Run the job ``kind`` on the validated ``config`` as a run of the
    project ``folder`` (created if missing) in this process, its progress on
    ``bar``; its summary, or its error raised."""
    from engine.jobs.lifecycle import HeadlessContext, run_in_process
    from engine.jobs.registry import get_kind
    from engine.settings import as_dict
    from engine.store.project import Project

    class BarContext(HeadlessContext):
        def progress(self, done: float, total: float, message: str = "") -> None:
            super().progress(done, total, message)
            bar(done, total)

    project = Project.open(folder, create=True)
    try:
        recorded = as_dict(config)
        record = project.create_run(kind, recorded, name=name)
        ctx = BarContext.of_run(project, record)
        outcome = run_in_process(project, record.id, ctx, get_kind(kind).entry)
        if outcome.error is not None:
            raise outcome.error
        return dict(outcome.summary or {})
    finally:
        project.close()
