"""Sweep workers and the study's trials, on a real SQLite Optuna storage:
racing workers take the queued trials and never make one more; a killed
worker's trial is failed by the heartbeat check instead of staying running;
the time-to-target objective is minimized."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from engine import cli
from engine.errors import EngineError
from engine.rl import (
    sweep_workers,
    tune,
    tune_space,
    tune_storage,
    tune_study,
    tune_trials,
)
from engine.store.project import Project

REPO = Path(__file__).resolve().parents[1]


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` (a storage, a process) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _new_study(
    tmp_path: Path, name: str, trials: int, steps: int, *more: str
) -> tuple[str, optuna.Study]:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    args = cli.build_parser("tune").parse_args(
        ["tune", "--env", "CartPole-v1", "--algo", "PPO", "--trials", str(trials),
         "--steps", str(steps), "--search", "gamma", "--set", "eval_episodes=2",
         *more]
    )  # fmt: skip
    settings = tune._new_settings(args, tmp_path / "p")
    study, _ = tune_study.open_study(tune_storage.open_storage(url), name, settings)
    return url, study


def test_racing_workers_take_each_queued_trial_once_and_make_none(
    tmp_path: Path,
) -> None:
    url, study = _new_study(tmp_path, "race", trials=6, steps=512)
    assert [t.state for t in study.get_trials()] == [TrialState.WAITING] * 6
    taken: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def worker() -> None:
        # Each its own connection, as separate processes have.
        storage = tune_storage.open_storage(url, checked=True)
        mine, settings = tune_study.load(storage, "race")
        start.wait()
        while (trial := tune_study.take_trial(mine, storage, settings)) is not None:
            with lock:
                taken.append(trial.number)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(taken) == list(range(6))
    trials = study.get_trials()
    assert len(trials) == 6  # no surplus trial
    assert all(t.state == TrialState.RUNNING for t in trials)


def test_a_seeded_sweep_draws_the_same_trials_on_one_worker_or_two(
    tmp_path: Path,
) -> None:
    """Trial n draws with the sweep's seed plus n, so the trials a seeded
    sweep trains do not depend on how many workers take them, in which
    order, or on how many machines (where worker numbers repeat)."""

    def drawn(name: str, workers: int) -> dict[int, tuple[Any, ...]]:
        url, _ = _new_study(
            tmp_path, name, 6, 512, "--search", "learning_rate", "--seed", "5"
        )
        taking = []
        for _ in range(workers):
            storage = tune_storage.open_storage(url, checked=True)
            study, settings = tune_study.load(storage, name)
            taking.append((study, storage, settings))
        dims = list(taking[0][2].search)
        params: dict[int, tuple[Any, ...]] = {}
        turn = 0
        while (trial := tune_study.take_trial(*taking[turn % workers])) is not None:
            params[trial.number] = tuple(d.suggest(trial) for d in dims)
            turn += 1
        return params

    one, two = drawn("alone", 1), drawn("shared", 2)
    assert sorted(one) == list(range(6))
    assert two == one
    assert len({p[1] for p in one.values()}) == 6  # no trial repeats another


def test_a_killed_workers_trial_is_failed_by_the_heartbeat_check(
    tmp_path: Path,
) -> None:
    url, study = _new_study(tmp_path, "beat", trials=2, steps=1_000_000)
    project = tmp_path / "p"
    Project.open(project, create=True).close()
    worker = subprocess.Popen(
        [sys.executable, "-m", "engine.rl.tune_worker", url, "beat", str(project), "0"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until(
            lambda: (
                study.get_trials()[0].state == TrialState.RUNNING
                and bool(study.trials[0].params)
            ),
            120,
            "the worker to take a trial and draw its settings",
        )
        # Alive and beating: the default grace period keeps its trial.
        tune_study.fail_stale_trials(study)
        assert study.get_trials()[0].state == TrialState.RUNNING
        # As if it ran on a lost machine: only its heartbeat can tell.
        trial_id = study.get_trials()[0]._trial_id
        worker_attr = {**study.get_trials()[0].system_attrs[tune_study.WORKER_ATTR]}
        study._storage.set_trial_system_attr(
            trial_id, tune_study.WORKER_ATTR, {**worker_attr, "host": "elsewhere"}
        )
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    # The worker is gone; a checker with a one-second grace period fails
    # its trial once the last heartbeat is older than that.
    strict = optuna.load_study(
        study_name="beat",
        storage=tune_storage.open_storage(url, heartbeat_s=1, grace_s=1),
    )

    def failed() -> bool:
        tune_study.fail_stale_trials(strict)
        return strict.get_trials()[0].state == TrialState.FAIL

    _wait_until(failed, 60, "the stale trial to be failed")
    # The other queued trial is still there for the next worker, and the
    # failed one is queued again behind it.
    trials = study.get_trials()
    assert [t.state for t in trials] == [
        TrialState.FAIL,
        TrialState.WAITING,
        TrialState.WAITING,
    ]
    assert trials[2].system_attrs[tune_study.RETRY_OF_ATTR] == 0
    assert trials[2].params == trials[0].params and trials[0].params


def _start_worker(url: str, name: str, project: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.rl.tune_worker", url, name, str(project), "0"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.DEVNULL,
    )


def _kill(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=60)


@pytest.mark.slow
def test_a_killed_workers_trial_is_retried_once_by_another_worker_at_once(
    tmp_path: Path,
) -> None:
    """SIGKILL left a trial RUNNING for the 120 s grace period, then FAIL,
    never trained: a worker on the same machine now sees the dead pid at
    once, fails the trial and queues it again, once."""
    url, study = _new_study(tmp_path, "retry", trials=1, steps=1_000_000)
    project = tmp_path / "p"
    Project.open(project, create=True).close()

    def states() -> list[TrialState]:
        return [t.state for t in study.get_trials()]

    first = _start_worker(url, "retry", project)
    try:
        _wait_until(
            lambda: states() == [TrialState.RUNNING] and bool(study.trials[0].params),
            120,
            "the first worker's trial to draw its settings",
        )
    finally:
        _kill(first)
    killed = study.get_trials()[0]
    assert killed.system_attrs[tune_study.WORKER_ATTR]["pid"] == first.pid
    second = _start_worker(url, "retry", project)
    try:
        # The second worker fails the dead one's trial and takes its retry;
        # far sooner than the grace period (GRACE_S) could.
        _wait_until(
            lambda: states() == [TrialState.FAIL, TrialState.RUNNING],
            tune_storage.GRACE_S - 30,
            "the second worker to retry the killed worker's trial",
        )
        retry = study.get_trials()[1]
        assert retry.system_attrs[tune_study.RETRY_OF_ATTR] == 0
        assert retry.system_attrs[tune_study.WORKER_ATTR]["pid"] == second.pid
        assert retry.params == killed.params and retry.params
    finally:
        _kill(second)
    # The retry's worker died too: failed at once, not retried again.
    tune_study.fail_stale_trials(study)
    assert states() == [TrialState.FAIL, TrialState.FAIL]


def test_two_workers_finding_a_dead_trial_retry_it_once(tmp_path: Path) -> None:
    """Of several checkers that find one dead worker's trial, one fails and
    queues it again."""
    url, study = _new_study(tmp_path, "dead", trials=1, steps=512)
    storage = tune_storage.open_storage(url, checked=True)
    mine, settings = tune_study.load(storage, "dead")
    trial = tune_study.take_trial(mine, storage, settings)
    assert trial is not None
    trial.suggest_float("gamma", 0.9, 0.99)
    # A worker of this machine that has ended: a pid no process has.
    dead = {**tune_study._this_worker(), "pid": 2**22 + 1}
    storage.set_trial_system_attr(trial._trial_id, tune_study.WORKER_ATTR, dead)
    start = threading.Barrier(4)

    def check() -> None:
        checker = tune_storage.open_storage(url, checked=True)
        theirs, _ = tune_study.load(checker, "dead")
        start.wait()
        tune_study.fail_stale_trials(theirs)

    threads = [threading.Thread(target=check) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[1].params == trials[0].params
    # The command's line for it says which trial it retries.
    line = tune_study.trial_line(trials[1], 2, 1, None)
    assert line.startswith("trial 2/2 (#1, retry of #0) failed"), line


# ------------------------------------------------------------ storage URLs
def _open_new_storage(url: str, barrier: Any, results: Any) -> None:
    """One of the racing commands: warmed up, then opening the storage the
    moment every racer is ready (a real process of its own)."""
    from engine.errors import EngineError

    tune_storage.quiet_optuna()
    barrier.wait()
    try:
        tune_storage.open_storage(url)
        results.put("opened")
    except EngineError as exc:
        results.put(str(exc))


@pytest.mark.slow
def test_commands_starting_together_on_a_new_storage_all_open_it(
    tmp_path: Path,
) -> None:
    """Started at the same moment on a new SQLite file, one of two tune
    commands died with IntegrityError on alembic_version (5 of 12 starts
    failed in 4 rounds of 3 before the lock file)."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    outcomes = []
    for round_ in range(2):
        url = f"sqlite:///{tmp_path / f'race{round_}.db'}"
        barrier, results = spawn.Barrier(3), spawn.Queue()
        racers = [
            spawn.Process(target=_open_new_storage, args=(url, barrier, results))
            for _ in range(3)
        ]
        for racer in racers:
            racer.start()
        outcomes += [results.get(timeout=120) for _ in racers]
        for racer in racers:
            racer.join(timeout=60)
            assert racer.exitcode == 0
    assert outcomes == ["opened"] * 6


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared"]
)
def test_an_in_memory_storage_is_refused_in_one_sentence(
    url: str, tmp_path: Path
) -> None:
    code = cli.main(
        ["tune", "--env", "CartPole-v1", "--trials", "1", "--steps", "64",
         "--project", str(tmp_path), "--storage", url]
    )  # fmt: skip
    assert code == 2
    with pytest.raises(EngineError) as caught:
        tune_storage.open_storage(url)
    message = str(caught.value)
    assert "is an SQLite database in memory" in message
    assert "\n" not in message and message.endswith(".")


@pytest.mark.parametrize("damage", ["noise", "truncated", "page"])
def test_a_corrupt_sweeps_db_is_one_sentence_and_kept(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    db = project / "data" / "sweeps.db"
    if damage == "noise":
        db.parent.mkdir(parents=True)
        db.write_bytes(bytes(range(256)) * 40)
    else:
        _new_study(tmp_path, "whole", trials=1, steps=64)
        whole = (tmp_path / "sweeps.db").read_bytes()
        db.parent.mkdir(parents=True)
        if damage == "truncated":
            whole = whole[: len(whole) // 3] + b"\xff" * 1000
        else:  # one page deep in the file: it broke the sweep mid-way
            page = len(whole) // 4096 // 2
            noise = random.Random(page).randbytes(4096)
            whole = whole[: page * 4096] + noise + whole[(page + 1) * 4096 :]
        db.write_bytes(whole)
    before = db.read_bytes()
    code = cli.main(
        ["tune", "--env", "CartPole-v1", "--trials", "1", "--steps", "64",
         "--project", str(project)]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and "is not an SQLite database (damaged" in err[0], err
    assert db.read_bytes() == before  # not overwritten, not lost


def test_time_to_target_is_minimized_and_recorded_in_the_preset(
    tmp_path: Path,
) -> None:
    project_dir = tmp_path / "p"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "tune", "--env", "CartPole-v1",
         "--algo", "PPO", "--trials", "2", "--steps", "1024", "--search",
         "gamma", "--set", "eval_episodes=2", "--set", "target_eval_reward=1",
         "--objective", "time_to_target", "--seed", "3", "--project",
         str(project_dir), "--save-preset", "quick"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["objective"] == "time_to_target"
    study = optuna.load_study(
        study_name=summary["study"],
        storage=tune_storage.open_storage(summary["storage"]),
    )
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    values = [t.value for t in study.get_trials()]
    assert len(values) == 2 and all(v is not None and v > 0 for v in values)
    assert summary["best_value"] == min(v for v in values if v is not None)
    preset = json.loads((project_dir / "presets" / "quick.preset.json").read_text())
    assert preset["provenance"]["objective"].startswith("CPU seconds to target")
    assert preset["provenance"]["value"] == summary["best_value"]


@pytest.mark.slow
def test_a_time_to_target_trial_slower_than_the_best_stops_at_its_next_eval(
    tmp_path: Path,
) -> None:
    # CartPole pays at most 500 an episode: this trial cannot reach the target.
    url, study = _new_study(
        tmp_path, "slow", 2, 200_000, "--objective", "time_to_target",
        "--set", "target_eval_reward=10000", "--set", "eval_every_steps=256",
    )  # fmt: skip
    storage = tune_storage.open_storage(url, checked=True)
    first = tune_study.take_trial(study, storage, tune_study.settings_of(study))
    assert first is not None
    study.tell(first, 0.01)  # the best so far reached it in 0.01 CPU seconds
    project = tmp_path / "p"
    Project.open(project, create=True).close()
    done = subprocess.run(
        [sys.executable, "-m", "engine.rl.tune_worker", url, "slow", str(project), "0"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    trial = study.get_trials()[1]
    assert trial.state == TrialState.PRUNED
    assert "more than the best trial's 0.0 to reach it" in trial.user_attrs["error"]
    assert trial.user_attrs["cpu_seconds"] > 0.01
    with contextlib.closing(Project.open(project)) as opened:
        run = opened.get_run(trial.user_attrs["run_id"])
    assert run.status == "stopped"
    assert run.summary["stopped_by"] == "pruned"
    # Stopped at its first evaluation, not after its 200,000 steps.
    assert run.summary["total_steps"] < 2_000


def test_only_a_trial_short_of_the_target_and_past_the_best_time_is_stopped(
    tmp_path: Path,
) -> None:
    target = ("--objective", "time_to_target", "--set", "target_eval_reward=400")
    url, study = _new_study(tmp_path, "rule", 2, 512, *target)
    # No trial has reached the target yet: nothing to compare with.
    assert tune_trials._slower_than_best(study, 100.0, 10.0, 400.0) is None
    first = tune_study.take_trial(
        study,
        tune_storage.open_storage(url, checked=True),
        tune_study.settings_of(study),
    )
    assert first is not None
    study.tell(first, 5.0)
    assert tune_trials._slower_than_best(study, 4.9, 10.0, 400.0) is None
    # Past the best time but reaching the target now: its time is told.
    assert tune_trials._slower_than_best(study, 6.0, 450.0, 400.0) is None
    reason = tune_trials._slower_than_best(study, 6.0, 10.0, 400.0)
    assert reason == (
        "Pruned by the sweep 'rule': 6.0 CPU seconds without reaching eval mean "
        "reward 400, more than the best trial's 5.0 to reach it."
    )


def test_time_to_target_without_a_target_is_refused_in_one_sentence(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engine", "tune", "--env", "CartPole-v1",
         "--trials", "2", "--steps", "512", "--objective", "time_to_target",
         "--project", str(tmp_path / "p")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "needs a target: --set target_eval_reward=R." in done.stderr
    assert not (tmp_path / "p").exists()


def test_a_study_with_another_objective_is_a_clash(tmp_path: Path) -> None:
    target = ("--set", "target_eval_reward=400")
    url, _ = _new_study(tmp_path, "clash", 2, 512, *target)
    args = cli.build_parser("tune").parse_args(
        ["tune", "--env", "CartPole-v1", "--algo", "PPO", "--trials", "2",
         "--steps", "512", "--search", "gamma", "--set", "eval_episodes=2",
         *target, "--objective", "time_to_target"]
    )  # fmt: skip
    wanted = tune._new_settings(args, tmp_path / "p")
    with pytest.raises(tune.ConfigError, match=r"\(its objective differ\)"):
        tune_study.find_study("clash", wanted, url, tmp_path / "p")


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            # pid (comm) state ppid pgrp ...: comm may hold spaces.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _both_running(study: optuna.Study) -> bool:
    """The first two trials running (two workers took one each)."""
    states = [t.state for t in study.get_trials()]
    return states[:2] == [TrialState.RUNNING] * 2


def test_early_workers_take_the_released_study_and_dropped_ones_end(
    tmp_path: Path,
) -> None:
    # Started before the study exists (their imports overlap its making),
    # released with its name: they take its queued trials, side by side.
    workers = sweep_workers.WorkerGroup(2)
    if sweep_workers.FORKS:
        assert workers.processes == 1  # the second is forked once warmed up
    url, study = _new_study(tmp_path, "early", trials=2, steps=256)
    project = tmp_path / "p"
    Project.open(project, create=True).close()
    workers.release(url, "early", project)
    while workers.running():
        workers.wait(1.0)
    assert workers.exit_codes() == [0] * workers.processes
    first, second = study.get_trials()
    assert [first.state, second.state] == [TrialState.COMPLETE] * 2
    assert first.datetime_start and second.datetime_start
    assert first.datetime_complete and second.datetime_complete
    # Side by side: each began before the other ended.
    assert second.datetime_start < first.datetime_complete
    assert first.datetime_start < second.datetime_complete
    # Never released (the settings were refused): they end, having written
    # nothing.
    dropped = sweep_workers.WorkerGroup(1)
    dropped.drop()
    assert not dropped.running() and len(dropped.exit_codes()) == 1


def _two_workers_on(
    tmp_path: Path, name: str, trials: int
) -> tuple[optuna.Study, Path, sweep_workers.WorkerGroup]:
    """Two workers released on a new study of long (1,000,000-step) trials:
    (the study, its project, the workers)."""
    url, study = _new_study(tmp_path, name, trials=trials, steps=1_000_000)
    project = tmp_path / "p"
    Project.open(project, create=True).close()
    workers = sweep_workers.WorkerGroup(2)
    workers.release(url, name, project)
    return study, project, workers


@pytest.mark.slow
def test_stopping_forked_workers_stops_each_trial_with_a_checkpoint(
    tmp_path: Path,
) -> None:
    study, project, workers = _two_workers_on(tmp_path, "halt", trials=3)
    try:
        _wait_until(lambda: _both_running(study), 120, "both workers' trials")
        # A checkpoint to stop from: each run has trained a little.
        runs = Project.open(project)
        try:
            _wait_until(
                lambda: (
                    [
                        Path(r.run_dir, "metrics.jsonl").exists()
                        for r in runs.list_runs()
                    ]
                    == [True, True]
                ),
                120,
                "both runs' first metrics",
            )
        finally:
            runs.close()
    finally:
        workers.stop(timeout=120)
    assert workers.exit_codes() == [0] * workers.processes
    assert all(not _group(pid) for pid in workers.pids)  # no worker left
    trials = study.get_trials()
    assert [t.state for t in trials[:2]] == [TrialState.FAIL] * 2
    assert trials[2].state == TrialState.WAITING  # none taken after the stop
    runs = Project.open(project)
    try:
        for run in runs.list_runs():
            assert run.status == "stopped"
            assert any(Path(run.run_dir, "checkpoints").glob("step-*"))
    finally:
        runs.close()


FORK_SAVING = """
import os, signal, sys, time
from engine.rl.sweep_workers import run_forked

leader = os.getpid()


def work():
    if os.getpid() == leader:
        return 0  # no trial left for it: it waits for its fork
    stopped = []
    signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
    print("training", flush=True)
    while not stopped:
        time.sleep(0.01)
    time.sleep(1.0)  # a checkpoint being saved
    with open(sys.argv[1], "w") as f:
        f.write("saved")
    return 0


try:
    sys.exit(run_forked(2, work))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.skipif(not sweep_workers.FORKS, reason="workers are forked on Linux")
def test_a_stop_lets_a_fork_save_while_its_idle_leader_waits(tmp_path: Path) -> None:
    """The leader has no trial left when the group's SIGINT comes: it waits
    for its fork to save, as its end would kill the fork."""
    saved = tmp_path / "saved"
    proc = subprocess.Popen(
        [sys.executable, "-c", FORK_SAVING, str(saved)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "training\n"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) in (0, 130)
    assert saved.read_text() == "saved"


@pytest.mark.skipif(not sweep_workers.FORKS, reason="workers are forked on Linux")
def test_a_forked_worker_dies_with_the_process_that_forked_it(
    tmp_path: Path,
) -> None:
    study, _, workers = _two_workers_on(tmp_path, "orphan", trials=2)
    (leader,) = workers.pids
    try:
        _wait_until(lambda: _both_running(study), 120, "both workers' trials")
        assert len(_group(leader)) == 2
        os.kill(leader, signal.SIGKILL)  # the OOM killer, say
        _wait_until(lambda: not _group(leader), 60, "the forked worker to end")
    finally:
        workers.drop()


def test_workers_on_one_machine_split_its_torch_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.rl import config

    monkeypatch.setattr(config, "default_torch_threads", lambda: 4)
    settings = tune_space.SweepSettings(
        "CartPole-v1", "PPO", 512, 2, (), {"eval_episodes": 2}, {}
    )
    assert tune_trials.shared_threads(settings, 1) == settings
    assert tune_trials.shared_threads(settings, 2).fixed["torch_threads"] == 2
    assert tune_trials.shared_threads(settings, 8).fixed["torch_threads"] == 1
    fixed = dataclasses.replace(settings, fixed={"torch_threads": 3})
    assert tune_trials.shared_threads(fixed, 2) == fixed


def test_a_sqlite_storage_writes_ahead(tmp_path: Path) -> None:
    import sqlite3

    _new_study(tmp_path, "wal", trials=1, steps=256)
    with contextlib.closing(sqlite3.connect(tmp_path / "sweeps.db")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_watcher_reads_the_trials_only_when_more_have_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, study = _new_study(tmp_path, "watch", trials=4, steps=256)
    storage = tune_storage.open_storage(url, checked=True)
    study_id = storage.get_study_id_from_name("watch")
    assert tune_study.finished_count(storage, study_id) == 0
    # One trial of each finished state; the fourth is left running.
    for ending in (1.5, TrialState.PRUNED, TrialState.FAIL, None):
        trial = tune_study.take_trial(study, storage, tune_study.settings_of(study))
        assert trial is not None
        if isinstance(ending, float):
            study.tell(trial, ending)
        elif ending is not None:
            study.tell(trial, state=ending)
    assert (
        tune_study.finished_count(storage, study_id)
        == 3
        == len(tune_study.finished(study))
    )

    reads: list[int] = []
    real = tune_study.finished

    def counted(s: optuna.Study) -> list[optuna.trial.FrozenTrial]:
        reads.append(1)
        return real(s)

    monkeypatch.setattr(tune_study, "finished", counted)
    seen: list[tuple[int, int]] = []
    tune_study.watch(
        study,
        storage,
        _Polls(4),  # type: ignore[arg-type]  # stands in for the workers
        lambda t, done, _best: seen.append((t.number, done)),
    )
    assert seen == [(0, 1), (1, 2), (2, 3)]
    assert len(reads) == 1  # the later polls counted, and read nothing


class _Polls:
    """Workers (for :func:`tune_study.watch`) that run for ``polls`` of its polls."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    def running(self) -> bool:
        return self.left > 0

    def wait(self, _seconds: float) -> None:
        self.left -= 1

    def stop(self) -> None:
        self.left = 0


def test_saving_a_sweeps_best_as_a_preset_refuses_bad_input_in_one_sentence(
    tmp_path: Path,
) -> None:
    from engine.jobs.registry import validate_config

    project = tmp_path / "p"
    Project.open(project, create=True).close()
    url = f"sqlite:///{project / 'data' / 'sweeps.db'}"

    def refused(**config: str) -> str:
        with pytest.raises(tune.ConfigError) as caught:
            validate_config("rl.tune.preset", {"project_dir": str(project), **config})
        return str(caught.value)

    assert refused(study="none", name="p") == (f"There is no sweep 'none' in {url}.")
    _, study = _new_study(project / "data", "fresh", 2, 256)
    assert refused(study="fresh", name="p") == (
        "The sweep 'fresh' has no completed trial to save yet."
    )
    assert "preset" in refused(study="fresh", name="../outside")
    storage = tune_storage.open_storage(url, checked=True)
    trial = tune_study.take_trial(study, storage, tune_study.settings_of(study))
    assert trial is not None
    study.tell(trial, 1.0)
    assert (
        validate_config(
            "rl.tune.preset",
            {"project_dir": str(project), "study": "fresh", "name": "p"},
        )["name"]
        == "p"
    )
    (project / "presets").mkdir()
    (project / "presets" / "p.preset.json").write_text("{}", encoding="utf-8")
    assert refused(study="fresh", name="p") == (
        "The project already has a preset 'p'; give another name."
    )
    assert (project / "presets" / "p.preset.json").read_text() == "{}"


def test_a_sweeps_config_is_checked_into_its_typed_instance(tmp_path: Path) -> None:
    from engine.jobs.registry import get_kind

    project = tmp_path / "p"
    Project.open(project, create=True).close()
    kind = get_kind("rl.tune")
    raw = {"env": "CartPole-v1", "trials": 2, "steps": 256, "search": ["gamma"]}
    cfg = kind.validate({**raw, "project_dir": str(project)})
    assert isinstance(cfg, tune.TuneConfig)
    # auto resolved and the study named, so the job runs what was checked
    assert cfg.algo == "PPO" and cfg.study.startswith("PPO-CartPole-v1-")
    assert kind.load(kind.record(cfg)) == cfg

    def refused(**bad: Any) -> tuple[str, str]:
        with pytest.raises(tune.ConfigError) as caught:
            kind.validate({**raw, "project_dir": str(project), **bad})
        return caught.value.field, str(caught.value)

    assert refused(workers=65) == ("workers", "workers must be at most 64, not 65.")
    assert refused(search="gamma") == (
        "search",
        "search must be a list of texts, not 'gamma'.",
    )
    assert refused(project_dir=None) == (
        "project_dir",
        "A sweep needs a project for its runs.",
    )
