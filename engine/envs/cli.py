"""``rl-studio-engine env check FILE`` — validate a designed env;
``rl-studio-engine env import-jira FILE [--name NAME] --project DIR`` — make a
workflow env of RL Hub Jira mock data (:func:`engine.envs.jira.import_jira`).

Exit status: 0 when the spec has no errors (warnings are printed), 1 when it
has errors (or warnings with ``--strict``), 2 with one sentence for a missing
or malformed file (raised as EngineError, printed by engine.cli). An import
prints what it wrote as JSON, or exits 2 with one sentence, nothing written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    check = subs.add_parser(
        "check",
        help="check a designed env (.env.json) and print the report",
        description="Check a designed env: fields, reachability, rewards, "
        "Gymnasium and SB3 check_env, determinism.",
    )
    check.add_argument("file", metavar="FILE", help="the <name>.env.json spec")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.add_argument(
        "--steps",
        type=int,
        default=200,
        help="env steps in the determinism test (default 200)",
    )
    check.add_argument(
        "--static", action="store_true", help="skip the checks that make an env"
    )
    jira = subs.add_parser(
        "import-jira",
        help="make a workflow env of RL Hub Jira mock data",
        description="Make a workflow env of an RL Hub Jira mock data file: "
        "envs/NAME.env.json and its data in data/jira/NAME.json.",
    )
    jira.add_argument("file", metavar="FILE", help="the mock data (JSON)")
    jira.add_argument(
        "--name",
        default="",
        help="the env's name (refused if taken; default: the file's name, "
        "suffixed _2, _3, ... if taken)",
    )
    jira.add_argument("--project", type=Path, required=True, help="project folder")


def run(args: argparse.Namespace) -> int:
    from engine.envs.check import check_spec

    if args.env_command == "import-jira":
        return _import_jira(args)
    report = check_spec(args.file, steps=args.steps, env_checks=not args.static)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format_text())
    if not report.ok or (args.strict and report.warnings):
        return 1
    return 0


def _import_jira(args: argparse.Namespace) -> int:
    from engine.envs.jira import import_jira, read_mock_data_file

    file = Path(args.file)
    data = read_mock_data_file(file)
    if not args.project.is_dir():
        from engine.errors import ConfigError

        raise ConfigError("project", f"There is no project folder {args.project}.")
    made = import_jira(
        args.project, data, name=args.name, default_name=file.stem, source=file.name
    )
    print(json.dumps(made.to_dict(), indent=2))
    return 0
