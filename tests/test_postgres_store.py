"""The stores on PostgreSQL (``engine.store.database``), against a real
server (``pg_server``): the same calls give the same answers as on SQLite,
processes starting together on a new database create its schema once, and
a server that goes away fails an operation in one sentence, writes nothing
half and is used again once it is back."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from pg_server import PgServer

from engine.llm.rollouts import iter_traces
from engine.store import database
from engine.store.agent_catalog import AgentCatalog
from engine.store.decisions import DecisionLog, replay
from engine.store.labels import LabelStore, StepRef, Suggestion, fingerprint
from engine.store.project import Project
from engine.store.promotion import configure_serving, serving_settings
from engine.store.trajectories import TrajectoryEndedError, TrajectoryStore

VOLATILE = ("id", "trajectory_id", "created", "ended", "time", "at")


def _plain(value: Any) -> Any:
    """``value`` without ids and times, which differ between two runs."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _session(project: Path, url: str | None) -> dict[str, Any]:
    """The same recording, labelling and deciding on one database; what
    each read answered."""
    out: dict[str, Any] = {}
    store = TrajectoryStore(project, database=url)
    ids = []
    for n, agent in enumerate(("bot", "bot", "other")):
        tid = store.start(agent, scenario=f"s{n}", window="w", meta={"n": n})
        store.add_step(tid, state={"x": 1}, action={"type": "go", "params": {}})
        store.add_steps(tid, [{"reward": 0.5, "prompt": "hi", "completion": "yo"}] * 2)
        ids.append(tid)
    store.end(ids[0], status="completed")
    store.end(ids[1], status="failed", total_reward=-1.0)
    out["list"] = store.list_trajectories()
    out["open"] = store.list_trajectories(agent="other", status="open")
    out["counts"] = store.counts("bot"), store.counts()
    out["steps"] = store.get(ids[0], with_steps=True)
    store.close()
    trace = project / "data" / "traces" / "agent-bot.jsonl"
    out["trace"] = list(iter_traces(trace))

    labels = LabelStore(project, who="ann", database=url)
    ref = StepRef("agent-bot", 0, 1, "k1")
    labels.set("kto", ref, "good")
    labels.set("kto", ref, "bad")  # replaces
    labels.set("sft", ref, "the answer")
    labels.set("dpo", ref, "", other=StepRef("agent-bot", 1, 0, "k2"))
    labels.undo()
    labels.replace_suggestions(
        ["agent-bot"],
        [
            Suggestion("agent-bot", 1, n, f"k{n}", "good", 0.6 + n / 10, "rm")
            for n in (0, 1)
        ],
    )
    labels.review([labels.suggestions()[0]], [])
    out["labels"] = [lb.to_dict() for lb in labels.labels()]
    out["label_traces"] = labels.traces(), labels.count()
    out["suggestions"] = labels.suggestions()
    out["agreement"] = [
        (a.model, a.source, a.agreed, a.total) for a in labels.agreement()
    ]
    labels.close()

    log = DecisionLog(project, database=url)
    for n in range(3):
        log.record(
            "bot",
            key=f"r{n}",
            chosen=2,
            role="current",
            served=2 if n else 1,
            reason="" if n else "v2 failed",
            latency_ms=1.5 * n,
        )
    log.record(
        "bot",
        key="r9",
        chosen=0,
        role="switched off",
        served=None,
        reason="off",
        latency_ms=0.5,
        answered_by="rule",
    )
    out["outcomes"] = log.outcomes("bot")
    out["recent"] = log.recent("bot")
    out["answered_by"] = log.answered_by("bot")
    log.append_promotions("bot", lambda _: [(1, "promoted", "gate", "first")])
    entries = log.append_promotions("bot", lambda _: [(2, "refused", "gate", "worse")])
    out["promotions"] = entries, replay(entries).current
    log.close()
    return out


def test_postgres_answers_as_sqlite_does(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_sqlite = _session(tmp_path / "sqlite", None)
    on_postgres = _session(tmp_path / "postgres", pg_url)
    assert not (tmp_path / "postgres" / "data" / "trajectories.sqlite").exists()
    assert on_postgres["counts"][0]["total"] == 2
    assert len(on_postgres["trace"]) == 2
    for key, value in on_sqlite.items():
        assert _plain(on_postgres[key]) == _plain(value), key
    prints = [fingerprint(tmp_path / "sqlite", ["agent-bot"])]
    monkeypatch.setenv(database.ENV, pg_url)  # as serve-http --database does
    prints.append(fingerprint(tmp_path / "postgres", ["agent-bot"]))
    assert prints[0] == prints[1] and prints[0]["rows"] == 3


def _open_all(url: str, project: str, barrier: Any) -> None:
    barrier.wait(timeout=30)
    for store in (
        TrajectoryStore(project, database=url),
        LabelStore(project, database=url),
        DecisionLog(Path(project), database=url),
        AgentCatalog(Path(project), database=url),
    ):
        store.close()


def test_processes_starting_together_create_the_schema_once(
    tmp_path: Path, pg_url: str
) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    procs = [
        context.Process(
            target=_open_all, args=(pg_url, str(tmp_path / f"p{n}"), barrier)
        )
        for n in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4


def test_a_server_gone_fails_one_sentence_and_comes_back(
    tmp_path: Path, postgres: PgServer, pg_url: str
) -> None:
    store = TrajectoryStore(tmp_path, database=pg_url)
    tid = store.start("bot")
    store.add_steps(tid, [{"reward": 1.0}] * 3)
    postgres.stop()
    try:
        with pytest.raises(database.DatabaseUnavailable) as gone:
            store.add_steps(tid, [{"reward": 2.0}] * 5)
        message = str(gone.value)
        assert message.count(". ") == 0 and message.endswith("once it is back.")
        assert "cannot be reached" in message
    finally:
        postgres.start()
    # Back: the batch that failed left nothing; the next one is stored.
    assert store.add_steps(tid, [{"reward": 4.0}] * 2) == 3
    row = store.get(tid, with_steps=True)
    assert [s["reward"] for s in row["steps_data"]] == [1.0] * 3 + [4.0] * 2
    store.close()


def test_a_batch_of_steps_is_one_statement(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a request's steps cost one round trip: their indices
    claimed and the steps inserted by one statement, committed by itself;
    one for an ended trajectory inserts nothing."""
    store = TrajectoryStore(tmp_path, database=pg_url)
    tid = store.start("bot")
    sent: list[str] = []
    execute, executemany = database.Database.execute, database.Database.executemany

    def counted(self: database.Database, sql: str, *args: Any) -> Any:
        sent.append(sql)
        return execute(self, sql, *args)

    def counted_many(self: database.Database, sql: str, *args: Any) -> Any:
        sent.append(sql)
        return executemany(self, sql, *args)

    monkeypatch.setattr(database.Database, "execute", counted)
    monkeypatch.setattr(database.Database, "executemany", counted_many)
    assert store.add_steps(tid, [{"action": n, "reward": 1.0} for n in range(10)]) == 0
    assert store.add_step(tid, action=10, reward=0.5) == 10
    assert len(sent) == 2, sent
    monkeypatch.undo()
    row = store.get(tid, with_steps=True)
    assert [(s["t"], s["action"]) for s in row["steps_data"]] == [
        (n, n) for n in range(11)
    ]
    assert row["steps"] == 11
    store.end(tid, status="completed")
    with pytest.raises(TrajectoryEndedError, match="has ended"):
        store.add_steps(tid, [{"reward": 1.0}] * 3)
    assert len(store.get(tid, with_steps=True)["steps_data"]) == 11
    assert store.get(tid)["steps"] == 11
    store.close()


def test_configured_database_and_bad_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(database.ENV, raising=False)
    assert database.configured(tmp_path) == ""
    monkeypatch.setenv(database.ENV, "postgresql://u:secret@db:5432/rl")
    assert database.configured(tmp_path) == "postgresql://u:secret@db:5432/rl"
    assert database.shown(database.configured(tmp_path)) == "postgresql://u@db:5432/rl"
    with pytest.raises(database.DatabaseError, match="must be a PostgreSQL URL"):
        database.configured(tmp_path, "mysql://db/rl")
    with pytest.raises(database.DatabaseUnavailable, match="cannot be reached"):
        TrajectoryStore(tmp_path, database="postgresql://u@127.0.0.1:1/rl")


def test_store_copy_there_and_back_and_use(tmp_path: Path, pg_url: str) -> None:
    """``rl-studio-engine store copy`` from a project's SQLite files to
    PostgreSQL and on into another project: every row arrives once (its
    agents, versions and serving settings too); copying again adds nothing.
    ``store use`` makes the project's stores use it."""
    import subprocess
    import sys

    def engine(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "engine.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = tmp_path / "first"
    _session(first, None)
    made = Project.open(first, create=True)
    weights = tmp_path / "model.zip"
    weights.write_bytes(b"weights")
    model = made.register_model(name="m", kind="sb3-policy", files=[weights])
    made.add_version("bot", model.id)
    made.agent_catalog.set_config("bot", pin=1, candidate=None, rollout=0)
    configure_serving(made, {"rl_enabled": False})
    made.close()
    there = json.loads(engine("store", "copy", "--from", str(first), "--to", pg_url))
    assert there == {
        "trajectories": 3,
        "trajectory_steps": 9,
        "decisions": 4,
        "promotions": 2,
        "agents": 1,
        "versions": 1,
        "serving_settings": 1,
        "labels": 3,
        "suggestions": 2,
        "agreement": 1,
        "label_log": 6,
    }
    again = json.loads(engine("store", "copy", "--from", str(first), "--to", pg_url))
    assert set(again.values()) == {0}
    second = tmp_path / "second"
    Project.open(second, create=True).close()
    back = json.loads(engine("store", "copy", "--from", pg_url, "--to", str(second)))
    assert back == there
    log = DecisionLog(second)  # the ids go on from the copied ones
    log.record(
        "bot", key="new", chosen=2, role="current", served=2, reason="", latency_ms=1.0
    )
    assert [r["request_key"] for r in log.recent("bot", 2)] == ["new", "r9"]
    log.close()

    engine("store", "use", "--project", str(second), pg_url)
    assert engine("store", "show", "--project", str(second)).strip() == pg_url
    assert database.configured(second) == pg_url
    shared = Project.open(second)  # its agents are the database's
    assert [m.id for m in shared.versions("bot")] == [model.id]
    assert shared.agent_catalog.config("bot")["pin"] == 1
    assert not serving_settings(shared).rl_enabled
    shared.close()
    engine("store", "use", "--project", str(second), "sqlite")
    assert database.configured(second) == ""
