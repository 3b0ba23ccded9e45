"""The trajectory store (``engine.store.trajectories``): a crash between an
end's commit and its trace line, or in the middle of the line, is repaired
when the store opens, without a lost or doubled episode."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.llm.rollouts import iter_traces
from engine.store.trajectories import (
    DB_FILE,
    TrajectoryEndedError,
    TrajectoryStore,
    UnknownTrajectoryError,
)


def recorded(store: TrajectoryStore, agent: str, steps: int) -> str:
    tid = store.start(agent, scenario="s")
    for t in range(steps):
        assert store.add_step(tid, state=[t], action=t, reward=1.0) == t
    store.end(tid, status="completed")
    return tid


def unexport(project: Path, tid: str) -> None:
    """As if the writer died after committing the end."""
    with sqlite3.connect(project / DB_FILE) as db:
        db.execute("UPDATE trajectories SET exported = 0 WHERE id = ?", (tid,))


def test_an_end_whose_line_was_torn_or_never_written_is_written_once(
    tmp_path: Path,
) -> None:
    store = TrajectoryStore(tmp_path)
    first = recorded(store, "bot", 2)
    second = recorded(store, "bot", 3)
    third = recorded(store, "bot", 1)
    store.close()
    trace = tmp_path / "data" / "traces" / "agent-bot.jsonl"
    lines = trace.read_bytes().splitlines(keepends=True)
    # The second's line was cut in the middle; the third's never written.
    trace.write_bytes(lines[0] + lines[1][:25])
    unexport(tmp_path, second)
    unexport(tmp_path, third)
    # The first's line was written but not yet marked: not written again.
    unexport(tmp_path, first)

    store = TrajectoryStore(tmp_path)
    assert store.recovered == [first, second, third]
    episodes = list(iter_traces(trace))
    assert [e["trajectory_id"] for e in episodes] == [first, second, third]
    assert [e["length"] for e in episodes] == [2, 3, 1]
    assert [e["episode"] for e in episodes] == [0, 1, 2]
    assert episodes[1]["steps"][2]["state"] == {"observation": [2]}
    assert all(r["exported"] for r in store.list_trajectories())
    assert TrajectoryStore(tmp_path).recovered == []  # nothing left to do
    assert trace.read_bytes().count(b"\n") == 3


def test_refusals_leave_the_trajectory_as_it_was(tmp_path: Path) -> None:
    store = TrajectoryStore(tmp_path)
    tid = store.start("bot")
    store.add_step(tid, action=0, reward=0.5)
    before = store.get(tid, with_steps=True)
    for kwargs, field in (
        ({"reward": float("nan")}, "reward"),
        ({"state": {"x": float("inf")}}, "state"),
        ({"prompt": [{"role": "user"}]}, "prompt"),
        ({"completion": 5}, "completion"),
        # Checked whole, a step refused still names the first field at
        # fault, in the order the fields were always checked.
        ({"info": {"x": float("nan")}, "completion": 5}, "info"),
        ({"action": "\ud800"}, "action"),
        ({"prompt": [{"role": "user", "content": float("inf")}]}, "prompt"),
    ):
        with pytest.raises(ConfigError) as err:
            store.add_step(tid, **{"action": 1, "reward": 0.0, **kwargs})
        assert err.value.field == field
    with pytest.raises(ConfigError):
        store.end(tid, status="finished")
    assert store.get(tid, with_steps=True) == before
    store.end(tid, status="timeout", total_reward=7.0)
    episode = store.episode(tid)
    assert episode["truncated"] and not episode["success"] and episode["return"] == 7
    with pytest.raises(TrajectoryEndedError):
        store.add_step(tid, action=1, reward=0.0)
    with pytest.raises(UnknownTrajectoryError):
        store.end("t-nope", status="completed")
    line = (tmp_path / "data" / "traces" / "agent-bot.jsonl").read_text()
    assert json.loads(line)["trajectory_id"] == tid


def test_steps_read_back_with_their_index_old_rows_too(tmp_path: Path) -> None:
    """A step's row holds its index as the key alone; rows written when the
    JSON held it too read back the same."""
    store = TrajectoryStore(tmp_path)
    tid = store.start("bot")
    assert store.add_steps(tid, [{"action": a, "reward": 1.0} for a in "ab"]) == 0
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        stored = db.execute("SELECT t, data FROM trajectory_steps").fetchall()
        assert [(t, "t" in json.loads(data)) for t, data in stored] == [
            (0, False),
            (1, False),
        ]
        old = {**json.loads(stored[1][1]), "action": "c", "t": 2}
        db.execute(
            "INSERT INTO trajectory_steps VALUES (?, 2, ?)", (tid, json.dumps(old))
        )
    steps = store.get(tid, with_steps=True)["steps_data"]
    assert [(s["t"], s["action"]) for s in steps] == [(0, "a"), (1, "b"), (2, "c")]
    assert all(list(s)[-1] == "t" for s in steps)  # last, as it always was
