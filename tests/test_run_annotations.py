"""Runs can be told apart (issue 29, item 1): tags and a note per run, kept
in the project (an old project gains the columns and keeps its runs), set
through ``run.annotate`` on the real engine; bad input is one sentence and
changes nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_harness import EngineProcess

from engine import protocol
from engine.errors import ConfigError, UnknownRunError
from engine.store.project import Project


def test_tags_are_cleaned_and_bounded_in_one_place() -> None:
    assert protocol.clean_tags([" baseline , lr sweep", "Baseline", "", "a  b"]) == [
        "baseline",
        "lr sweep",
        "a b",
    ]
    assert protocol.annotation_problem(["x"] * protocol.MAX_TAGS, "") is None
    too_many = [f"t{i}" for i in range(protocol.MAX_TAGS + 1)]
    assert protocol.annotation_problem(too_many, "") == (
        "tags",
        f"A run can have at most {protocol.MAX_TAGS} tags, not {len(too_many)}.",
    )
    field, sentence = protocol.annotation_problem(["y" * 41], "") or ("", "")
    assert field == "tags" and sentence.endswith("is longer than 40 characters.")
    field, sentence = protocol.annotation_problem([], "n" * 5001) or ("", "")
    assert field == "note" and sentence.count(".") == 1
    # The message itself declares the same bounds; decoding enforces them.
    line = protocol.encode(protocol.AnnotateRun(id="a", run_id="r", tags=["z" * 41]))
    with pytest.raises(protocol.ProtocolError, match="entry longer than 40"):
        protocol.decode(line)


def test_tags_and_note_survive_reopening(project_dir: Path) -> None:
    project = Project.open(project_dir, create=True)
    run = project.create_run("selftest", {"steps": 3}, name="first")
    assert (run.tags, run.note) == ([], "")
    stored = project.annotate_run(
        run.id, ["good, keep", "good"], "lr 3e-4\nbest so far"
    )
    assert (stored.tags, stored.note) == (["good", "keep"], "lr 3e-4\nbest so far")
    # The rest of the row is the job's; an update of it keeps the annotation.
    project.update_run(run.id, status="completed", summary={"a": 1})
    project.close()
    reopened = Project.open(project_dir)
    (again,) = reopened.list_runs()
    assert (again.tags, again.note, again.status) == (
        ["good", "keep"],
        "lr 3e-4\nbest so far",
        "completed",
    )
    assert again.to_dict()["tags"] == ["good", "keep"]
    # Bad input: one sentence naming the field, and nothing written.
    with pytest.raises(ConfigError, match="at most 20 tags") as refused:
        reopened.annotate_run(run.id, [f"t{i}" for i in range(21)], "")
    assert refused.value.field == "tags"
    with pytest.raises(ConfigError, match="note is longer") as refused:
        reopened.annotate_run(run.id, [], "n" * 6000)
    assert refused.value.field == "note"
    with pytest.raises(UnknownRunError, match="no run 'nope'"):
        reopened.annotate_run("nope", ["x"], "")
    assert reopened.get_run(run.id).tags == ["good", "keep"]
    reopened.close()


def test_a_project_made_before_tags_opens_with_its_runs(tmp_path: Path) -> None:
    root = tmp_path / "old"
    root.mkdir()
    db = sqlite3.connect(root / "studio.sqlite")
    # The runs table of schema version 2, with one run in it.
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '2');"
        "CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL,"
        " kind TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL,"
        " started REAL, ended REAL, pid INTEGER, exit_code INTEGER, signal INTEGER,"
        " reason TEXT NOT NULL DEFAULT '', config TEXT NOT NULL DEFAULT '{}',"
        " summary TEXT NOT NULL DEFAULT '{}',"
        " progress_done REAL NOT NULL DEFAULT 0,"
        " progress_total REAL NOT NULL DEFAULT 0);"
        "INSERT INTO runs (id, name, kind, status, created, summary) VALUES"
        " ('20250101-000000-abcd', 'old run', 'rl.train', 'completed', 1.0,"
        " '{\"total_steps\": 500}');"
    )
    db.commit()
    db.close()
    project = Project.open(root)
    (old,) = project.list_runs()
    assert (old.name, old.summary, old.tags, old.note) == (
        "old run",
        {"total_steps": 500},
        [],
        "",
    )
    project.annotate_run(old.id, ["legacy"], "from before tags")
    project.close()
    reopened = Project.open(root)
    assert reopened.get_run(old.id).tags == ["legacy"]
    reopened.close()


@pytest.fixture
def engine(project_dir: Path) -> Iterator[EngineProcess]:
    eng = EngineProcess()
    eng.call(protocol.Hello())
    eng.call(protocol.OpenProject(path=str(project_dir), create=True))
    yield eng
    eng.close()


def test_run_annotate_round_trips_through_the_engine(
    engine: EngineProcess, project_dir: Path
) -> None:
    # A run row made as a headless train would (the engine need not run it).
    project = Project.open(project_dir)
    run_id = project.create_run("selftest", {"steps": 1}, name="tagged").id
    project.close()
    result = engine.call(
        protocol.AnnotateRun(run_id=run_id, tags=["best", " best ", "ppo"], note="n")
    )
    assert result == {"run_id": run_id, "tags": ["best", "ppo"], "note": "n"}
    (listed,) = engine.call(protocol.ListRuns())["runs"]
    assert (listed["tags"], listed["note"]) == (["best", "ppo"], "n")

    def refusal(msg: protocol.AnnotateRun) -> protocol.Error:
        reply = engine.reply_to(engine.send(msg))
        assert isinstance(reply, protocol.Error)
        return reply

    unknown = refusal(protocol.AnnotateRun(run_id="nope", tags=["x"]))
    assert unknown.message == "There is no run 'nope' in this project."
    # Commas make more tags than the message carried: the store counts them.
    crowded = refusal(
        protocol.AnnotateRun(
            run_id=run_id, tags=[",".join("abcdefghijk"), ",".join("lmnopqrstuv")]
        )
    )
    assert (crowded.field, crowded.message) == (
        "tags",
        "A run can have at most 20 tags, not 22.",
    )
    long_note = refusal(protocol.AnnotateRun(run_id=run_id, note="n" * 5001))
    # Beyond what the message may carry: refused as it is read.
    assert long_note.field == "note"
    assert long_note.message.endswith("is longer than 5,000 characters.")
    (kept,) = engine.call(protocol.ListRuns())["runs"]
    assert (kept["tags"], kept["note"]) == (["best", "ppo"], "n")
