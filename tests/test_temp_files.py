"""Temporary files belong to their writer: unique names that carry the owner's
pid, removed by the writer when it fails, and swept at start-up only when
provably dead (owner gone and older than the grace period). User files whose
names merely contain ``.tmp-`` are never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.store.atomic import (
    STALE_TEMP_AGE_S,
    atomic_write_bytes,
    remove_stale_temp_files,
    temp_owner,
    temp_path,
)
from engine.store.project import Project

OLD = time.time() - STALE_TEMP_AGE_S - 60


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


def age(path: Path, mtime: float = OLD) -> Path:
    os.utime(path, (mtime, mtime), follow_symlinks=False)
    return path


def test_temp_names_are_unique_and_name_their_owner(tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    names = {temp_path(target).name for _ in range(100)}
    assert len(names) == 100
    name = temp_path(target, "copy").name
    assert name.startswith(".model.gguf.tmp-copy-") and temp_owner(name) == os.getpid()
    for user_file in ("results.tmp-final.csv", "x.tmp-y", ".x.tmp-y", ".a.tmp-1-xyz"):
        assert temp_owner(user_file) is None


def test_the_atomic_writer_removes_its_temp_file_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("old")
    with pytest.raises(TypeError):
        atomic_write_bytes(tmp_path / "a.json", "not bytes")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old"


def test_start_up_sweeps_only_what_it_can_prove_dead(tmp_path: Path) -> None:
    project = Project.open(tmp_path / "p", create=True)
    project.close()
    root = project.path
    gone = dead_pid()
    keep: list[Path] = []
    swept: list[Path] = []

    def make(path: Path, folder: bool = False) -> Path:
        if folder:
            path.mkdir()
            (path / "inner.bin").write_bytes(b"x")
        else:
            path.write_bytes(b"x")
        return path

    def named(target: Path, pid: int, purpose: str = "") -> Path:
        name = temp_path(target, purpose).name.replace(f"-{os.getpid()}-", f"-{pid}-")
        return target.with_name(name)

    data, models = root / "data", root / "models"
    # Provably dead: owner gone and old; a file and a folder.
    swept.append(age(make(named(data / "a.json", gone))))
    swept.append(age(make(named(models / "m-1", gone, "copy"), folder=True)))
    swept.append(age(make(named(models / "m-2", gone, "deleted"), folder=True)))
    # Leftover model folders of older versions: no owner, so age alone.
    swept.append(age(make(models / "m-3.tmp-deleted", folder=True)))
    swept.append(age(make(models / "m-4.tmp-copy", folder=True)))
    # Owner alive (this process), however old.
    keep.append(age(make(named(data / "b.json", os.getpid()))))
    # Owner gone but young: maybe a slow writer on a machine sharing the folder.
    keep.append(make(named(data / "c.json", gone)))
    keep.append(make(models / "m-5.tmp-deleted", folder=True))
    # User files, however old.
    keep.append(age(make(data / "results.tmp-final.csv")))
    keep.append(age(make(data / "x.tmp-y")))
    keep.append(age(make(root / "envs" / ".notes.tmp-draft")))
    keep.append(age(make(data / "m-6.tmp-deleted")))  # not in models/
    # A stale temp name that is a link out: the link goes, its target stays.
    target = make(tmp_path / "outside.bin")
    link = named(data / "d.json", gone)
    link.symlink_to(target)
    swept.append(age(link))

    Project.open(root).close()
    assert [p for p in swept if os.path.lexists(p)] == []
    assert [p for p in keep if not p.exists()] == []
    assert target.read_bytes() == b"x"
    # Without a grace period the young dead leftovers go; a live owner's
    # temporary file and the user's files still stay.
    assert remove_stale_temp_files(root, older_than=0) == 2
    assert [p for p in keep if not p.exists()] == keep[1:3]


def test_an_export_removes_what_a_killed_export_of_its_target_left(
    tmp_path: Path,
) -> None:
    """A killed ``export-gguf`` leaves ``.m.gguf.tmp-<pid>-<tag>`` beside its
    target; the next export of that target removes it once the pid is gone,
    and touches nothing else in the folder."""
    from engine_harness import ROOT
    from gguf_fuzz_support import write_tiny_model

    model = write_tiny_model(tmp_path / "model")
    out_dir = tmp_path / "home"
    out_dir.mkdir()
    dead = out_dir / f".m.gguf.tmp-{dead_pid()}-0a1b2c3d"
    dead.write_bytes(b"x" * 1000)
    alive = out_dir / f".m.gguf.tmp-{os.getpid()}-0a1b2c3d"
    alive.write_bytes(b"mine")
    other = out_dir / f".other.gguf.tmp-{dead_pid()}-0a1b2c3d"
    other.write_bytes(b"another export's")
    user = out_dir / "m.gguf.tmp-notes.txt"
    user.write_text("a user's file")
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "export-gguf", str(model),
         "--out", str(out_dir / "m.gguf"), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["m.gguf", alive.name, other.name, user.name]
    )
