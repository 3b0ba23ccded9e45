"""``rl-studio-engine compare RUN_ID RUN_ID ... --project DIR``: the runs'
differing settings and outcomes as JSON (:func:`engine.run_compare.compare_runs`,
as the studio's Compare view shows them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.contract import default_project
from engine.errors import ConfigError
from engine.run_compare import compare_runs
from engine.store.project import Project


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="two or more")
    parser.add_argument(
        "--project",
        type=Path,
        default=default_project(),
        help="project folder (default ~/RLStudio/default)",
    )


def run(args: argparse.Namespace) -> int:
    ids: list[str] = args.run_ids
    if len(set(ids)) < 2:
        raise ConfigError("run_ids", "compare needs two or more different run ids.")
    project = Project.open(args.project)
    try:
        runs = [dict(project.get_run(run_id).to_dict()) for run_id in ids]
    finally:
        project.close()
    print(json.dumps(compare_runs(runs), indent=2))
    return 0
