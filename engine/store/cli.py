"""``rl-studio-engine models``: the models registered in a project."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from engine.contract import default_project
from engine.store.project import Project


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        type=Path,
        default=default_project(),
        help="project folder (default ~/RLStudio/default)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    project = Project.open(args.project)
    try:
        models = project.list_models()
    finally:
        project.close()
    if args.json:
        print(json.dumps([m.to_dict() for m in models], indent=2))
        return 0
    if not models:
        print(f"No models in {project.path}.")
        return 0
    rows = [("ID", "NAME", "KIND", "AGENT", "ENV", "ALGO/BASE", "CREATED", "PATH")]
    for m in models:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.created))
        agent = f"{m.agent} v{m.version}" if m.version else ""
        row = (m.id, m.name, m.kind, agent, m.env, m.algo or m.base, created, m.path)
        rows.append(row)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*cells, str(row[-1])]))
    return 0
