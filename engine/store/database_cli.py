"""``rl-studio-engine store``: where a project keeps its trajectories,
decisions, promotions, agents (their versions, routing and serving
settings) and labels (:mod:`engine.store.database`).

``store copy --from A --to B`` copies them between a project's SQLite files
(A or B a project folder) and a PostgreSQL database (a URL), either way;
copying again adds only what is missing. ``store use --project P URL``
makes the project use that database (the project setting), ``store use
--project P sqlite`` its own files again; ``store show`` says which.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.errors import EngineError
from engine.store import database
from engine.store.database import Database, Schema

SQLITE_WORD = "sqlite"


def _schemas() -> tuple[Schema, ...]:
    from engine.store import agent_catalog, decisions, labels, trajectories

    return (trajectories.SCHEMA, decisions.SCHEMA, agent_catalog.SCHEMA, labels.SCHEMA)


def configure(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    copy = subs.add_parser(
        "copy",
        help="copy trajectories, decisions, promotions, agents and labels "
        "between a project's SQLite files and a PostgreSQL database",
    )
    copy.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="FOLDER|URL",
        help="a project folder (its data/*.sqlite) or postgresql://...",
    )
    copy.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL|FOLDER",
        help="postgresql://... or a project folder",
    )
    use = subs.add_parser(
        "use", help="make a project keep its stores in a PostgreSQL database"
    )
    use.add_argument("--project", required=True, type=Path, help="the project")
    use.add_argument(
        "database", metavar="URL|sqlite", help="postgresql://... or 'sqlite'"
    )
    show = subs.add_parser("show", help="the database a project's stores use")
    show.add_argument("--project", required=True, type=Path, help="the project")


def _open(where: str, schema: Schema, side: str) -> Database:
    if database.is_url(where):
        return Database(database.checked_url(where, side), schema)
    folder = Path(where).expanduser()
    if not folder.is_dir():
        raise EngineError(
            f"{side} must be a project folder or a postgresql:// URL; "
            f"{folder} is no folder."
        )
    return Database(database.sqlite_path(folder, schema), schema)


def copy(source: str, target: str) -> dict[str, int]:
    """Rows copied per table."""
    if source == target:
        raise EngineError("--from and --to name the same database.")
    _adopt_agents(source)
    copied: dict[str, int] = {}
    for schema in _schemas():
        src = _open(source, schema, "--from")
        try:
            dst = _open(target, schema, "--to")
            try:
                copied.update(database.copy_store(src, dst, schema))
            finally:
                dst.close()
        finally:
            src.close()
    return copied


def _adopt_agents(where: str) -> None:
    """A project folder made by an older version keeps its agents in
    ``studio.sqlite`` until it is opened: open it, so that they are in its
    agents store to copy."""
    if (
        database.is_url(where)
        or not (Path(where).expanduser() / "studio.sqlite").is_file()
    ):
        return
    from engine.store.project import Project

    project = Project.open(where)
    try:
        project.agent_catalog  # noqa: B018 (opening it takes them in)
    finally:
        project.close()


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except database.DatabaseError as exc:
        raise EngineError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    if args.action == "copy":
        copied = copy(args.source, args.target)
        print(json.dumps(copied))
        return 0
    from engine.store.project import Project

    project = Project.open(args.project)
    try:
        if args.action == "show":
            url = database.configured(project.path)
            print(database.shown(url) if url else SQLITE_WORD)
            return 0
        if args.database == SQLITE_WORD:
            project.set_setting(database.SETTING_KEY, {})
            print(f"{project.path} keeps its stores in its SQLite files.")
            return 0
        url = database.checked_url(args.database, "The database")
        for schema in _schemas():  # reachable, and its tables made
            Database(url, schema).close()
        project.set_setting(database.SETTING_KEY, {"url": url})
        print(f"{project.path} keeps its stores in {database.shown(url)}.")
    finally:
        project.close()
    return 0
