"""``rl-studio-engine env check FILE`` — validate a designed env.

Exit status: 0 when the spec has no errors (warnings are printed), 1 when it
has errors (or warnings with ``--strict``), 2 with one sentence for a missing
or malformed file (raised as EngineError, printed by engine.cli).
"""

from __future__ import annotations

import argparse
import json


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


def run(args: argparse.Namespace) -> int:
    from engine.envs.check import check_spec

    if args.env_command != "check":  # argparse only lets 'check' through today
        return 2
    report = check_spec(args.file, steps=args.steps, env_checks=not args.static)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format_text())
    if not report.ok or (args.strict and report.warnings):
        return 1
    return 0
