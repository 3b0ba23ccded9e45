"""Atomic file writes: a reader sees the old file or the new one, never half.

The data goes to a temporary file in the same folder, is flushed and fsync'ed,
then renamed over the target (atomic on POSIX and on Windows via
``os.replace``); the folder is fsync'ed so the rename survives a power cut.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

TMP_MARK = ".tmp-"
"""Temporary files carry this in their name; a crashed writer leaves them
behind and ``remove_stale_temp_files`` sweeps them."""


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{TMP_MARK}", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON (NaN refused: other readers choke on it)."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def remove_stale_temp_files(folder: str | os.PathLike[str]) -> int:
    """Delete temporary files left below ``folder`` by crashed writers."""
    removed = 0
    for p in Path(folder).rglob(f"*{TMP_MARK}*"):
        if p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()
                removed += 1
    return removed


def _fsync_dir(folder: Path) -> None:
    # Directories cannot be opened for fsync on Windows; the rename is still
    # atomic there, only its durability across power loss is weaker.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
