"""Agents, their versions, routing and serving settings in the agents store
(``engine.store.agent_catalog``, issue 32 item 3): two projects in two
folders on one PostgreSQL database (as two services on two machines) see
the same agents, versions, pins, rollouts and switches; versions added at
once by two connections get distinct numbers; a project made before the
store takes its agents in once, losing nothing and duplicating nothing;
a version whose files are another project's answers one sentence."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.service.agents import ActFailed, Agents
from engine.store import database
from engine.store.agent_catalog import SERVING_KEY, AgentCatalog
from engine.store.decisions import DecisionLog
from engine.store.project import ADOPTED_KEY, Project
from engine.store.promotion import (
    Promotion,
    agent_settings,
    configure_agent,
    configure_serving,
    serving_settings,
)

AGENT = "bot"


def _model(project: Project, name: str, reward: float) -> str:
    """A registered sb3 policy (its file is never loaded) and its id."""
    weights = project.path.parent / f"{project.path.name}-{name}.zip"
    weights.write_bytes(b"weights")
    return project.register_model(
        name=name,
        kind="sb3-policy",
        files=[weights],
        env="CartPole-v1",
        algo="PPO",
        metrics={"eval/mean_reward": reward},
    ).id


def _seen(project: Project) -> dict[str, Any]:
    """What a project reads of the agent and the serving settings."""
    return {
        "names": project.agent_catalog.names(),
        "versions": [
            (m.version, m.id, m.kind, m.env, m.metrics, Path(m.path).name)
            for m in project.versions(AGENT)
        ],
        "config": project.agent_catalog.config(AGENT),
        "agent": agent_settings(project, AGENT),
        "serving": serving_settings(project),
    }


@pytest.fixture
def on_postgres(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(database.ENV, pg_url)  # as serve-http --database does
    return pg_url


@pytest.fixture
def two(tmp_path: Path, on_postgres: str) -> Iterator[tuple[Project, Project]]:
    first = Project.open(tmp_path / "a", create=True)
    second = Project.open(tmp_path / "b", create=True)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_two_projects_on_one_database_see_the_same_agents(
    two: tuple[Project, Project],
) -> None:
    first, second = two
    v1 = first.add_version(AGENT, _model(first, "good", 150.0))
    v2 = second.add_version(AGENT, _model(second, "better", 160.0))
    assert (v1.version, v2.version) == (1, 2)
    first.agent_catalog.set_config(AGENT, pin=1, candidate=2, rollout=25)
    configure_agent(second, AGENT, {"rl_enabled": False, "tolerance": 5.0})
    configure_serving(first, {"base_model": "gpt-base", "fallback_to_base": False})
    seen = _seen(first)
    assert seen == _seen(second)
    assert seen["names"] == [AGENT]
    assert [v[:2] for v in seen["versions"]] == [(1, v1.id), (2, v2.id)]
    assert seen["versions"][1][4] == {"eval/mean_reward": 160.0}
    assert (seen["config"]["pin"], seen["config"]["candidate"]) == (1, 2)
    assert seen["config"]["rollout"] == 25
    assert not seen["agent"].rl_enabled and seen["agent"].tolerance == 5.0
    assert seen["serving"].base_model == "gpt-base"
    assert not seen["serving"].fallback_to_base
    # Each project's own models list their version; the other's are not its.
    assert [(m.agent, m.version) for m in first.list_models()] == [(AGENT, 1)]
    assert [(m.agent, m.version) for m in second.list_models()] == [(AGENT, 2)]
    assert first.model_here(v1.id) and not first.model_here(v2.id)
    # The promotion gate decides once for both: the log is shared too.
    logs = [DecisionLog(p.path) for p in two]
    try:
        states = [
            Promotion(p, log).state(AGENT) for p, log in zip(two, logs, strict=True)
        ]
        assert states[0].current == states[1].current == 2
        assert len(logs[1].promotions(AGENT)) == 2
    finally:
        for log in logs:
            log.close()
    # The switch turned back on through one project is on in the other.
    configure_agent(first, AGENT, {"rl_enabled": True})
    assert agent_settings(second, AGENT).rl_enabled


def test_a_version_of_another_projects_folder_is_one_sentence(
    two: tuple[Project, Project],
) -> None:
    first, second = two
    first.add_version(AGENT, _model(first, "there", 150.0))
    agents = Agents(second)
    try:
        described = agents.describe(AGENT)
        assert [v["version"] for v in described["versions"]] == ["v1"]
        assert described["versions"][0]["file_present"] is False
        with pytest.raises(ActFailed) as failed:
            agents.act(AGENT, observation=[0.0, 0.0, 0.0, 0.0])
    finally:
        agents.close()
    message = str(failed.value)
    assert "of another project folder" in message and str(second.path) in message
    assert message.endswith("cannot be loaded here.") and message.count(". ") == 0


def _add_many(catalog: AgentCatalog, tag: str, n: int, start: Any) -> list[int]:
    start.wait(timeout=30)
    facts = {"name": tag, "kind": "sb3-policy", "path": "x", "created": 1.0}
    return [catalog.add_version(AGENT, f"m-{tag}-{i}", facts) for i in range(n)]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_versions_added_at_once_get_distinct_numbers(
    tmp_path: Path, dialect: str, request: pytest.FixtureRequest
) -> None:
    """Two connections (as two processes) add 25 versions each at once."""
    url = request.getfixturevalue("pg_url") if dialect == "postgresql" else None
    catalogs = [AgentCatalog(tmp_path, database=url) for _ in range(2)]
    start = threading.Barrier(2)
    got: dict[str, list[int]] = {}

    def add(n: int) -> None:
        got[f"c{n}"] = _add_many(catalogs[n], f"c{n}", 25, start)

    threads = [threading.Thread(target=add, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert sorted(got["c0"] + got["c1"]) == list(range(1, 51))
        rows = catalogs[0].versions(AGENT)
        assert [r["version"] for r in rows] == list(range(1, 51))
        assert len({r["id"] for r in rows}) == 50
    finally:
        for catalog in catalogs:
            catalog.close()


# --------------------------------------------------------------- migration
def _old_layout(root: Path) -> dict[str, Any]:
    """A project as an older version left it: versions in ``models``'
    ``agent`` and ``version`` columns, routing in its ``agents`` table, the
    serving settings in ``meta``; no agents store. What it holds."""
    project = Project.open(root, create=True)
    ids = [_model(project, f"m{n}", 10.0 * n) for n in (1, 2, 3)]
    project.close()
    for leftover in (root / "data").glob("agents.sqlite*"):
        leftover.unlink()
    db = sqlite3.connect(root / "studio.sqlite")
    db.executescript(
        "ALTER TABLE models ADD COLUMN agent TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE models ADD COLUMN version INTEGER NOT NULL DEFAULT 0;"
        "CREATE TABLE agents (name TEXT PRIMARY KEY, pin INTEGER,"
        " candidate INTEGER, rollout INTEGER NOT NULL DEFAULT 0,"
        " updated REAL NOT NULL);"
        "INSERT INTO agents VALUES ('bot', 1, 2, 30, 5.0);"
        "INSERT INTO agents VALUES ('idle', NULL, NULL, 0, 6.0);"
        "INSERT INTO meta VALUES ('setting:serving', '{\"rl_enabled\": false}');"
        "INSERT INTO meta VALUES ('setting:agent-settings:bot',"
        ' \'{"tolerance": 2.5, "rl_enabled": false}\');'
        "INSERT INTO meta VALUES ('setting:alerts', '{\"webhooks\": []}');"
    )
    db.executemany(
        "UPDATE models SET agent = ?, version = ? WHERE id = ?",
        [("bot", 1, ids[0]), ("bot", 2, ids[1]), ("other", 1, ids[2])],
    )
    db.execute("DELETE FROM meta WHERE key = ?", (ADOPTED_KEY,))
    db.commit()
    db.close()
    return {"ids": ids}


def _count_versions(catalog: AgentCatalog) -> int:
    return sum(len(catalog.versions(a)) for a in catalog.names())


def test_an_old_project_takes_its_agents_in_once(tmp_path: Path) -> None:
    root = tmp_path / "old"
    ids = _old_layout(root)["ids"]
    project = Project.open(root)
    try:
        assert project.agent_catalog.names() == ["bot", "idle", "other"]
        assert [(m.id, m.version) for m in project.versions("bot")] == [
            (ids[0], 1),
            (ids[1], 2),
        ]
        assert [m.id for m in project.versions("other")] == [ids[2]]
        config = project.agent_catalog.config("bot")
        assert (config["pin"], config["candidate"], config["rollout"]) == (1, 2, 30)
        assert not serving_settings(project).rl_enabled
        settings = agent_settings(project, "bot")
        assert settings.tolerance == 2.5 and not settings.rl_enabled
        assert [(m.agent, m.version) for m in project.list_models()] == [
            ("bot", 1),
            ("bot", 2),
            ("other", 1),
        ]
        # The next version numbers on from the old ones.
        assert project.add_version("bot", _model(project, "m4", 40.0)).version == 3
        project.agent_catalog.set_config("bot", pin=None, candidate=3, rollout=50)
    finally:
        project.close()
    # Told again (the mark lost: a migration cut short): nothing twice, and
    # what changed since in the store is kept.
    db = sqlite3.connect(root / "studio.sqlite")
    db.execute("DELETE FROM meta WHERE key = ?", (ADOPTED_KEY,))
    db.commit()
    db.close()
    again = Project.open(root)
    try:
        assert _count_versions(again.agent_catalog) == 4
        assert again.agent_catalog.config("bot")["rollout"] == 50
        assert again.agent_catalog.setting(SERVING_KEY) == {"rl_enabled": False}
    finally:
        again.close()


def _open_agents(root: str, url: str | None, start: Any) -> None:
    if url:
        import os

        os.environ[database.ENV] = url
    start.wait(timeout=30)
    project = Project.open(root)
    try:
        assert [m.version for m in project.versions("bot")] == [1, 2]
    finally:
        project.close()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_processes_opening_an_old_project_together_take_it_in_once(
    tmp_path: Path, dialect: str, request: pytest.FixtureRequest
) -> None:
    """Four processes open the old project (on PostgreSQL: four copies of
    it in four folders, as on four machines) at once."""
    url = request.getfixturevalue("pg_url") if dialect == "postgresql" else None
    roots = [tmp_path / "old"]
    _old_layout(roots[0])
    if url:
        import shutil

        roots += [tmp_path / f"copy{n}" for n in (1, 2, 3)]
        for root in roots[1:]:
            shutil.copytree(roots[0], root)
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)
    procs = [
        context.Process(
            target=_open_agents, args=(str(roots[n % len(roots)]), url, start)
        )
        for n in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4
    catalog = AgentCatalog(roots[0], database=url)
    try:
        assert _count_versions(catalog) == 3
        assert catalog.names() == ["bot", "idle", "other"]
    finally:
        catalog.close()


def test_a_resumed_runs_model_refreshes_its_version(tmp_path: Path) -> None:
    """A resumed run registers its model again (replaced, the same id): the
    version keeps its number and shows the new evaluation."""
    project = Project.open(tmp_path / "p", create=True)
    try:
        run = project.create_run("rl.train", {"agent": AGENT}, "run")
        weights = tmp_path / "model.zip"
        weights.write_bytes(b"weights")
        entry = {"name": "m", "kind": "sb3-policy", "file": str(weights)}
        for reward in (1.0, 2.0):
            metrics = {"eval/mean_reward": reward}
            project.register_run_models(
                run.id, {"models": [{**entry, "metrics": metrics}]}
            )
        (version,) = project.versions(AGENT)
        assert version.version == 1 and version.metrics == {"eval/mean_reward": 2.0}
        assert [m.id for m in project.list_models()] == [version.id]
    finally:
        project.close()


def test_a_version_added_through_another_folder_shows_as_a_change(
    two: tuple[Project, Project],
) -> None:
    """The studio's engine refreshes when its project changed elsewhere
    (``Project.changed_elsewhere``, asked every second): a version, a
    routing or a switch changed by a service of another folder on the
    shared database counts, though it never touches this ``studio.sqlite``."""
    first, second = two
    first.agent_catalog.names()  # the store is open, as a served project's is
    assert not first.changed_elsewhere()  # the first look sees no change
    assert not first.changed_elsewhere()
    second.add_version(AGENT, _model(second, "m1", 10.0))
    assert first.changed_elsewhere()
    assert not first.changed_elsewhere()
    second.agent_catalog.set_config(AGENT, pin=1, candidate=None, rollout=0)
    assert first.changed_elsewhere()
    configure_serving(second, {"rl_enabled": False})
    assert first.changed_elsewhere()
    assert not first.changed_elsewhere()
