"""The real engine subprocess: handshake, bad input, job lifecycle, kills."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_harness import EngineProcess

from engine import protocol


@pytest.fixture
def engine() -> Iterator[EngineProcess]:
    proc = EngineProcess()
    yield proc
    proc.close()


@pytest.fixture
def opened(engine: EngineProcess, project_dir: Path) -> EngineProcess:
    engine.call(protocol.Hello())
    engine.call(protocol.OpenProject(path=str(project_dir), create=True))
    return engine


def is_event(cls: type, run_id: str):
    return lambda m: isinstance(m, cls) and m.run_id == run_id


def test_handshake_reports_version_and_job_kinds(engine: EngineProcess) -> None:
    result = engine.call(protocol.Hello())
    assert result["protocol_version"] == protocol.PROTOCOL_VERSION
    assert "selftest" in result["job_kinds"]
    assert result["pid"] == engine.proc.pid


def test_a_wrong_protocol_version_is_refused(engine: EngineProcess) -> None:
    reply = engine.reply_to(engine.send(protocol.Hello(protocol_version=99)))
    assert isinstance(reply, protocol.Error)
    assert "protocol 99" in reply.message and reply.message.endswith("match.")


def test_malformed_lines_get_errors_and_the_engine_keeps_serving(
    engine: EngineProcess,
) -> None:
    engine.send_line("this is not json")
    err = engine.wait_for(lambda m: isinstance(m, protocol.Error))
    assert err.message.startswith("Malformed message") and err.reply_to is None
    engine.send_line('{"v":1,"type":"run.stop","id":"x1","timeout_s":"soon"}')
    err = engine.reply_to("x1")
    assert isinstance(err, protocol.Error) and "wrong type" in err.message
    engine.send_line('{"v":1,"type":"teleport","id":"x2"}')
    err = engine.reply_to("x2")
    assert isinstance(err, protocol.Error)
    assert err.error_type == "UnknownRequest" and "'teleport'" in err.message
    assert engine.call(protocol.Ping(payload="still here")) == {"payload": "still here"}
    # Every line on stdout was a protocol message: nothing stray leaked in.
    for line in engine.raw_lines:
        protocol.decode(line)


def test_events_sent_as_requests_are_refused(engine: EngineProcess) -> None:
    engine.send_line(protocol.encode(protocol.RunLog(run_id="x")))
    err = engine.wait_for(lambda m: isinstance(m, protocol.Error))
    assert "not a request" in err.message


def test_project_errors_are_one_sentence(engine: EngineProcess, tmp_path: Path) -> None:
    reply = engine.reply_to(
        engine.send(protocol.OpenProject(path=str(tmp_path / "nope")))
    )
    assert isinstance(reply, protocol.Error)
    assert reply.message == f"The project folder {tmp_path / 'nope'} does not exist."
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        reply = engine.reply_to(
            engine.send(protocol.OpenProject(path=str(ro), create=True))
        )
    finally:
        ro.chmod(0o755)
    assert isinstance(reply, protocol.Error) and "read-only" in reply.message
    reply = engine.reply_to(engine.send(protocol.StartRun(kind="selftest")))
    assert isinstance(reply, protocol.Error) and "No project is open" in reply.message


def test_bad_run_requests_name_the_problem(opened: EngineProcess) -> None:
    reply = opened.reply_to(opened.send(protocol.StartRun(kind="warp")))
    assert (
        isinstance(reply, protocol.Error) and "Unknown job kind 'warp'" in reply.message
    )
    reply = opened.reply_to(
        opened.send(protocol.StartRun(kind="selftest", config={"steps": -1}))
    )
    assert isinstance(reply, protocol.Error) and reply.message.startswith(
        "steps must be"
    )
    reply = opened.reply_to(opened.send(protocol.StopRun(run_id="ghost")))
    assert isinstance(reply, protocol.Error) and "no run 'ghost'" in reply.message


def test_a_run_completes_with_metrics_progress_and_log(
    opened: EngineProcess, project_dir: Path
) -> None:
    run_id = opened.call(
        protocol.StartRun(kind="selftest", config={"steps": 60, "step_seconds": 0.005})
    )["run_id"]
    started = opened.wait_for(is_event(protocol.RunStarted, run_id))
    assert started.pid > 0
    finished = opened.wait_for(is_event(protocol.RunFinished, run_id))
    assert finished.status == "completed" and finished.summary == {"steps": 60}
    run_dir = project_dir / "runs" / run_id
    rows = [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == list(range(1, 61))
    assert "self-test: 60 steps" in (run_dir / "log.txt").read_text()
    runs = opened.call(protocol.ListRuns())["runs"]
    assert runs[0]["status"] == "completed" and runs[0]["id"] == run_id


def test_sigkill_of_a_job_is_reported_and_everything_stays_usable(
    opened: EngineProcess,
) -> None:
    run_id = opened.call(
        protocol.StartRun(
            kind="selftest", config={"steps": 100_000, "step_seconds": 0.01}
        )
    )["run_id"]
    started = opened.wait_for(is_event(protocol.RunStarted, run_id))
    opened.wait_for(is_event(protocol.RunMetrics, run_id))  # it is really running
    os.kill(started.pid, signal.SIGKILL)
    failed = opened.wait_for(is_event(protocol.RunFailed, run_id))
    assert failed.signal == signal.SIGKILL and failed.exit_code is None
    assert "SIGKILL" in failed.reason and "out of memory" in failed.reason
    assert any("self-test" in line for line in failed.last_log_lines)
    assert opened.call(protocol.Ping(payload="ok")) == {"payload": "ok"}
    runs = {r["id"]: r for r in opened.call(protocol.ListRuns())["runs"]}
    assert (
        runs[run_id]["status"] == "failed" and runs[run_id]["signal"] == signal.SIGKILL
    )
    # ... and a new run still works after the failure.
    again = opened.call(
        protocol.StartRun(kind="selftest", config={"steps": 5, "step_seconds": 0})
    )["run_id"]
    assert opened.wait_for(is_event(protocol.RunFinished, again)).status == "completed"


def test_a_crashing_job_reports_its_exception(opened: EngineProcess) -> None:
    run_id = opened.call(
        protocol.StartRun(
            kind="selftest", config={"steps": 50, "fail_at_step": 7, "step_seconds": 0}
        )
    )["run_id"]
    failed = opened.wait_for(is_event(protocol.RunFailed, run_id))
    assert failed.exit_code == 1 and failed.signal is None
    assert "self-test failure requested at step 7" in failed.reason


def test_cooperative_stop_then_resume_continues(
    opened: EngineProcess, project_dir: Path
) -> None:
    run_id = opened.call(
        protocol.StartRun(kind="selftest", config={"steps": 400, "step_seconds": 0.01})
    )["run_id"]
    opened.wait_for(
        lambda m: (
            isinstance(m, protocol.RunProgress) and m.run_id == run_id and m.done >= 60
        )
    )
    opened.call(protocol.StopRun(run_id=run_id))
    finished = opened.wait_for(is_event(protocol.RunFinished, run_id))
    assert finished.status == "stopped"
    stopped_at = finished.summary["steps"]
    assert 60 <= stopped_at < 400
    opened.call(protocol.ResumeRun(run_id=run_id))
    again = opened.wait_for(is_event(protocol.RunFinished, run_id))
    assert again.status == "completed" and again.summary == {"steps": 400}
    steps = [
        json.loads(x)["step"]
        for x in (project_dir / "runs" / run_id / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    assert steps == list(range(1, 401))  # continuous across the stop


def test_a_job_that_ignores_stop_is_terminated_after_the_timeout(
    opened: EngineProcess, project_dir: Path
) -> None:
    run_id = opened.call(
        protocol.StartRun(
            kind="selftest",
            config={"steps": 100_000, "step_seconds": 0.01, "ignore_stop": True},
        )
    )["run_id"]
    opened.wait_for(is_event(protocol.RunMetrics, run_id))
    opened.call(protocol.StopRun(run_id=run_id, timeout_s=0.5))
    finished = opened.wait_for(is_event(protocol.RunFinished, run_id), timeout=20)
    # Killed: its summary is what its checkpoint says, if it saved one yet.
    saved = project_dir / "runs" / run_id / "checkpoints" / "state.json"
    steps = {"steps": json.loads(saved.read_text())["step"]} if saved.exists() else {}
    assert finished.status == "stopped" and finished.summary == {
        **steps,
        "forced": True,
        "stopped_by": "user",
    }
    assert opened.call(protocol.ListRuns())["runs"][0]["summary"] == finished.summary


def test_runs_of_a_killed_engine_show_as_interrupted(project_dir: Path) -> None:
    first = EngineProcess()
    first.call(protocol.OpenProject(path=str(project_dir), create=True))
    run_id = first.call(
        protocol.StartRun(
            kind="selftest",
            config={"steps": 100_000, "step_seconds": 0.01, "ignore_stop": True},
        )
    )["run_id"]
    started = first.wait_for(is_event(protocol.RunStarted, run_id))
    first.wait_for(is_event(protocol.RunMetrics, run_id))
    first.proc.kill()
    first.proc.wait()
    os.kill(
        started.pid, signal.SIGKILL
    )  # the orphan stops on stdin EOF; this one ignores it
    second = EngineProcess()
    try:
        snap = second.call(protocol.OpenProject(path=str(project_dir)))
        run = next(r for r in snap["runs"] if r["id"] == run_id)
        assert run["status"] == "interrupted"
    finally:
        second.close()


def test_shutdown_stops_running_jobs_and_exits(project_dir: Path) -> None:
    engine = EngineProcess()
    engine.call(protocol.OpenProject(path=str(project_dir), create=True))
    run_id = engine.call(
        protocol.StartRun(
            kind="selftest", config={"steps": 100_000, "step_seconds": 0.01}
        )
    )["run_id"]
    engine.wait_for(is_event(protocol.RunMetrics, run_id))
    assert engine.close() == 0
    result = json.loads((project_dir / "runs" / run_id / "result.json").read_text())
    assert result["status"] == "stopped"
