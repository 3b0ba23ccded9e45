"""Stops across processes: a job treats SIGINT/SIGTERM as a cooperative stop
with a checkpoint, and ``stopped_by`` says truthfully who stopped it."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from engine_harness import EngineProcess

from engine import protocol
from engine.store.project import Project

SLOW_SELFTEST = {"steps": 100_000, "step_seconds": 0.01}


def is_event(cls: type, run_id: str) -> Any:
    return lambda m: isinstance(m, cls) and m.run_id == run_id


@pytest.fixture
def engine(project_dir: Path) -> Iterator[EngineProcess]:
    proc = EngineProcess()
    proc.call(protocol.OpenProject(path=str(project_dir), create=True))
    yield proc
    proc.close()


def start(engine: EngineProcess, kind: str, config: dict[str, Any]) -> tuple[str, int]:
    """Start a run; returns its id and job pid once it reports metrics."""
    run_id = engine.call(protocol.StartRun(kind=kind, config=config))["run_id"]
    started = engine.wait_for(is_event(protocol.RunStarted, run_id))
    engine.wait_for(is_event(protocol.RunMetrics, run_id), timeout=120)
    return run_id, started.pid


def stored_run(project_dir: Path, run_id: str) -> dict[str, Any]:
    project = Project.open(project_dir)
    try:
        return project.get_run(run_id).to_dict()
    finally:
        project.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_job_is_a_cooperative_stop(
    engine: EngineProcess, project_dir: Path, sig: signal.Signals
) -> None:
    run_id, pid = start(engine, "selftest", SLOW_SELFTEST)
    os.kill(pid, sig)
    finished = engine.wait_for(is_event(protocol.RunFinished, run_id))
    assert finished.status == "stopped" and finished.summary["stopped_by"] == "signal"
    log = (project_dir / "runs" / run_id / "log.txt").read_text()
    assert f"stopping: saving a checkpoint ({sig.name} again to abort)" in log


def test_a_second_engine_stopping_a_run_records_the_user(
    engine: EngineProcess, project_dir: Path
) -> None:
    """The other engine signals the job (it is not its child) and says who
    asked in the run folder."""
    run_id, _ = start(engine, "selftest", SLOW_SELFTEST)
    other = EngineProcess()
    try:
        other.call(protocol.OpenProject(path=str(project_dir)))
        other.call(protocol.StopRun(run_id=run_id))
    finally:
        other.close()
    finished = engine.wait_for(is_event(protocol.RunFinished, run_id))
    assert finished.status == "stopped" and finished.summary["stopped_by"] == "user"
    assert stored_run(project_dir, run_id)["status"] == "stopped"


@pytest.mark.parametrize(
    ("how", "reason"),
    [("stop", "user"), ("restart", "engine_restart")],
)
def test_stopped_by_says_who_stopped_the_run(
    project_dir: Path, how: str, reason: str
) -> None:
    engine = EngineProcess()
    engine.call(protocol.OpenProject(path=str(project_dir), create=True))
    run_id, _ = start(engine, "selftest", SLOW_SELFTEST)
    if how == "stop":
        engine.call(protocol.StopRun(run_id=run_id))
        engine.wait_for(is_event(protocol.RunFinished, run_id))
        engine.close()
    else:
        engine.send(protocol.Shutdown(restart=True))  # as EngineClient.restart
        engine.proc.stdin.close()  # type: ignore[union-attr]
        assert engine.proc.wait(30) == 0
    result = json.loads((project_dir / "runs" / run_id / "result.json").read_text())
    assert result["status"] == "stopped"
    assert result["summary"]["stopped_by"] == reason


def test_a_run_whose_studio_died_keeps_training_and_a_new_studio_stops_it(
    project_dir: Path,
) -> None:
    """The studio's pipe closes without ``shutdown``: the engine detaches its
    runs and exits; the job trains on headless, keeping its progress and log;
    a new engine shows it running and stops it, and the job records its end."""
    first = EngineProcess()
    first.call(protocol.OpenProject(path=str(project_dir), create=True))
    run_id, pid = start(first, "selftest", SLOW_SELFTEST)
    first.proc.stdin.close()  # type: ignore[union-attr]  # the studio died
    assert first.proc.wait(30) == 0
    os.kill(pid, 0)  # still alive
    metrics = project_dir / "runs" / run_id / "metrics.jsonl"
    rows = len(metrics.read_text().splitlines())
    second = EngineProcess()
    try:
        snap = second.call(protocol.OpenProject(path=str(project_dir)))
        (run,) = [r for r in snap["runs"] if r["id"] == run_id]
        assert run["status"] == "running" and run["pid"] == pid
        job = psutil.Process(pid)
        second.call(protocol.StopRun(run_id=run_id))
        job.wait(30)  # it records its end before it exits
    finally:
        second.close()
    record = stored_run(project_dir, run_id)
    assert record["status"] == "stopped"
    assert record["summary"]["stopped_by"] == "user"
    assert record["summary"]["steps"] > rows  # it trained while alone
    assert record["progress_done"] > 0
    log = (project_dir / "runs" / run_id / "log.txt").read_text()
    assert "stopping: saving a checkpoint (SIGINT again to abort)" in log


def test_a_studio_quitting_with_keep_runs_leaves_its_runs_training(
    project_dir: Path,
) -> None:
    """Quit → Keep training: the engine's shutdown lets the runs go on
    headless instead of stopping them, and exits."""
    first = EngineProcess()
    first.call(protocol.OpenProject(path=str(project_dir), create=True))
    run_id, pid = start(first, "selftest", SLOW_SELFTEST)
    first.call(protocol.Shutdown(keep_runs=True))
    first.proc.stdin.close()  # type: ignore[union-attr]
    assert first.proc.wait(30) == 0
    job = psutil.Process(pid)
    assert job.is_running() and job.status() != psutil.STATUS_ZOMBIE
    second = EngineProcess()
    try:
        snap = second.call(protocol.OpenProject(path=str(project_dir)))
        (run,) = [r for r in snap["runs"] if r["id"] == run_id]
        assert run["status"] == "running" and run["pid"] == pid
        second.call(protocol.StopRun(run_id=run_id))
        job.wait(30)
    finally:
        second.close()
    record = stored_run(project_dir, run_id)
    assert record["status"] == "stopped"
    assert record["summary"]["stopped_by"] == "user"


@pytest.mark.slow
def test_sigint_to_a_ppo_job_stops_it_with_a_checkpoint_and_it_resumes(
    engine: EngineProcess, project_dir: Path
) -> None:
    config = {
        "env": "CartPole-v1",
        "algo": "PPO",
        "total_steps": 3072,
        "n_envs": 1,
        "seed": 1,
        "eval_every_steps": 0,
        "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
    }
    run_id, pid = start(engine, "rl.train", config)
    os.kill(pid, signal.SIGINT)
    finished = engine.wait_for(is_event(protocol.RunFinished, run_id), timeout=120)
    assert finished.status == "stopped"
    assert finished.summary["stopped_by"] == "signal"
    stopped_at = finished.summary["total_steps"]
    assert 0 < stopped_at < 3072
    checkpoint = (
        project_dir / "runs" / run_id / "checkpoints" / f"step-{stopped_at:010d}"
    )
    assert (checkpoint / "model.zip").is_file()
    engine.call(protocol.ResumeRun(run_id=run_id))
    again = engine.wait_for(is_event(protocol.RunFinished, run_id), timeout=180)
    assert again.status == "completed"
    assert again.summary["stopped_by"] == "steps"
    assert again.summary["total_steps"] >= 3072
    assert stored_run(project_dir, run_id)["status"] == "completed"
