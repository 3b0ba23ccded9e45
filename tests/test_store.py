"""The project store: folders, SQLite, atomic writes, metrics, bad folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ProjectError, UnknownRunError
from engine.jobs.reconcile import reconcile_runs
from engine.store.atomic import (
    atomic_write_json,
    remove_stale_temp_files,
    temp_owner,
)
from engine.store.metrics import MetricsWriter, read_metrics
from engine.store.project import Project, new_model_folder

ROOT = Path(__file__).resolve().parents[1]


def test_create_lays_out_the_folder_and_wal_database(project_dir: Path) -> None:
    project = Project.open(project_dir, create=True)
    for name in ("envs", "flows", "runs", "models", "data"):
        assert (project_dir / name).is_dir()
    mode = project._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    project.close()


def test_examples_are_copied_into_a_new_project_only(
    project_dir: Path, tmp_path: Path
) -> None:
    examples = tmp_path / "examples"
    (examples / "envs").mkdir(parents=True)
    (examples / "envs" / "demo.env.json").write_text(
        '{"kind": "grid", "description": "d"}'
    )
    project = Project.open(project_dir, create=True, examples=examples)
    assert (project_dir / "envs" / "demo.env.json").exists()
    envs = project.snapshot()["envs"]
    assert envs[0]["name"] == "demo" and envs[0]["kind"] == "grid"
    project.close()
    # A user's edit survives reopening: examples are never copied twice.
    (project_dir / "envs" / "demo.env.json").write_text('{"kind": "edited"}')
    Project.open(project_dir, examples=examples).close()
    assert (
        json.loads((project_dir / "envs" / "demo.env.json").read_text())["kind"]
        == "edited"
    )


def test_runs_round_trip_and_unknown_ids_are_clear(project_dir: Path) -> None:
    project = Project.open(project_dir, create=True)
    run = project.create_run("selftest", {"steps": 3}, name="first")
    assert json.loads((project.run_dir(run.id) / "config.json").read_text())[
        "config"
    ] == {"steps": 3}
    project.update_run(run.id, status="running", pid=123, summary={"a": 1})
    again = project.get_run(run.id)
    assert (again.status, again.pid, again.summary, again.name) == (
        "running",
        123,
        {"a": 1},
        "first",
    )
    with pytest.raises(UnknownRunError, match="no run 'nope'"):
        project.get_run("nope")
    with pytest.raises(UnknownRunError):
        project.update_run("nope", status="failed")
    project.close()


def test_commits_from_another_process_are_noticed_and_own_ones_are_not(
    project_dir: Path,
) -> None:
    studio = Project.open(project_dir, create=True)
    headless = Project.open(project_dir)
    try:
        assert not studio.changed_elsewhere()  # the first call sets the mark
        run = studio.create_run("selftest", {"steps": 1})
        studio.update_run(run.id, status="running")
        assert not studio.changed_elsewhere()
        other = headless.create_run("rl.train", {"env": "CartPole-v1"})
        assert studio.changed_elsewhere()
        assert not studio.changed_elsewhere()  # reported once
        headless.update_run(other.id, progress_done=10.0)
        assert studio.changed_elsewhere()
        assert {r.id for r in studio.list_runs()} == {run.id, other.id}
    finally:
        headless.close()
        studio.close()


def test_reconcile_marks_vanished_runs_interrupted_and_reads_results(
    project_dir: Path,
) -> None:
    project = Project.open(project_dir, create=True)
    lost = project.create_run("selftest", {})
    done = project.create_run("selftest", {})
    live = project.create_run("selftest", {})
    for r in (lost, done, live):
        project.update_run(r.id, status="running")
    # a job that ended while no engine watched: its model is registered too
    model_file = project.run_dir(done.id) / "model.zip"
    model_file.write_bytes(b"z")
    entry = {"name": "best", "kind": "sb3-policy", "file": str(model_file)}
    atomic_write_json(
        project.run_dir(done.id) / "result.json",
        {"status": "completed", "summary": {"steps": 9, "models": [entry]}},
    )
    changed = reconcile_runs(project, live_run_ids=[live.id])
    assert set(changed) == {lost.id, done.id}
    assert project.get_run(lost.id).status == "interrupted"
    assert project.get_run(done.id).status == "completed"
    (model,) = project.list_models()
    assert model.source_run == done.id
    assert project.get_run(done.id).summary == {
        "steps": 9,
        "models": [entry],
        "registered_models": [model.id],
    }
    assert project.get_run(live.id).status == "running"
    project.close()


def test_reconcile_leaves_runs_whose_process_still_runs(project_dir: Path) -> None:
    """A headless run in a terminal owns its row until its process ends."""
    project = Project.open(project_dir, create=True)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        headless = project.create_run("rl.train", {})
        project.update_run(
            headless.id, status="running", pid=worker.pid, started=time.time()
        )
        # A recorded pid that an older run had and a newer process reuses
        # does not count: that process started after the run did.
        reused = project.create_run("rl.train", {})
        project.update_run(
            reused.id, status="running", pid=worker.pid, started=time.time() - 3600
        )
        assert reconcile_runs(project) == [reused.id]
        assert project.get_run(headless.id).status == "running"
        assert project.get_run(reused.id).status == "interrupted"
    finally:
        worker.kill()
        worker.wait()
    assert reconcile_runs(project) == [headless.id]
    assert project.get_run(headless.id).status == "interrupted"
    project.close()


def test_reconcile_leaves_a_run_being_started_by_another_engine(
    project_dir: Path,
) -> None:
    """A queued row has no pid until its process starts; another engine's
    reconcile must not call it interrupted meanwhile."""
    project = Project.open(project_dir, create=True)
    starting = project.create_run("selftest", {})
    stale = project.create_run("selftest", {})
    project.update_run(stale.id, created=time.time() - 3600)
    assert reconcile_runs(project) == [stale.id]
    assert project.get_run(starting.id).status == "queued"
    assert project.get_run(stale.id).status == "interrupted"
    project.close()


def test_register_model_copies_files_and_records_lineage(
    project_dir: Path, tmp_path: Path
) -> None:
    project = Project.open(project_dir, create=True)
    run = project.create_run("selftest", {})
    src = tmp_path / "policy.zip"
    src.write_bytes(b"x" * 100)
    model = project.register_model(
        name="best",
        kind="sb3-policy",
        files=[src],
        source_run=run.id,
        env="CartPole-v1",
        algo="PPO",
        metrics={"eval/mean_reward": 500.0},
    )
    assert Path(model.path).read_bytes() == b"x" * 100
    listed = project.list_models()
    assert [m.id for m in listed] == [model.id]
    assert listed[0].size_bytes == 100 and listed[0].metrics == {
        "eval/mean_reward": 500.0
    }
    assert (run.id, model.id, "trained") in project.lineage(model.id)
    with pytest.raises(ProjectError, match="does not exist"):
        project.register_model(name="x", kind="k", files=[tmp_path / "missing.zip"])
    project.close()


def test_run_models_link_to_parents_by_the_files_they_came_from(
    project_dir: Path, tmp_path: Path
) -> None:
    """Jobs name parents by file: one registered in the same summary, or by
    an earlier run (a flow re-run whose upstream node was cached), becomes
    that model's id; anything else stays as written."""
    project = Project.open(project_dir, create=True)
    out = project_dir / "models"
    for name in ("run1.train", "run1.merge", "same-a", "same-b"):
        (out / name).mkdir()
        (out / name / "weights.bin").write_bytes(b"w")
    base = str(tmp_path / "base")

    def entry(file: str | Path, *parents: str | Path) -> dict[str, Any]:
        return {"name": "n", "kind": "k", "file": str(file), "parents": parents}

    ids, problems = project.register_run_models(
        "run1",
        {
            "models": [
                entry(out / "run1.train", base),
                # written another way: a trailing slash, a parent with ".."
                entry(f"{out}/run1.merge/", f"{out}/same-a/../run1.train", base),
            ]
        },
    )
    assert problems == []
    adapter, merged = ids
    assert (adapter, merged, "derived") in project.lineage(merged)
    assert (base, adapter, "derived") in project.lineage(adapter)
    # a later run: the merged model came from the cache, registered above
    gguf_file = tmp_path / "m.gguf"
    gguf_file.write_bytes(b"GGUF")
    (gguf,), _ = project.register_run_models(
        "run2", {"models": [entry(gguf_file, out / "run1.merge")]}
    )
    assert (merged, gguf, "derived") in project.lineage(gguf)
    # two registered models with one file name: no guess
    for name in ("same-a", "same-b"):
        project.register_model(name=name, kind="k", files=[out / name / "weights.bin"])
    ambiguous = str(out / "same-a" / "weights.bin")
    (other,), _ = project.register_run_models(
        "run3", {"models": [entry(gguf_file, ambiguous)]}
    )
    assert (ambiguous, other, "derived") in project.lineage(other)
    project.close()


def test_a_model_a_job_wrote_into_the_project_is_stored_once(
    project_dir: Path, tmp_path: Path
) -> None:
    """A model folder a job made with new_model_folder (a merge, an adapter)
    is adopted where it lies: one folder on disk, ``models/<id>/<name>``."""
    project = Project.open(project_dir, create=True)
    folder = new_model_folder(project_dir, "tuned-merged")
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 10)
    extra = tmp_path / "notes.txt"
    extra.write_text("n")
    (model_id,), problems = project.register_run_models(
        "run1",
        {
            "models": [
                {
                    "name": "tuned-merged",
                    "kind": "hf-merged",
                    "file": str(folder),
                    "extra_files": [str(extra)],
                }
            ]
        },
    )
    assert problems == []
    (model,) = project.list_models()
    assert Path(model.path) == folder and model.id == folder.parent.name == model_id
    assert sorted(p.name for p in (project_dir / "models").iterdir()) == [model_id]
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        "notes.txt",
        "tuned-merged",
    ]
    assert model.size_bytes == 11
    project.close()


def test_a_resumed_run_updates_its_model_instead_of_adding_one(
    project_dir: Path, tmp_path: Path
) -> None:
    """Stop then resume: the second registration of the run's model
    replaces its files and facts, keeping its id and lineage."""
    project = Project.open(project_dir, create=True)
    run = project.create_run("rl.train", {})
    src = tmp_path / "model.zip"

    def register(content: bytes, reward: float) -> list[str]:
        src.write_bytes(content)
        entry = {"name": "PPO x", "kind": "sb3-policy", "file": str(src)}
        ids, problems = project.register_run_models(
            run.id, {"models": [{**entry, "metrics": {"r": reward}}]}
        )
        assert problems == []
        return ids

    (first,) = register(b"stopped", 1.0)
    (second,) = register(b"finished", 2.0)
    assert second == first
    (model,) = project.list_models()
    assert Path(model.path).read_bytes() == b"finished"
    assert model.metrics == {"r": 2.0} and model.size_bytes == len(b"finished")
    assert project.lineage(first) == [(run.id, first, "trained")]
    assert sorted(p.name for p in (project_dir / "models").iterdir()) == [first]
    # an adapter a resumed LLM run wrote to a new folder replaces the old one
    other = project.create_run("llm.train", {})
    paths = []
    for text in ("a", "bb"):
        folder = new_model_folder(project_dir, "adapter")
        folder.mkdir(parents=True)
        (folder / "adapter.safetensors").write_text(text)
        entry = {"name": "adapter", "kind": "lora-adapter", "file": str(folder)}
        (adapter,), _ = project.register_run_models(other.id, {"models": [entry]})
        paths.append(Path(project.list_models()[-1].path))
    assert len(project.list_models()) == 2
    assert paths[0] == paths[1] and paths[1].parent.name == adapter
    assert (paths[1] / "adapter.safetensors").read_text() == "bb"
    assert sorted(p.name for p in (project_dir / "models").iterdir()) == sorted(
        [first, adapter]
    )
    project.close()


def test_missing_folder_is_one_clear_sentence(tmp_path: Path) -> None:
    with pytest.raises(
        ProjectError, match=r"^The project folder .*missing does not exist\.$"
    ):
        Project.open(tmp_path / "missing")


def test_read_only_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    Project.open(folder, create=True).close()
    folder.chmod(0o555)
    try:
        with pytest.raises(
            ProjectError, match=r"is read-only; choose a folder you can write to\.$"
        ):
            Project.open(folder)
    finally:
        folder.chmod(0o755)


def test_a_foreign_non_empty_folder_is_not_taken_over(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("hello")
    with pytest.raises(ProjectError, match="not an RL Studio project"):
        Project.open(tmp_path)


def test_a_damaged_database_is_reported(project_dir: Path) -> None:
    Project.open(project_dir, create=True).close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{project_dir}/studio.sqlite{suffix}").unlink(missing_ok=True)
    (project_dir / "studio.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ProjectError, match="damaged"):
        Project.open(project_dir)


def test_metrics_writer_is_durable_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(path)
    writer.append({"step": 1, "x": 1.0})
    writer.append({"step": 2, "x": 2.0})
    assert writer.flush() == [{"step": 1, "x": 1.0}, {"step": 2, "x": 2.0}]
    with open(path, "a") as fh:
        fh.write('{"step": 3, "x"')  # a crash mid-line
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    resumed = MetricsWriter(path)  # a resumed run cuts the torn tail first
    resumed.append({"step": 3, "x": 3.0})
    resumed.flush()
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]


def test_metrics_writer_syncs_at_most_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every flush writes (a killed job loses nothing flushed); fsync, which
    cost training about 0.5 %, happens once per interval and on request."""
    from engine.store import metrics

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(path)
    for step in range(20):
        writer.append({"step": step})
        writer.flush()
    assert [r["step"] for r in read_metrics(path)] == list(range(20))
    assert len(synced) <= 1  # the loop takes far less than SYNC_INTERVAL_S
    writer.flush(sync=True)
    assert len(synced) in (1, 2)
    count = len(synced)
    writer.flush(sync=True)  # nothing new: nothing to sync
    assert len(synced) == count
    monkeypatch.setattr(metrics, "SYNC_INTERVAL_S", 0.0)
    writer.append({"step": 20})
    writer.flush()
    assert len(synced) == count + 1


WRITER = r"""
import sys, json
from engine.store.atomic import atomic_write_json
folder = sys.argv[1]
big = "x" * 200_000
i = 0
print("ready", flush=True)
while True:
    for name in ("a", "b", "c"):
        atomic_write_json(f"{folder}/{name}.json", {"generation": i, "pad": big})
    i += 1
"""


def test_killing_the_writer_mid_save_leaves_old_or_new_never_truncated(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("a", "b", "c"):
        atomic_write_json(folder / f"{name}.json", {"generation": -1, "pad": ""})
    for kill_after in (0.05, 0.13, 0.21, 0.34, 0.5):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(kill_after)  # a random moment inside the write loop, not a wait
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for name in ("a", "b", "c"):
            data = json.loads((folder / f"{name}.json").read_text())  # never truncated
            assert data["generation"] >= -1
    # Whatever the kill left behind is only temporary files named for their
    # dead owner: opening keeps them while they are young (their owner could
    # be a slow writer on another machine), the sweep takes them once old.
    left = {p.name for p in folder.iterdir() if ".tmp-" in p.name}
    Project.open(folder, create=True).close()
    assert left <= {p.name for p in folder.iterdir()}
    assert all(temp_owner(name) is not None for name in left)
    remove_stale_temp_files(folder, older_than=0)
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name]


def test_hardware_recommendations_scale_with_gpu_memory() -> None:
    from engine.hardware import GpuInfo, recommend

    cpu = recommend([], physical_cores=2, logical_cores=4, cpu_bf16=False)
    assert (cpu.device, cpu.dtype, cpu.vec_envs, cpu.torch_threads) == (
        "cpu",
        "fp32",
        4,
        2,
    )
    small = recommend([GpuInfo(0, "small", "cuda", 8 * 2**30, False)], 8, 16, False)
    big = recommend([GpuInfo(0, "big", "cuda", 80 * 2**30, True)], 8, 16, False)
    assert (
        small.device == "cuda"
        and small.dtype == "fp16"
        and small.gradient_checkpointing
    )
    assert big.dtype == "bf16" and not big.gradient_checkpointing
    assert big.batch_size > small.batch_size and big.lora_rank > small.lora_rank
    assert big.grpo_num_generations > small.grpo_num_generations


def test_a_version_1_project_gains_agent_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project made before model versions opens with its models kept and
    the new columns added; versions number per agent."""
    import sqlite3

    root = tmp_path / "old"
    root.mkdir()
    db = sqlite3.connect(root / "studio.sqlite")
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE models (id TEXT PRIMARY KEY, name TEXT NOT NULL,"
        " kind TEXT NOT NULL, path TEXT NOT NULL, created REAL NOT NULL,"
        " source_run TEXT, env TEXT NOT NULL DEFAULT '', algo TEXT NOT NULL"
        " DEFAULT '', base TEXT NOT NULL DEFAULT '', metrics TEXT NOT NULL"
        " DEFAULT '{}', size_bytes INTEGER NOT NULL DEFAULT 0);"
        "INSERT INTO models (id, name, kind, path, created)"
        " VALUES ('m-old', 'old', 'sb3-policy', 'models/m-old/model.zip', 1.0);"
    )
    db.commit()
    db.close()
    project = Project.open(root)
    (old,) = project.list_models()
    assert (old.id, old.agent, old.version) == ("m-old", "", 0)
    assert project.add_version("pole", "m-old").version == 1
    file = tmp_path / "model.zip"
    file.write_bytes(b"zip")
    newer = project.register_model(name="new", kind="sb3-policy", files=[file])
    assert project.add_version("pole", newer.id).version == 2
    with pytest.raises(ProjectError, match="already v2 of agent 'pole'"):
        project.add_version("other", newer.id)
    project.close()
    reopened = Project.open(root)
    assert [m.version for m in reopened.versions("pole")] == [1, 2]
    reopened.close()
    from argparse import Namespace

    from engine.store import cli

    assert cli.run(Namespace(project=root, json=False)) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[:4] == ["ID", "NAME", "KIND", "AGENT"]
    assert "pole v2" in listed[2]


@pytest.mark.parametrize("create", [False, True])
def test_a_project_folder_name_too_long_is_one_sentence(
    tmp_path: Path, create: bool
) -> None:
    """The protocol fuzz found a raw OSError (ENAMETOOLONG) from project.open."""
    folder = tmp_path / ("x" * 300)
    with pytest.raises(ProjectError) as info:
        Project.open(folder, create=create)
    assert str(info.value) == (
        f"The project folder {folder} cannot be used (File name too long)."
    )
    assert list(tmp_path.iterdir()) == []
