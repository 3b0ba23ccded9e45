"""Atomic file writes: a reader sees the old file or the new one, never half.

The data goes to a temporary file in the same folder, is flushed and fsync'ed,
then renamed over the target (atomic on POSIX and on Windows via
``os.replace``); the folder is fsync'ed so the rename survives a power cut.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

# The one implementation, in the stdlib-only module the GUI may import too
# (engine.contract); re-exported here for the engine.
from engine.contract import TMP_MARK as TMP_MARK
from engine.contract import atomic_write_bytes as atomic_write_bytes
from engine.contract import atomic_write_json as atomic_write_json
from engine.contract import atomic_write_text as atomic_write_text
from engine.contract import temp_owner as temp_owner
from engine.contract import temp_path as temp_path
from engine.errors import EngineError
from engine.untrusted import UntrustedDataError, read_file


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


SMALL_FILE_BYTES = 1024 * 1024
"""Default size limit of a small file read whole (a token, a model's
metadata)."""


def read_small_text(
    path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE_BYTES
) -> str:
    """The UTF-8 text of the regular file ``path`` of at most ``limit``
    bytes, read without ever reading more; an EngineError with one sentence
    starting with ``what`` when it is missing, a folder, a device
    (``/dev/zero``), a FIFO, larger, unreadable or not UTF-8."""
    try:
        data = read_file(path, what, limit)
    except UntrustedDataError as exc:
        raise EngineError(str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EngineError(f"{what} is not UTF-8 text.") from None


def json_safe(value: Any) -> Any:
    """``value`` with every NaN and infinity in it (in dicts, lists and
    tuples; numpy scalars included) replaced by None, which JSON can hold:
    a metric SB3 computes as NaN (the explained variance of equal returns)
    is stored as null instead of failing the write."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not isinstance(value, bool | int | float | str) and hasattr(value, "item"):
        try:
            scalar = value.item()  # a numpy or torch scalar
        except (ValueError, RuntimeError):
            return value
        return json_safe(scalar) if isinstance(scalar, int | float) else value
    return value


STALE_TEMP_AGE_S = 3600.0
"""Seconds a temporary file or folder whose owner is gone is kept before
start-up cleanup removes it (the pid may belong to another machine sharing
the folder, or have been reused)."""

LEGACY_MODEL_TEMP = (".tmp-deleted", ".tmp-copy")
"""Suffixes of the model folders older versions set aside in ``models/``
while deleting or registering a model; they name no owner, so only their age
proves them dead."""


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (a zombie counts)."""
    import psutil

    return pid > 0 and bool(psutil.pid_exists(pid))


def is_stale_temp(path: Path, older_than: float = STALE_TEMP_AGE_S) -> bool:
    """Whether ``path`` is provably a dead writer's leftover: a
    :func:`temp_path` name whose owner pid is gone (or a legacy model
    folder) and unchanged for ``older_than`` seconds. Anything else, a user's
    ``results.tmp-final.csv`` included, is not."""
    owner = temp_owner(path.name)
    if owner is None:
        legacy = path.parent.name == "models" and path.name.endswith(LEGACY_MODEL_TEMP)
        if not legacy:
            return False
    elif pid_alive(owner):
        return False
    try:
        age = time.time() - path.lstat().st_mtime
    except OSError:
        return False
    return age >= older_than


def remove_stale_temp_files(
    folder: str | os.PathLike[str], older_than: float = STALE_TEMP_AGE_S
) -> int:
    """Remove the temporary files and folders below ``folder`` that crashed
    writers left (:func:`is_stale_temp`); returns how many. Symbolic links
    are neither followed nor their targets touched."""
    removed = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            if not is_stale_temp(path, older_than):
                continue
            if name in dirnames:
                dirnames.remove(name)  # do not walk into what goes away
            removed += remove_temp(path)
    return removed


def remove_temp(path: Path) -> bool:
    """Remove a temporary file or folder (a link itself, never its target);
    whether it is gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
    return not path.exists()
