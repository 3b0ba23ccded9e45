"""Bookkeeping of runs in the Training workspace: training runs apart from
the Activity (previews, plays, evaluations, exports, downloads, the
self-test); a Steps column that never counts bytes; live Steps, Best and
Duration while a resumed run trains; one model per run across stop and
resume; log lines read again from disk with the times they were written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from engine import contract
from studio.common import JsonPreview, run_duration
from studio.engine_client import EngineClient
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from studio.training.workspace import TrainingWorkspace, best_reward, run_steps
from widgets.log_console import LogConsole


def test_log_lines_carry_the_time_they_were_written(tmp_path: Path) -> None:
    when = 1_700_000_000.25
    line = contract.log_line("[train] step 5", when)
    assert line.endswith(" [train] step 5")
    assert contract.parse_log_line(line) == (when, "[train] step 5")
    # A line the job wrote itself (detached), or a hand-written one.
    assert contract.parse_log_line("Traceback (most recent call last):") == (
        None,
        "Traceback (most recent call last):",
    )
    assert contract.parse_log_line("2024-13-45 99:99:99.000 odd") == (
        None,
        "2024-13-45 99:99:99.000 odd",
    )
    log = tmp_path / "log.txt"
    log.write_text(
        contract.log_line("first", when) + "\n" + "bare\rwith a return\n"
        + contract.log_line("last", when + 1) + "\n",
        newline="",
    )  # fmt: skip
    assert contract.read_log(log) == [
        (when, "first"),
        (None, "bare\rwith a return"),
        (when + 1, "last"),
    ]
    assert contract.read_log(log, max_lines=1) == [(when + 1, "last")]
    assert contract.read_log(tmp_path / "missing.txt") == []


def test_the_console_shows_reloaded_lines_at_their_own_time(qtbot) -> None:
    console = LogConsole()
    qtbot.addWidget(console)
    hour_ago = time.time() - 3600
    console.append_timed_lines([(hour_ago, "trained"), (None, "raw output")])
    first, second = console.text().splitlines()
    assert first == f"{time.strftime('%H:%M:%S', time.localtime(hour_ago))} trained"
    assert second.strip() == "raw output" and second.startswith(" " * 8)


def test_steps_and_best_are_live_while_a_resumed_run_trains() -> None:
    resumed = {
        "kind": "rl.train",
        "status": "running",
        "progress_done": 1500.0,
        "summary": {"total_steps": 1000, "best_eval_reward": 20.0},
        "best_eval_live": 35.0,
    }
    assert run_steps(resumed) == 1500 and best_reward(resumed) == 35.0
    # The earlier best stands until the resumed part beats it.
    assert best_reward({**resumed, "best_eval_live": 12.0}) == 20.0
    ended = {**resumed, "status": "stopped", "summary": {"total_steps": 1600}}
    assert run_steps(ended) == 1600 and best_reward(ended) == 35.0
    # A flow's progress counts nodes, not steps.
    flow_run = {"kind": "flow.run", "status": "running", "progress_done": 3.0}
    assert run_steps(flow_run) == 0


def test_a_resumed_run_s_duration_goes_on_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text('{"step": 10, "time": 55.0, "x": 1}\n')

    def row(started: float, ended: float) -> dict:
        return {"id": "r", "kind": "rl.train", "name": "r", "status": "stopped",
                "started": started, "ended": ended, "config": {},
                "run_dir": str(run_dir)}  # fmt: skip

    def snapshot(state: ProjectState, started: float, ended: float) -> None:
        state.load_snapshot(
            {"path": "/p", "name": "p", "runs": [row(started, ended)]}  # type: ignore[typeddict-item,list-item]
        )

    state = ProjectState()
    snapshot(state, 1000.0, 1060.0)
    assert run_duration(state.runs["r"]) == 60.0  # its metrics say 55 s
    state.on_run_started("r", "rl.train", "r", str(run_dir))
    run = state.runs["r"]
    assert run["prior_duration_s"] == 60.0
    assert 60.0 <= (run_duration(run) or 0) < 60.0 + 60
    # The resumed attempt trains 30 s more; the engine's clock goes on from
    # the last row of the first attempt (a torn last line is skipped).
    with metrics.open("a") as fh:
        fh.write('{"step": 20, "time": 84.5}\n{"step": 2')
    snapshot(state, 2000.0, 2030.0)
    assert run_duration(state.runs["r"]) == 84.5
    # The studio restarts: the same Duration, from what the project keeps.
    again = ProjectState()
    snapshot(again, 2000.0, 2030.0)
    assert run_duration(again.runs["r"]) == 84.5
    # A run with no metrics: its last attempt.
    metrics.unlink()
    fresh = ProjectState()
    snapshot(fresh, 2000.0, 2030.0)
    assert run_duration(fresh.runs["r"]) == 30.0


def make_workspace(qtbot, tmp_path: Path, runs: list[dict]) -> TrainingWorkspace:  # type: ignore[no-untyped-def]
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    state = ProjectState()
    session = Session(EngineClient(), state, settings)  # never started
    ws = TrainingWorkspace(session)
    qtbot.addWidget(ws)
    state.load_snapshot({"path": str(tmp_path), "name": "p", "runs": runs})  # type: ignore[typeddict-item]
    return ws


def test_training_runs_and_activity_are_listed_apart(qtbot, tmp_path: Path) -> None:
    def row(run_id: str, kind: str, **extra: object) -> dict:
        base = {"id": run_id, "kind": kind, "name": run_id, "status": "completed"}
        return {**base, "config": {}, "started": 100.0, "ended": 160.0, **extra}

    download = row(
        "download", "hub.download", progress_done=3e9, reason="Downloaded org/x."
    )
    runs = [
        row("ppo", "rl.train", summary={"total_steps": 5000}),
        row("flow", "flow.run"),
        row("preview", "env_preview"),
        download,
        row("selftest", "selftest"),
        row("export", "export.ollama"),
    ]
    ws = make_workspace(qtbot, tmp_path, runs)
    # Rows are in the order of the sorted column (the name, descending).
    assert [r["id"] for r in ws.table.model.records] == ["ppo", "flow"]
    assert [r["id"] for r in ws.activity.model.records] == [
        "selftest",
        "preview",
        "export",
        "download",
    ]

    # The Steps column is the training list's only: a download's bytes
    # never show as steps.
    def headers(table) -> list[str]:  # type: ignore[no-untyped-def]
        model = table.view.model()
        return [
            model.headerData(i, Qt.Orientation.Horizontal)
            for i in range(model.columnCount())
        ]

    assert "Steps" in headers(ws.table) and "Steps" not in headers(ws.activity)
    assert headers(ws.activity)[:2] == ["Name", "What"]
    model = ws.activity.model
    row_of = {r["id"]: i for i, r in enumerate(model.records)}
    what = model.data(model.index(row_of["download"], 1))
    outcome = model.data(model.index(row_of["download"], 5))
    assert (what, outcome) == ("Hub download", "Downloaded org/x.")
    # Selecting in the Activity list shows that run; controls follow it.
    ws.show_run("download")
    assert ws.current_table() is ws.activity
    assert [r["id"] for r in ws.selected_runs()] == ["download"]
    assert ws.details.toPlainText().count('"hub.download"') == 1
    ws.show_run("ppo")
    assert ws.current_table() is ws.table
    assert [r["id"] for r in ws.selected_runs()] == ["ppo"]
    # A new preview does not leave the training list.
    ws._state.on_run_started("new-preview", "env_preview", "Preview maze", "")
    assert ws.current_table() is ws.table
    assert "new-preview" in {r["id"] for r in ws.activity.model.records}
    assert "new-preview" not in {r["id"] for r in ws.table.model.records}


@pytest.mark.slow
def test_a_resumed_run_shows_live_steps_best_and_keeps_one_model(
    qtbot, tmp_path: Path
) -> None:
    from studio_harness import build_main_window, start_on_project

    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.show()
    win.set_workspace("training")
    training = win.training
    session = win.session
    state = session.state
    try:
        started: list[str] = []
        session.start_run(
            "rl.train",
            {
                "env": "CartPole-v1",
                "algo": "PPO",
                "total_steps": 1_000_000,
                "n_envs": 1,
                "eval_every_steps": 128,
                "eval_episodes": 1,
                "checkpoint_every_steps": 256,
                "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
            },
            on_started=started.append,
        )
        qtbot.waitUntil(lambda: bool(started), timeout=30_000)
        (run_id,) = started
        qtbot.waitUntil(
            lambda: (
                run_steps(state.run(run_id) or {}) >= 512
                and best_reward(state.run(run_id) or {}) is not None
            ),
            timeout=120_000,
        )
        session.stop_run(run_id)
        qtbot.waitUntil(
            lambda: (state.run(run_id) or {}).get("status") == "stopped",
            timeout=60_000,
        )
        qtbot.waitUntil(lambda: bool(state.models), timeout=30_000)
        (model,) = [m for m in state.models if m["source_run"] == run_id]
        stopped_at = run_steps(state.run(run_id) or {})
        assert (state.run(run_id) or {})["summary"]["total_steps"] == stopped_at

        session.resume_run(run_id)
        qtbot.waitUntil(
            lambda: (state.run(run_id) or {}).get("status") == "running",
            timeout=30_000,
        )
        # The row shows the resumed run's own steps, not the stopped
        # attempt's summary; its best and duration are live too.
        qtbot.waitUntil(
            lambda: run_steps(state.run(run_id) or {}) > stopped_at + 256,
            timeout=120_000,
        )
        run = state.run(run_id) or {}
        assert run["summary"]["total_steps"] == stopped_at  # still the old one
        table = training.table
        row = next(i for i, r in enumerate(table.model.records) if r["id"] == run_id)
        shown = table.model.data(table.model.index(row, 4))
        assert int(shown.replace(",", "")) > stopped_at
        assert best_reward(run) is not None
        assert table.model.data(table.model.index(row, 5)) != ""
        qtbot.waitUntil(
            lambda: table.model.data(table.model.index(row, 6)) not in ("", None),
            timeout=10_000,
        )
        session.stop_run(run_id)
        qtbot.waitUntil(
            lambda: (state.run(run_id) or {}).get("status") == "stopped",
            timeout=60_000,
        )
        # One model per run: the resumed run updated the one it registered.
        qtbot.waitUntil(
            lambda: any(
                m["id"] == model["id"] and m["created"] > model["created"]
                for m in state.models
            ),
            timeout=30_000,
        )
        assert [m["id"] for m in state.models if m["source_run"] == run_id] == [
            model["id"]
        ]

        # Read again from disk (a new view of the project), the log keeps
        # the times its lines were written.
        log = contract.read_log(
            Path((state.run(run_id) or {})["run_dir"]) / contract.LOG_FILE, 500
        )
        first_time, first_text = next((t, x) for t, x in log if t is not None)
        qtbot.waitUntil(lambda: time.time() - first_time > 2, timeout=10_000)
        again = TrainingWorkspace(session)
        qtbot.addWidget(again)
        again.show_run(run_id)
        stamp = time.strftime("%H:%M:%S", time.localtime(first_time))
        assert f"{stamp} {first_text}" in again.run_log.text().splitlines()
    finally:
        session.client.stop()


def test_a_burst_of_progress_updates_a_listed_row_once(qtbot, tmp_path: Path) -> None:
    """Progress comes many times a second per run, in bursts after the GUI
    was busy: a listed run's row is brought up to date once per turn of the
    event loop (issue 16's stalls); a new status shows at once."""
    run = {"id": "ppo", "kind": "rl.train", "name": "ppo", "status": "running"}
    ws = make_workspace(qtbot, tmp_path, [{**run, "config": {}, "started": 1.0}])
    state = ws._state
    state.on_run_progress("ppo", 10, 1000, 5.0, 10.0)  # its status: shown now
    updates: list[str] = []
    original = ws.table.update_record

    def counting(record: dict) -> None:
        updates.append(record["id"])
        original(record)

    ws.table.update_record = counting  # type: ignore[method-assign]
    for done in range(20, 520, 10):
        state.on_run_progress("ppo", done, 1000, 5.0, 10.0)
    assert updates == []  # nothing yet: once, on the next turn
    qtbot.waitUntil(lambda: updates == ["ppo"], timeout=5000)
    assert ws.table.model.records[0]["progress_done"] == 510
    state.runs["ppo"]["status"] = "stopped"
    state.notify("run", "ppo")
    assert updates == ["ppo", "ppo"]  # a new status at once


def test_details_show_a_run_s_name_as_written(qtbot, tmp_path: Path) -> None:
    """A run's name carries a middle dot ("PPO CartPole-v1 · calm-heron"):
    the Details JSON shows it, not its escape."""
    view = JsonPreview()
    qtbot.addWidget(view)
    name = "PPO CartPole-v1 · calm-heron"
    view.show_value({"name": name})
    assert f'"name": "{name}"' in view.toPlainText()
    saved = tmp_path / "config.json"
    saved.write_text('{"name": "PPO CartPole-v1 \\u00b7 calm-heron"}', "utf-8")
    view.show_file(saved)
    assert f'"name": "{name}"' in view.toPlainText()
