"""A flow node's cache key includes what it reads outside the graph
(engine.nodes.executor, the ``sources`` of a node type): labels set between
two runs make the dataset node run again and the flow say why; a run with
nothing changed reuses it. Real flows, an expert's traces, real sqlite."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine import flow
from engine.jobs.context import JobContext
from engine.nodes import executor
from engine.store.labels import Label, LabelStore, fingerprint, step_key
from engine.store.project import Project
from resources import resource_path

DOC = flow.FlowDocument(
    name="t",
    nodes=[
        flow.Node("env", "env.environment", {"env": "jira_status_update"}),
        flow.Node(
            "expert",
            "llm.collect",
            {"policy": "expert", "noise": 0.3, "episodes": 4, "max_steps": 12},
        ),
        flow.Node("dataset", "llm.dataset", {"method": "kto", "seed": 0}),
    ],
    links=[
        flow.Link("env", "env", "expert", "env"),
        flow.Link("expert", "trajectories", "dataset", "trajectories"),
    ],
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    Project.open(folder, create=True, examples=resource_path("examples")).close()
    return folder


def run(project: Path, run_id: str) -> dict[str, Any]:
    run_dir = project / "runs" / run_id
    run_dir.mkdir(parents=True)
    ctx = JobContext(run_id, run_dir, "flow.run", {}, events=io.StringIO())
    try:
        return executor.run_flow(ctx, DOC, flow_name="t")
    finally:
        ctx.close()


def label_every_step(project: Path, trace_file: str) -> int:
    """Marks each step of the trace good or bad; returns how many."""
    name = Path(trace_file).stem
    episodes = [json.loads(line) for line in Path(trace_file).read_text().splitlines()]
    labels = [
        Label(
            kind="kto",
            trace=name,
            episode=e,
            step=s,
            key=step_key(step),
            value="good" if s % 2 else "bad",
            who="test",
        )
        for e, ep in enumerate(episodes)
        for s, step in enumerate(ep["steps"])
    ]
    store = LabelStore(project, who="test")
    try:
        return store.set_many(labels)
    finally:
        store.close()


def test_labels_set_between_runs_make_the_dataset_node_run_again(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(project, "r1")
    assert first["nodes"]["dataset"]["state"] == "done"
    trace = first["nodes"]["expert"]["outputs"]["trajectories"]["file"]
    assert run(project, "r2")["nodes"]["dataset"]["state"] == "cached"
    capsys.readouterr()

    n = label_every_step(project, trace)
    assert n > 0
    again = run(project, "r3")
    dataset = again["nodes"]["dataset"]
    assert dataset["state"] == "done"
    assert dataset["message"].endswith(f"(ran again: labels changed ({n} new)).")
    assert f"labels changed ({n} new); running it again" in capsys.readouterr().err
    # the labels were used, and only the dataset ran again
    stats = dataset["outputs"]["dataset"]["stats"]
    assert first["nodes"]["dataset"]["outputs"]["dataset"]["stats"]["manual_rows"] == 0
    assert stats["manual_rows"] == n
    assert again["nodes"]["expert"]["state"] == "cached"

    unchanged = run(project, "r4")["nodes"]["dataset"]
    assert unchanged["state"] == "cached"
    assert unchanged["message"].startswith("Unchanged since run r3")


def test_the_labels_fingerprint_follows_content_of_the_traces_read(
    tmp_path: Path,
) -> None:
    from engine.store.labels import DB_FILE, StepRef

    assert fingerprint(tmp_path, ["a"]) == {"rows": 0, "digest": ""}
    assert not (tmp_path / DB_FILE).exists()  # reading creates nothing
    store = LabelStore(tmp_path, who="test")
    try:
        store.set("kto", StepRef("a", 0, 0, "k0"), "good")
        one = fingerprint(tmp_path, ["a"])
        other = fingerprint(tmp_path, ["b"])
        store.set("kto", StepRef("b", 0, 0, "k0"), "good")
        assert fingerprint(tmp_path, ["b"]) != other  # b's labels changed
        assert fingerprint(tmp_path, ["a"]) == one  # a's did not
        store.set("kto", StepRef("a", 0, 0, "k0"), "bad")  # same count
        edited = fingerprint(tmp_path, ["a"])
        assert edited["rows"] == one["rows"] == 1 and edited != one
    finally:
        store.close()


def test_the_reason_names_what_changed(tmp_path: Path) -> None:
    def entry(**record: Any) -> None:
        base = {"type": "x", "version": 1, "params": {"seed": 0}, "inputs": {}}
        (tmp_path / "n.json").write_text(json.dumps({"record": {**base, **record}}))

    now = executor.cache_record("x", 1, {"seed": 1}, {}, {"labels": {"rows": 3}})
    assert executor.rerun_reason(tmp_path, "n", now) is None  # no entry
    entry(sources={"labels": {"rows": 5}})
    assert executor.rerun_reason(tmp_path, "n", now) == (
        "labels changed (2 removed); parameters changed (seed)"
    )
    entry(params={"seed": 1}, sources={"labels": {"rows": 3, "digest": "old"}})
    assert executor.rerun_reason(tmp_path, "n", now) == "labels changed"
    entry(params={"seed": 1}, version=2, sources={"labels": {"rows": 3}})
    assert executor.rerun_reason(tmp_path, "n", now) == "its implementation changed"
