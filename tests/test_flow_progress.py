"""Long flow steps report their counts (issue 29, item 4): a real before/after
evaluation of a tiny language model counts episodes on its node and on the
flow's bar, and the studio's Output list says "running" with the node's
counts while the node draws progress (a real engine, a CartPole flow)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
from test_flow_editor_run import build_cartpole, live  # noqa: F401 (fixture)
from tiny_models import build_tiny_model

from engine import flow, protocol
from engine.jobs.context import JobContext
from engine.nodes import executor
from engine.store.project import Project
from resources import resource_path
from widgets.run_progress import format_progress

ENV = "rlstudio/jira_issue_resolution-v0"
COUNTS = re.compile(r"(\d+) / (\d+) episodes")


class RecordingContext(JobContext):
    """The flow run's context, keeping every progress report."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__("r1", run_dir, "flow.run", {}, events=io.StringIO())
        self.reports: list[tuple[float, float, str]] = []

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        self.reports.append((done, total, message))


def evaluation_flow(model: Path) -> flow.FlowDocument:
    """Env and base model into a before/after evaluation, shrunk to seconds."""
    return flow.FlowDocument.from_dict(
        {
            "format": 1,
            "kind": "flow",
            "name": "t",
            "nodes": [
                {"id": "env", "type": "env.environment", "params": {"env": ENV}},
                {
                    "id": "base",
                    "type": "llm.base_model",
                    "params": {"model": str(model)},
                },
                {
                    "id": "evaluate",
                    "type": "llm.evaluate",
                    "params": {
                        "episodes": 3,
                        "num_envs": 1,
                        "max_steps": 1,
                        "max_new_tokens": 2,
                        "seed": 0,
                    },
                },
            ],
            "links": [
                {
                    "from": {"node": "env", "port": "env"},
                    "to": {"node": "evaluate", "port": "env"},
                },
                {
                    "from": {"node": "base", "port": "model"},
                    "to": {"node": "evaluate", "port": "model"},
                },
                {
                    "from": {"node": "base", "port": "model"},
                    "to": {"node": "evaluate", "port": "baseline"},
                },
            ],
        }
    )


def test_a_before_after_evaluation_counts_its_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every running state reaches the listener (the engine sends at most 4 a
    # second; a tiny evaluation is faster than that).
    monkeypatch.setattr(executor, "PROGRESS_INTERVAL_S", 0.0)
    project = tmp_path / "project"
    Project.open(project, create=True, examples=resource_path("examples")).close()
    doc = evaluation_flow(build_tiny_model(tmp_path / "tiny"))
    run_dir = project / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ctx = RecordingContext(run_dir)
    states: list[tuple[str, float, str]] = []

    def on_state(event: protocol.FlowNodeState) -> None:
        if event.node_id == "evaluate":
            states.append((event.state, event.progress, event.message))

    try:
        summary = executor.run_flow(ctx, doc, flow_name="t", on_state=on_state)
    finally:
        ctx.close()
    assert summary["status"] == "completed", summary.get("reason")
    # before, after, and the random and expert references: 3 episodes each
    running = [(p, m) for s, p, m in states if s == "running" and COUNTS.search(m)]
    counts = [tuple(map(int, COUNTS.search(m).groups())) for _, m in running]
    assert {total for _, total in counts} == {12}
    done = [d for d, _ in counts]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 12
    assert len(set(done)) >= 8  # one report per episode, not one per model
    fractions = [p for p, _ in running]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any("evaluating before" in m for _, m in running)
    assert states[-1][0] == "done"
    # The flow's bar: node counts move within the evaluation, and say what
    # the evaluation has done of its own episodes.
    evaluating = [(d, m) for d, _, m in ctx.reports if "episodes" in m]
    assert all(m.startswith("Evaluate language-model policy: ") for _, m in evaluating)
    flow_done = [d for d, _ in evaluating]
    assert flow_done == sorted(flow_done) and 2 <= flow_done[0] < flow_done[-1] <= 3
    last = next(m for _, m in reversed(evaluating) if "expert" in m)
    assert format_progress(2, 3, 0.01, 40.0, "nodes", last) == (
        "2 / 3 nodes · Evaluate language-model policy: evaluating expert · "
        "12 / 12 episodes · ETA 0:40"
    )


def test_the_output_list_says_running_with_counts_while_a_node_draws_progress(
    qtbot,
    live,  # noqa: F811 (the fixture imported above)
) -> None:
    ws, _project = live
    build_cartpole(qtbot, ws, total_steps="50000")
    ws.editor.canvas.select_nodes([])
    ws.show_flow_overview()
    seen: list[tuple[str, str, float]] = []

    def on_state(run_id: str, node_id: str, state: str, progress: float, *_: Any):
        seen.append((node_id, state, progress))

    def train_draws_progress() -> None:
        assert any(n == "train" and p > 0 for n, _, p in seen), (
            seen[-3:],
            ws.editor.status_label.text(),
        )

    ws.controller.node_state_received.connect(on_state)
    ws.flow_actions["run"].trigger()
    qtbot.waitUntil(train_draws_progress, timeout=60_000)
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        ws.grab().save(str(Path(shots) / "flow-output-progress.png"))
    # the badge draws progress, and the list agrees with it, with counts
    assert ws.editor.canvas.node_state("train")[0] == "running"
    text = " ".join(ws.details.output_view.toPlainText().split())
    row = text[text.index("(train)") : text.index("(evaluate)")]  # a table row
    assert "running" in row and "queued" not in row, row
    assert re.search(r"[\d,]+ / 50,000 steps", row), row
    assert text[text.index("(evaluate)") :].split()[1] == "queued", text
    with qtbot.waitSignal(ws.watcher.run_finished, timeout=60_000):
        ws.cancel_run()
