"""Atomic file writes: a reader sees the old file or the new one, never half.

The data goes to a temporary file in the same folder, is flushed and fsync'ed,
then renamed over the target (atomic on POSIX and on Windows via
``os.replace``); the folder is fsync'ed so the rename survives a power cut.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

# The one implementation, in the stdlib-only module the GUI may import too;
# re-exported here for the engine.
from engine.errors import EngineError
from engine.flow import TMP_MARK as TMP_MARK
from engine.flow import atomic_write_bytes as atomic_write_bytes
from engine.flow import atomic_write_text as atomic_write_text


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON (NaN refused: other readers choke on it)."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def make_parent_folder(out_path: Path) -> None:
    """Create the folder ``out_path`` goes in; an EngineError with one
    sentence when it cannot be made (a file in the way, no permission)."""
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(
            f"Cannot write {out_path}: {out_path.parent} cannot be made a folder "
            f"({exc.strerror or exc})."
        ) from None


def remove_stale_temp_files(folder: str | os.PathLike[str]) -> int:
    """Delete temporary files left below ``folder`` by crashed writers."""
    removed = 0
    for p in Path(folder).rglob(f"*{TMP_MARK}*"):
        if p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()
                removed += 1
    return removed
