"""``rl-studio-engine agent``: an agent's versions and the gate's decisions,
and promoting or rolling back by hand, on a project folder (a running
``serve-http`` on the same project sees the change on its next request:
the promotion log is shared, and written in one transaction).

    rl-studio-engine agent show --project P NAME
    rl-studio-engine agent promote --project P NAME v3 --why "..." [--by me]
    rl-studio-engine agent rollback --project P NAME --why "..." [--by me]
"""

from __future__ import annotations

import argparse
import getpass
import json
from pathlib import Path

from engine.errors import ConfigError
from engine.service.agents import version_number
from engine.store.decisions import DecisionLog
from engine.store.project import Project
from engine.store.promotion import Promotion


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("show", "promote", "rollback"))
    parser.add_argument("name", help="the agent")
    parser.add_argument("version", nargs="?", help="the version to promote (v2)")
    parser.add_argument("--project", type=Path, required=True, help="project folder")
    parser.add_argument("--why", default="", help="why (kept in the promotion log)")
    parser.add_argument(
        "--by", default="", help="who (kept in the log; default: your user name)"
    )


def run(args: argparse.Namespace) -> int:
    if args.action != "show" and not args.why.strip():
        raise ConfigError("why", f"agent {args.action} needs --why (kept in the log).")
    if args.action == "promote" and args.version is None:
        raise ConfigError("version", "agent promote needs the version, such as v2.")
    project = Project.open(args.project)
    log = DecisionLog(project.path)
    try:
        gate = Promotion(project, log)
        by = args.by or getpass.getuser()
        if args.action == "promote":
            state = gate.promote(
                args.name, version_number("version", args.version), by, args.why
            )
        elif args.action == "rollback":
            state = gate.rollback(args.name, by, args.why)
        else:
            state = gate.state(args.name)
        entries = log.promotions(args.name)
    finally:
        log.close()
        project.close()
    print(
        json.dumps(
            {
                "agent": args.name,
                "current": None if state.current is None else f"v{state.current}",
                "previous": None if state.previous is None else f"v{state.previous}",
                "versions": {
                    f"v{v}": {"status": state.status[v], "reason": state.reason[v]}
                    for v in sorted(state.status)
                },
                "log": entries[-10:],
            },
            indent=2,
        )
    )
    return 0
