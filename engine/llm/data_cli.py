"""``rl-studio-engine data import SOURCE``: a JSONL, JSON, CSV or Parquet
file, a dataset folder or a Hub dataset into a project's training datasets
(the ``llm.import`` job of :mod:`engine.llm.data_import`).

Examples::

    rl-studio-engine data import chats.jsonl --project P
    rl-studio-engine data import org/name --format preference \\
        --map chosen=better --map rejected=worse --project P --base Qwen/Qwen3-0.6B
    rl-studio-engine data import chats.jsonl --preview 5

``--preview [N]`` prints the first N rows mapped, the detected format and the
problems among them as JSON, and writes nothing. An import is a run of the
project (listed and logged as a studio run is); its summary is printed as
JSON. ``--set key=value`` sets any other setting of the job
(``validation_fraction``, ``seed``, ``max_length``, ``split_name``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.settings_cli import add_set_option, parse_sets


def configure(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    imp = subs.add_parser(
        "import",
        help="import a data file or Hub dataset as a training dataset",
        description="Import a JSONL, JSON, CSV or Parquet file, a dataset folder or "
        "a Hub dataset (from $HF_ENDPOINT) as an SFT, DPO, KTO or GRPO dataset of "
        "--project.",
    )
    imp.add_argument("source", metavar="FILE|HUB_ID")
    add_import_options(imp)
    imp.add_argument(
        "--method",
        default=None,
        help="sft, dpo, kto or grpo (default: the format's)",
    )
    imp.add_argument(
        "--base",
        default="",
        metavar="MODEL",
        help="measure token lengths with this model's tokenizer and chat template",
    )
    imp.add_argument(
        "--name", default=None, help="the dataset's folder name (default: SOURCE's)"
    )
    imp.add_argument(
        "--preview",
        type=int,
        nargs="?",
        const=20,
        default=None,
        metavar="N",
        help="print the first N rows mapped (default 20) and write nothing",
    )
    add_set_option(imp)
    imp.add_argument(
        "--project", type=Path, default=None, help="the project folder (created)"
    )


def add_import_options(parser: argparse.ArgumentParser) -> None:
    """The options saying how to read a source (shared with llm-train)."""
    from engine.llm.data_import import FORMATS

    parser.add_argument(
        "--format",
        default="auto",
        help=f"auto, {', '.join(FORMATS)} (default: auto, from the columns)",
    )
    parser.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        dest="columns",
        help="read FIELD (messages, prompt, completion, chosen, ...) from COLUMN "
        "(repeatable)",
    )


def run_job(project_dir: Path, kind: str, cfg: Any, name: str = "") -> dict[str, Any]:
    """Run a validated config of ``kind`` in this process as a run of the
    project (created when missing); its recorded summary, or its error."""
    from engine.jobs.lifecycle import HeadlessContext, run_in_process
    from engine.jobs.registry import get_kind, named_run
    from engine.settings import as_dict
    from engine.store.project import Project

    if project_dir.exists() and not project_dir.is_dir():
        raise EngineError(f"--project {str(project_dir)!r} is a file, not a folder.")
    project = Project.open(project_dir, create=True)
    try:
        chosen, recorded = named_run(
            kind, as_dict(cfg), name, taken=project.run_names()
        )
        record = project.create_run(kind, recorded, name=chosen)
        print(f"run folder: {record.run_dir}", file=sys.stderr, flush=True)
        ctx = HeadlessContext.of_run(project, record)
        outcome = run_in_process(
            project, record.id, ctx, get_kind(kind).entry, trace=ctx.log_to_file
        )
        if outcome.error is not None:
            raise outcome.error
        return dict(outcome.summary or {})
    finally:
        project.close()


OWN_OPTIONS = {
    "source": "FILE|HUB_ID",
    "format": "--format",
    "columns": "--map",
    "method": "--method",
    "base_model": "--base",
    "name": "--name",
}


def import_config(
    args: argparse.Namespace, sets: list[str], **given: Any
) -> dict[str, Any]:
    """The raw ``llm.import`` config that ``--format``, ``--map``, the
    ``--set`` items ``sets`` and the settings ``given`` ask for."""
    from engine.llm.data_import import ImportConfig

    return {
        **parse_sets(sets, ImportConfig, OWN_OPTIONS),
        "format": args.format,
        "columns": ", ".join(args.columns),
        **given,
    }


def run(args: argparse.Namespace) -> int:
    from engine.llm import data_import

    config = import_config(
        args,
        args.settings,
        source=args.source,
        method=args.method,
        name=args.name,
        base_model=args.base,
    )
    cfg = data_import.validate_import(config)
    if args.preview is not None:
        shown = data_import.preview(
            cfg.source,
            cfg.format,
            cfg.columns,
            cfg.method,
            rows=max(args.preview, 1),
            split_name=cfg.split_name,
        )
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return 0
    if args.project is None:
        raise EngineError("Give the project to import into with --project DIR.")
    folder = args.project.expanduser().resolve()
    summary = run_job(folder, data_import.KIND, cfg, f"Import {Path(cfg.source).name}")
    print(json.dumps(summary, indent=2))
    return 0
