"""A sweep's worker processes on one machine, handled as one group.

The command starts them before its study is ready, so their start-up
(torch, its compiler stack, Stable-Baselines3 and Optuna: about 5 CPU
seconds each) overlaps the making of the study; it then names the study to
them (:meth:`WorkerGroup.release`) and they take its queued trials.

On Linux it starts one process for K workers: that process warms up once
and, when the study is named, forks the other K - 1 (:func:`run_forked`).
Started as K processes on a 2-core machine, two warm-ups and the command's
own preparation shared the two cores and the first trials began a second
later than one worker's; forked, every worker starts when the one warm-up
ends. Elsewhere (no ``fork``, or frameworks that are not safe to fork after
import, as on macOS) each worker is a process of its own.

The workers of a process live in its session and process group, which the
command signals as a whole: one SIGINT reaches every worker once and stops
its trial with a checkpoint. A forked worker dies with the process that
forked it, so killing the group's first process never leaves trials running
unwatched.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

FORKS = sys.platform.startswith("linux")
"""Whether one warmed-up process forks a machine's workers (see the module)."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerGroup:
    """The ``count`` workers of a sweep on this machine, started at once and
    waiting for the study (:meth:`release`), or ended unused (:meth:`drop`).
    ``count`` may be 0 (a job whose settings are not checked yet)."""

    def __init__(self, count: int) -> None:
        self.count = count
        cmd = [sys.executable, "-m", "engine.rl.tune_worker", "--await-study"]
        sizes = ([count] if count else []) if FORKS else [1] * count
        # A session of their own: a Ctrl-C in the terminal does not reach
        # them; stop() forwards it once (a second SIGINT would abort their
        # trials without a checkpoint).
        self._procs = [
            subprocess.Popen(
                [*cmd, str(n)], start_new_session=True, stdin=subprocess.PIPE
            )
            for n in sizes
        ]

    @property
    def processes(self) -> int:
        """The processes this process started (one per machine when forking)."""
        return len(self._procs)

    @property
    def pids(self) -> list[int]:
        """The started processes' ids, each also its process group's."""
        return [p.pid for p in self._procs]

    def release(self, storage_url: str, study: str, project_dir: Path) -> None:
        """Name the study to the waiting workers (its storage is made and
        checked: they skip that); they start taking its trials."""
        line = json.dumps(
            {
                "storage": storage_url,
                "study": study,
                "project": str(project_dir),
                "sharing": self.count,
            }
        )
        for p in self._procs:
            assert p.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                p.stdin.write(line.encode() + b"\n")
                p.stdin.close()

    def drop(self) -> None:
        """End workers that were never released (the sweep did not start);
        they have only imported modules, so they are killed, not waited for."""
        for p in self._procs:
            assert p.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                p.stdin.close()
            self._signal(p, signal.SIGKILL)
        for p in self._procs:
            p.wait()

    def running(self) -> bool:
        return any(p.poll() is None for p in self._procs)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, waking as soon as the last process ends (a
        sweep's end is not held up by a poll interval)."""
        alive = [p for p in self._procs if p.poll() is None]
        if len(alive) == 1:
            with contextlib.suppress(subprocess.TimeoutExpired):
                alive[0].wait(timeout=seconds)
        elif alive:
            time.sleep(seconds)

    def stop(self, timeout: float = 60) -> None:
        """SIGINT every worker once (its trial stops with a checkpoint);
        workers still there after ``timeout`` seconds are killed."""
        for p in self._procs:
            if p.poll() is None:
                self._signal(p, signal.SIGINT)
        deadline = time.monotonic() + timeout
        for p in self._procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.wait()

    def exit_codes(self) -> list[int]:
        """The ended processes' exit codes; a forking process's is its own,
        else its first failed fork's."""
        return [p.returncode for p in self._procs if p.returncode is not None]

    @staticmethod
    def _signal(p: subprocess.Popen[bytes], sig: int) -> None:
        """``sig`` to ``p``'s process group: ``p`` and the workers it forked."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)


def run_forked(count: int, work: Callable[[], int]) -> int:
    """``work`` in this process and in ``count - 1`` forks of it, at once;
    this process's exit code, else the first failed fork's. Fork before
    opening any storage or starting a thread: a fork copies neither."""
    forks = []
    leader = os.getpid()
    for _ in range(count - 1):
        pid = os.fork()
        if pid == 0:
            os._exit(_forked(work, leader))  # never returns into the caller's stack
        forks.append(pid)
    try:
        code = work()
    finally:
        # A stop (one SIGINT to the group) may come while the forks still
        # train or save their checkpoints: this process's end would kill
        # them (PR_SET_PDEATHSIG), so it waits for them whatever comes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        codes = [_exit_code(os.waitpid(pid, 0)[1]) for pid in forks]
    return code or next((c for c in codes if c), 0)


def _forked(work: Callable[[], int], leader: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    # Killed with the process that forked it (SIGKILL, the OOM killer): no
    # orphan goes on training a trial nobody watches.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != leader:  # it died before the line above
        return 1
    _reseed()
    try:
        return work()
    except BaseException:  # what would end the process with a traceback
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _reseed() -> None:
    """Fresh random states for a fork (Python's ``random`` reseeds itself):
    an unseeded trial must not start from the same network weights as its
    sibling's. A seeded trial seeds them itself."""
    import numpy as np
    import torch

    np.random.seed()
    torch.seed()


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by signal -code
