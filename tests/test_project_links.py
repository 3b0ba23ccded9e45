"""Containment follows links: a folder the engine writes in a project
(``runs/``, ``data/``, ``models/``, the flow cache, ...) that is a symbolic
link leading outside the project is refused in one sentence when the
project opens, and again when a run starts (a link made while the project
was open); nothing is written where it leads, and nothing saved in the
project is lost."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ProjectError
from engine.jobs.supervisor import Supervisor
from engine.store.project import WRITTEN_PATHS, Project

ROOT = Path(__file__).resolve().parents[1]

FOLDERS = [
    "runs",
    "data",
    "models",
    "envs",
    "flows",
    "data/flow-cache",
    "data/traces",
    "data/datasets",
    "data/reward_models",
    "data/trajectories.sqlite",
    "studio.sqlite-wal",
    "runs/<run>",
    "models/<model>",
    "data/flow-cache/<flow>",
]
"""What the cases link out: each folder (or file) the engine writes, and an
entry of each folder whose entries it makes."""


def saved_project(root: Path) -> tuple[str, str]:
    """A project holding a run, a model, an env, a flow cache entry and a
    trace; (its run id, its model id)."""
    project = Project.open(root, create=True)
    try:
        run = project.create_run("rl.train", {"env": "CartPole-v1"}, "saved run")
        (Path(run.run_dir) / "metrics.jsonl").write_text('{"step": 1}\n')
        weights = root.parent / "weights.bin"
        weights.write_bytes(b"w" * 100)
        model = project.register_model(name="saved", kind="sb3-policy", files=[weights])
        (root / "envs" / "maze.env.json").write_text('{"name": "maze"}')
        (root / "data" / "flow-cache" / "train").mkdir(parents=True)
        (root / "data" / "flow-cache" / "train" / "n1.json").write_text("{}")
        (root / "data" / "traces").mkdir()
        (root / "data" / "traces" / "agent-a.jsonl").write_text('{"episode": 0}\n')
        return run.id, model.id
    finally:
        project.close()


def snapshot(root: Path) -> dict[str, str]:
    """Every file below ``root`` (links not followed) and a digest of it."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return out


def link_out(root: Path, rel: str, outside: Path) -> tuple[Path, Path | None]:
    """Make ``rel`` a link to ``outside`` (an empty folder, or a missing file
    for a file); what was there is moved aside, to be put back. Returns the
    link and the aside copy."""
    link = root / rel
    aside = None
    if os.path.lexists(link):
        aside = root.parent / "aside" / rel.replace("/", "_")
        aside.parent.mkdir(exist_ok=True)
        shutil.move(link, aside)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=outside.suffix == "")
    return link, aside


def put_back(link: Path, aside: Path | None) -> None:
    link.unlink()
    if aside is not None:
        shutil.move(aside, link)


@pytest.mark.parametrize("rel", FOLDERS)
def test_a_folder_linked_outside_is_refused_when_the_project_opens(
    tmp_path: Path, rel: str
) -> None:
    root = tmp_path / "project"
    run_id, model_id = saved_project(root)
    rel = rel.replace("<run>", run_id).replace("<model>", model_id)
    rel = rel.replace("<flow>", "train")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = outside / "db.sqlite" if "sqlite" in rel else outside
    link, aside = link_out(root, rel, target)
    before = snapshot(root)

    with pytest.raises(ProjectError) as err:
        Project.open(root, create=True)
    message = str(err.value)
    assert message.startswith(f"{rel} in the project {root} leads outside it"), message
    assert str(outside) in message and "\n" not in message and message.endswith(".")
    assert list(outside.iterdir()) == [], "something was written outside"
    assert snapshot(root) == before, "the refused open changed the project"

    put_back(link, aside)
    project = Project.open(root)
    try:
        assert [r.id for r in project.list_runs()] == [run_id]
        assert [m.id for m in project.list_models()] == [model_id]
        assert (root / "envs" / "maze.env.json").read_text() == '{"name": "maze"}'
    finally:
        project.close()


def test_a_dangling_link_is_refused_and_not_created(tmp_path: Path) -> None:
    root = tmp_path / "project"
    Project.open(root, create=True).close()
    missing = tmp_path / "gone" / "runs"
    shutil.rmtree(root / "runs")
    (root / "runs").symlink_to(missing, target_is_directory=True)
    with pytest.raises(ProjectError, match=r"runs in the project .* leads outside"):
        Project.open(root)
    assert not missing.exists() and not missing.parent.exists()


def test_links_that_stay_inside_are_fine(tmp_path: Path) -> None:
    """A folder linked to another place in the project, and a file of the
    user's in ``data/`` linked from elsewhere (a mock data file an env
    reads), are not the engine's writing places leaving the project."""
    root = tmp_path / "project"
    Project.open(root, create=True).close()
    (root / "store").mkdir()
    shutil.rmtree(root / "runs")
    (root / "runs").symlink_to(root / "store", target_is_directory=True)
    mock = tmp_path / "mock.json"
    mock.write_text("[]")
    (root / "data" / "mock.json").symlink_to(mock)
    project = Project.open(root)
    try:
        run = project.create_run("rl.train", {}, "inside")
        assert (root / "store" / run.id).is_dir()
    finally:
        project.close()


@pytest.mark.parametrize("rel", ["runs", "data/flow-cache", "models", "data"])
def test_a_link_made_while_the_project_is_open_stops_the_next_run(
    tmp_path: Path, rel: str
) -> None:
    """The supervisor's ``start_run`` (what the studio, ``serve-http`` and
    ``train`` call) refuses before the run's folder or row is made."""
    root = tmp_path / "project"
    supervisor = Supervisor(lambda msg: None)
    try:
        project = supervisor.open_project(str(root), create=True, with_examples=False)
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        link_out(root, rel, outside)
        with pytest.raises(ProjectError, match=f"^{rel} in the project"):
            supervisor.start_run("rl.train", {"env": "CartPole-v1", "total_steps": 64})
        assert list(outside.iterdir()) == []
        assert project.list_runs() == []
    finally:
        supervisor.shutdown(1.0)


def test_a_headless_train_on_a_linked_project_says_so_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """``rl-studio-engine train --project`` with ``runs/`` linked outside:
    exit 2, one sentence, no traceback, nothing outside."""
    root = tmp_path / "project"
    Project.open(root, create=True).close()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link_out(root, "runs", outside)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "engine.cli", "train", "--env", "CartPole-v1"),
            *("--project", str(root), "--steps", "64"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "runs in the project" in lines[0], proc.stderr
    assert "leads outside it" in lines[0] and "Traceback" not in proc.stderr
    assert list(outside.iterdir()) == []


def test_every_written_path_is_checked() -> None:
    """The folders the cases above link out are among what is checked."""
    for rel in FOLDERS:
        if "<" not in rel:
            assert rel in WRITTEN_PATHS, rel
