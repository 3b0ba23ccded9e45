"""A run stopped by force records the summary of what it saved, not the one
its previous attempt left in the project (``JobKind.summary_on_disk``,
``engine.jobs.lifecycle.finish_forced``), and so does one whose process
vanished (``engine.jobs.reconcile.reconcile_runs``); a resumed run that fails without a
summary keeps the one it had.

The end-to-end tests drive the real engine subprocess and freeze the job
(SIGSTOP) so that it cannot answer the stop: the supervisor then kills it, as
it kills a job that does not stop in time, whatever the machine's load.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_harness import EngineProcess

from engine import protocol
from engine.jobs import lifecycle, registry
from engine.jobs.context import JobContext
from engine.jobs.reconcile import reconcile_runs
from engine.rl import checkpoints as rlckpt
from engine.run_compare import run_metrics
from engine.store.atomic import atomic_write_json
from engine.store.project import Project
from studio.training.workspace import best_reward, run_steps

PPO_CARTPOLE: dict[str, Any] = {
    "env": "CartPole-v1",
    "algo": "PPO",
    "total_steps": 1_000_000,
    "seed": 5,
    "n_envs": 1,
    "eval_every_steps": 64,
    "eval_episodes": 2,
    "checkpoint_every_steps": 64,
    "hyperparameters": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
}
COOPERATIVE_TIMEOUT_S = 120.0
"""A stop the test means to be cooperative (a loaded machine saves slowly)."""


@pytest.fixture
def opened(project_dir: Path) -> Iterator[EngineProcess]:
    engine = EngineProcess()
    engine.call(protocol.Hello())
    engine.call(protocol.OpenProject(path=str(project_dir), create=True))
    yield engine
    engine.close()


def is_event(cls: type, run_id: str) -> Callable[[protocol.Message], bool]:
    return lambda m: isinstance(m, cls) and getattr(m, "run_id", None) == run_id


def wait_until(condition: Callable[[], Any], timeout: float = 120.0) -> Any:
    """Poll ``condition`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)
    return value


def newest_step(run_dir: Path) -> int | None:
    """The step of the run's newest complete checkpoint, as the trainer
    counts them (None while there is none, or while the trainer prunes the
    one just listed)."""
    latest = rlckpt.latest_checkpoint(run_dir / "checkpoints")
    if latest is None:
        return None
    try:
        return int(json.loads((latest / "state.json").read_text())["step"])
    except FileNotFoundError:
        return None


def row(engine: EngineProcess, run_id: str) -> dict[str, Any]:
    runs = engine.call(protocol.ListRuns())["runs"]
    return next(r for r in runs if r["id"] == run_id)


def force_stop(engine: EngineProcess, run_id: str, pid: int) -> protocol.RunFinished:
    """Freeze the job so it cannot answer, ask it to stop; the supervisor
    kills it after the timeout."""
    os.kill(pid, signal.SIGSTOP)
    engine.call(protocol.StopRun(run_id=run_id, timeout_s=0.2))
    finished = engine.wait_for(is_event(protocol.RunFinished, run_id), timeout=60)
    assert isinstance(finished, protocol.RunFinished)
    return finished


@pytest.mark.slow
def test_a_resumed_run_stopped_by_force_records_its_last_checkpoint(
    opened: EngineProcess, project_dir: Path
) -> None:
    run_id = opened.call(protocol.StartRun(kind="rl.train", config=PPO_CARTPOLE))[
        "run_id"
    ]
    run_dir = project_dir / "runs" / run_id
    opened.wait_for(is_event(protocol.RunStarted, run_id))
    opened.wait_for(
        lambda m: is_event(protocol.RunProgress, run_id)(m) and m.done >= 128,
        timeout=180,
    )
    opened.call(protocol.StopRun(run_id=run_id, timeout_s=COOPERATIVE_TIMEOUT_S))
    first = opened.wait_for(is_event(protocol.RunFinished, run_id), timeout=180)
    assert first.status == "stopped" and "forced" not in first.summary
    first_steps = first.summary["total_steps"]
    (model_id,) = first.summary["registered_models"]

    opened.call(protocol.ResumeRun(run_id=run_id))
    started = opened.wait_for(is_event(protocol.RunStarted, run_id), timeout=60)
    # Trained further than the first attempt, with a checkpoint to show it.
    wait_until(lambda: (newest_step(run_dir) or 0) >= first_steps + 128, 180)
    os.kill(started.pid, signal.SIGSTOP)
    saved_steps = newest_step(run_dir)
    assert saved_steps is not None and saved_steps > first_steps
    finished = force_stop(opened, run_id, started.pid)

    summary = finished.summary
    assert summary["forced"] is True and summary["stopped_by"] == "user"
    assert summary["total_steps"] == saved_steps
    assert summary["resumed_from"]["step"] == first_steps
    best = json.loads((run_dir / "checkpoints" / "best" / "state.json").read_text())
    assert summary["best_eval_reward"] == best["best_eval_reward"]
    assert summary["best_eval_reward"] >= first.summary["best_eval_reward"]
    # The model keeps its id (the lineage reads it), now with the best files.
    assert summary["registered_models"] == [model_id]
    (listed,) = summary["models"]
    assert listed["metrics"]["eval/mean_reward"] == summary["best_eval_reward"]

    # What the run list, Details, `rl-studio-engine compare` and a restarted
    # studio read: the project's row and result.json say the same.
    recorded = row(opened, run_id)
    assert recorded["status"] == "stopped"
    assert recorded["reason"] == lifecycle.FORCED_REASON
    assert recorded["summary"] == summary
    result = json.loads((run_dir / "result.json").read_text())
    assert result["summary"] == summary
    figures = run_metrics(recorded)
    assert figures["total_steps"] == saved_steps
    assert figures["best_eval_reward"] == best["best_eval_reward"]
    assert run_steps(recorded) == saved_steps  # the run list's Steps and Best
    assert best_reward(recorded) == best["best_eval_reward"]
    snapshot = opened.call(protocol.GetProjectSnapshot())
    (model,) = [m for m in snapshot["models"] if m["id"] == model_id]
    assert model["metrics"]["eval/mean_reward"] == summary["best_eval_reward"]
    links = opened.call(protocol.GetModelLineage(model_id=model_id))["links"]
    assert [run_id, model_id, "trained"] in links
    # Reading the checkpoint loaded nothing heavy into the engine.
    assert opened.call(protocol.Hello())["heavy_modules"] == []


@pytest.mark.slow
def test_a_run_stopped_by_force_before_its_first_checkpoint(
    opened: EngineProcess, project_dir: Path
) -> None:
    config = {**PPO_CARTPOLE, "checkpoint_every_steps": 0, "eval_every_steps": 0}
    run_id = opened.call(protocol.StartRun(kind="rl.train", config=config))["run_id"]
    started = opened.wait_for(is_event(protocol.RunStarted, run_id))
    opened.wait_for(is_event(protocol.RunProgress, run_id), timeout=180)
    finished = force_stop(opened, run_id, started.pid)
    assert newest_step(project_dir / "runs" / run_id) is None
    assert finished.summary == {"forced": True, "stopped_by": "user"}
    recorded = row(opened, run_id)
    assert recorded["summary"] == finished.summary
    assert recorded["status"] == "stopped"
    assert opened.call(protocol.GetProjectSnapshot())["models"] == []


def test_a_resumed_selftest_whose_checkpoint_is_unreadable_keeps_its_summary(
    opened: EngineProcess, project_dir: Path
) -> None:
    config = {"steps": 100_000, "step_seconds": 0.005}
    run_id = opened.call(protocol.StartRun(kind="selftest", config=config))["run_id"]
    opened.wait_for(is_event(protocol.RunStarted, run_id))  # the first attempt's
    opened.wait_for(
        lambda m: is_event(protocol.RunProgress, run_id)(m) and m.done >= 60,
    )
    opened.call(protocol.StopRun(run_id=run_id, timeout_s=COOPERATIVE_TIMEOUT_S))
    first = opened.wait_for(is_event(protocol.RunFinished, run_id))
    assert first.status == "stopped" and first.summary["steps"] >= 60

    opened.call(protocol.ResumeRun(run_id=run_id))
    started = opened.wait_for(is_event(protocol.RunStarted, run_id))
    opened.wait_for(
        lambda m: (
            is_event(protocol.RunProgress, run_id)(m)
            and m.done > first.summary["steps"] + 60
        ),
    )
    os.kill(started.pid, signal.SIGSTOP)
    state = project_dir / "runs" / run_id / "checkpoints" / "state.json"
    state.write_text("{not json")
    finished = force_stop(opened, run_id, started.pid)

    kept = {**first.summary, "forced": True, "stopped_by": "user"}
    assert finished.summary == kept
    assert row(opened, run_id)["summary"] == kept
    problem = opened.wait_for(
        lambda m: isinstance(m, protocol.EngineLog) and run_id in m.text
    )
    assert isinstance(problem, protocol.EngineLog) and problem.level == "error"
    assert problem.text.startswith(
        f"Run {run_id} was stopped by force and keeps the summary it had: "
        f"The checkpoint state {state} is not valid JSON ("
    )
    assert opened.call(protocol.Ping(payload="ok")) == {"payload": "ok"}


def test_a_resumed_run_that_fails_keeps_the_summary_it_had(tmp_path: Path) -> None:
    """Its job recorded no summary (it crashed): the row keeps its previous
    attempt's, with the models the catalog's lineage reads."""
    from engine.jobs.supervisor import Supervisor

    seen: list[protocol.Message] = []
    supervisor = Supervisor(seen.append)
    project = supervisor.open_project(
        str(tmp_path / "p"), create=True, with_examples=False
    )
    try:
        config = {"steps": 50, "step_seconds": 0, "fail_at_step": 5}
        run_id = supervisor.start_run("selftest", config)
        wait_until(lambda: any(is_event(protocol.RunFailed, run_id)(m) for m in seen))
        # As its first attempt would have left it (stopped at step 4 with a
        # model registered).
        earlier = {"steps": 4, "stopped_by": "user", "registered_models": ["m-1"]}
        project.update_run(run_id, status="stopped", summary=earlier)
        seen.clear()
        supervisor.resume_run(run_id)
        failed = wait_until(
            lambda: [m for m in seen if is_event(protocol.RunFailed, run_id)(m)]
        )[0]
        assert "self-test failure requested at step 5" in failed.reason
        run = project.get_run(run_id)
        assert run.status == "failed" and run.summary == earlier
    finally:
        supervisor.shutdown(5)


# ------------------------------------------------ reading the folder alone


def fake_model_dir(folder: Path, state: dict[str, Any]) -> None:
    folder.mkdir(parents=True)
    (folder / "model.zip").write_bytes(b"not really a model")
    atomic_write_json(folder / "state.json", state)


def project_with_run(tmp_path: Path) -> tuple[Project, str, Path, str]:
    """A project with an ``rl.train`` run whose first attempt registered a
    model; returns the project, the run id, its folder and the model id."""
    project = Project.open(tmp_path / "p", create=True)
    config = registry.validate_config(
        "rl.train", {"env": "CartPole-v1", "algo": "PPO", "seed": 1}
    )
    run_id = project.create_run("rl.train", config, "first").id
    run_dir = project.run_dir(run_id)
    ckpt = run_dir / "checkpoints"
    state = {"step": 100, "best_eval_reward": 9.0, "best_eval_metrics": {}}
    fake_model_dir(ckpt / "step-0000000100", state)
    first = rlckpt.summary_on_disk(run_dir, registry.get_kind("rl.train").load(config))
    assert first is not None and first["total_steps"] == 100
    summary, problems = lifecycle.finish(
        project, run_id, lifecycle.Outcome("stopped", first)
    )
    assert summary is not None and not problems
    (model_id,) = summary["registered_models"]
    return project, run_id, run_dir, model_id


def test_the_newest_readable_checkpoint_and_the_best_model_make_the_summary(
    tmp_path: Path,
) -> None:
    project, run_id, run_dir, model_id = project_with_run(tmp_path)
    ckpt = run_dir / "checkpoints"
    fake_model_dir(
        ckpt / "step-0000000300",
        {
            "step": 300,
            "best_eval_reward": 20.0,
            "last_eval_reward": 15.0,
            "resumed_from": {"step": 100},
            "last_logged": {"rollout/ep_rew_mean": 14.0},
        },
    )
    # Saved at a new best after the checkpoint: the newest best.
    fake_model_dir(
        ckpt / "best",
        {
            "step": 320,
            "best_eval_reward": 31.0,
            "best_eval_metrics": {"eval/mean_reward": 31.0, "step": 320},
        },
    )
    # A checkpoint that never got its state.json is not complete.
    (ckpt / "step-0000000400").mkdir()
    try:
        summary, problems = lifecycle.finish_forced(project, run_id, "user")
        assert not problems
        assert summary["total_steps"] == 300 and summary["last_eval_reward"] == 15.0
        assert summary["best_eval_reward"] == 31.0
        assert summary["resumed_from"] == {"step": 100}
        assert summary["registered_models"] == [model_id]
        (model,) = summary["models"]
        assert model["file"] == str((ckpt / "best" / "model.zip").resolve())
        assert model["metrics"] == {
            "eval/mean_reward": 31.0,
            "rollout/ep_rew_mean": 14.0,
        }
        assert project.get_run(run_id).summary == summary
        (registered,) = project.list_models()
        assert registered.id == model_id and registered.metrics == model["metrics"]
    finally:
        project.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[1, 2]", "does not say at which step it was saved."),
        ('{"step": "many"}', "does not say at which step it was saved."),
        ("\xff\xfe", "is not valid JSON ("),
    ],
)
def test_an_unreadable_newest_checkpoint_loses_nothing_already_saved(
    tmp_path: Path, text: str, why: str
) -> None:
    project, run_id, run_dir, model_id = project_with_run(tmp_path)
    before = project.get_run(run_id).summary
    model_file = Path(project.list_models()[0].path)
    saved = model_file.read_bytes()
    broken = run_dir / "checkpoints" / "step-0000000200"
    fake_model_dir(broken, {"step": 200})
    (broken / "state.json").write_bytes(text.encode("latin-1"))
    (broken / "model.zip").write_bytes(b"a newer model")
    try:
        summary, problems = lifecycle.finish_forced(project, run_id, "gui_gone")
        assert summary == {**before, "forced": True, "stopped_by": "gui_gone"}
        assert summary["registered_models"] == [model_id]
        assert project.get_run(run_id).summary == summary
        assert model_file.read_bytes() == saved  # not registered again
        (problem,) = problems
        assert problem.startswith(
            f"Run {run_id} was stopped by force and keeps the summary it had: "
            f"The checkpoint state {broken / 'state.json'} "
        )
        assert why in problem
    finally:
        project.close()


def test_a_registered_model_deleted_since_is_not_listed_again(
    tmp_path: Path,
) -> None:
    project, run_id, run_dir, model_id = project_with_run(tmp_path)
    project.delete_model(model_id)
    fake_model_dir(run_dir / "checkpoints" / "step-0000000200", {"step": 200})
    try:
        summary, problems = lifecycle.finish_forced(project, run_id, "user")
        assert not problems and summary["total_steps"] == 200
        # Registered anew from the checkpoint, without the deleted id.
        (new_id,) = summary["registered_models"]
        assert new_id != model_id
        assert [m.id for m in project.list_models()] == [new_id]
    finally:
        project.close()


def test_kinds_without_a_reader_keep_the_summary_they_had(tmp_path: Path) -> None:
    assert registry.get_kind("llm.train").summary_on_disk is None
    project = Project.open(tmp_path / "p", create=True)
    try:
        run_id = project.create_run("llm.train", {}, "tune").id
        project.update_run(run_id, summary={"steps": 3})
        summary, problems = lifecycle.finish_forced(project, run_id, "user")
        assert summary == {"forced": True, "stopped_by": "user"} and not problems
        run = project.get_run(run_id)
        assert run.summary == {"steps": 3} and run.status == "stopped"
        assert run.reason == lifecycle.FORCED_REASON
    finally:
        project.close()


@pytest.mark.parametrize("saved", [True, False])
def test_a_headless_run_aborted_by_a_second_ctrl_c_records_what_it_saved(
    tmp_path: Path, saved: bool
) -> None:
    """``rl-studio-engine train --project``'s abort is a stop by force too:
    the summary of its checkpoint (or the one it had), as ``interrupted``."""
    project = Project.open(tmp_path / "p", create=True)
    try:
        config = registry.validate_config("selftest", {"steps": 500})
        run_id = project.create_run("selftest", config, "abort").id
        before = {"steps": 40, "stopped_by": "user"}
        project.update_run(run_id, status="stopped", summary=before)
        run_dir = project.run_dir(run_id)

        def entry(ctx: JobContext) -> dict[str, Any]:
            if saved:
                atomic_write_json(ctx.checkpoint_dir / "state.json", {"step": 120})
            raise KeyboardInterrupt

        ctx = lifecycle.HeadlessContext(
            run_id, run_dir, "selftest", config, resume=True, project=project
        )
        outcome = lifecycle.run_in_process(project, run_id, ctx, entry)
        marks = {"forced": True, "stopped_by": "signal"}
        wanted = {"steps": 120, **marks} if saved else {**before, **marks}
        assert outcome.status == "interrupted" and outcome.summary == wanted
        run = project.get_run(run_id)
        assert run.status == "interrupted" and run.summary == wanted
        assert run.reason == lifecycle.ABORTED_REASON
    finally:
        project.close()


def test_a_resumed_run_whose_process_vanished_records_what_it_saved(
    tmp_path: Path,
) -> None:
    """The engine died, or the machine rebooted, during a resumed run: the
    next engine's reconcile finishes it ``interrupted`` with the summary of
    its last checkpoint, not its first attempt's."""
    project, run_id, run_dir, model_id = project_with_run(tmp_path)
    # Resumed (its result.json removed, as a resume does), then gone.
    (run_dir / "result.json").unlink()
    project.update_run(run_id, status="running", pid=None)
    fake_model_dir(
        run_dir / "checkpoints" / "step-0000000300",
        {"step": 300, "best_eval_reward": 9.0, "resumed_from": {"step": 100}},
    )
    try:
        assert reconcile_runs(project) == [run_id]
        run = project.get_run(run_id)
        assert run.status == "interrupted"
        assert run.reason == "The run's process ended without reporting a result."
        assert run.summary["total_steps"] == 300
        assert run.summary["resumed_from"] == {"step": 100}
        assert run.summary["registered_models"] == [model_id]
        assert "forced" not in run.summary
        assert [m.id for m in project.list_models()] == [model_id]
    finally:
        project.close()


def test_a_vanished_run_whose_checkpoint_is_unreadable_keeps_its_summary(
    tmp_path: Path,
) -> None:
    project, run_id, run_dir, _ = project_with_run(tmp_path)
    before = project.get_run(run_id).summary
    (run_dir / "result.json").unlink()
    project.update_run(run_id, status="running", pid=None)
    newest = run_dir / "checkpoints" / "step-0000000300"
    fake_model_dir(newest, {"step": 300})
    (newest / "state.json").write_text("[1, 2]", encoding="utf-8")
    try:
        assert reconcile_runs(project) == [run_id]
        run = project.get_run(run_id)
        assert run.status == "interrupted" and run.summary == before
        assert run.reason == (
            f"Run {run_id} ended without reporting a result and keeps the summary "
            f"it had: The checkpoint state {newest / 'state.json'} does not say "
            "at which step it was saved."
        )
    finally:
        project.close()
