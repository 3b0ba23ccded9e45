"""Shared by the export subcommands: the cleanup of what a killed export left
beside its target (their progress bar is ``engine.progress.ProgressBar``)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def remove_dead_exports(target: Path) -> int:
    """Remove the temporary files and folders that exports of ``target``
    killed before they finished left beside it (``.<name>.tmp-<pid>-...``,
    their owner gone); returns how many. Only ``target``'s own temporary
    names are touched: the folder may be anyone's (a home directory)."""
    from engine.store.atomic import pid_alive, remove_temp, temp_owner

    removed = 0
    prefix = f".{target.name}.tmp-"
    with contextlib.suppress(OSError):
        for path in target.parent.iterdir():
            owner = temp_owner(path.name) if path.name.startswith(prefix) else None
            if owner is not None and not pid_alive(owner):
                removed += remove_temp(path)
    return removed
