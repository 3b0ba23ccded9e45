"""A sweep's worker process: ``python -m engine.rl.tune_worker``.

:class:`engine.rl.sweep_workers.WorkerGroup` starts it with ``--await-study
COUNT``; a worker on another machine is ``rl-studio-engine tune --study
NAME --storage URL``. A module of its own: run as ``__main__``,
``engine.rl.tune`` would declare the sweep's job kinds a second time when
the trials' validation imports every kind.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from engine.errors import EngineError
from engine.jobs.memory import keep_freed_memory
from engine.jobs.priority import match_session_priority
from engine.rl.sweep_workers import run_forked
from engine.rl.tune_storage import storage_failures
from engine.rl.tune_trials import work


def warm_up() -> None:
    """Import what a worker's first trial needs (torch, its compiler stack
    that the first optimizer pulls in, Stable-Baselines3, Optuna's storage)
    while the study is still being made."""
    import optuna.storages._rdb.models  # noqa: F401
    import stable_baselines3  # noqa: F401
    import torch._dynamo  # noqa: F401

    import engine.rl.train  # noqa: F401


def await_study(count: int) -> int:
    """``count`` workers started by :class:`WorkerGroup` as one process: warm
    up, then read the study from stdin (one JSON line) and work on it, in
    this process and ``count - 1`` forks of it; nothing read (the command
    stopped before the study was made): end at once."""
    warm_up()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    given = json.loads(line)
    study = partial(
        work,
        given["storage"],
        given["study"],
        Path(given["project"]),
        checked=True,
        sharing=given["sharing"],
    )
    return run_forked(count, partial(_reported, study, given["storage"]))


def _reported(work: Callable[[], int], storage_url: str) -> int:
    """A worker's exit code, with its error in one sentence."""
    try:
        with storage_failures(storage_url):
            return work()
    except EngineError as exc:
        print(f"rl-studio-engine tune worker: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    """A worker process: ``python -m engine.rl.tune_worker STORAGE STUDY PROJECT N
    [--checked]`` (``--checked``: the storage's tables are made and checked;
    ``N`` names it in the process list), or ``python -m engine.rl.tune_worker
    --await-study COUNT`` (:func:`await_study`)."""
    argv = sys.argv[1:] if argv is None else argv
    # Its own session (WorkerGroup): nice as the job that started it, where
    # Linux looks first (the session), so a sweep yields the CPU to the studio
    # as a training run does.
    match_session_priority()
    keep_freed_memory()
    if argv[0] == "--await-study":
        try:
            return await_study(int(argv[1]))
        except KeyboardInterrupt:  # stopped while warming up
            return 130
    checked = "--checked" in argv
    storage_url, study_name, project_dir, _ = [a for a in argv if a != "--checked"]
    return _reported(
        partial(work, storage_url, study_name, Path(project_dir), checked=checked),
        storage_url,
    )


if __name__ == "__main__":
    raise SystemExit(main())
