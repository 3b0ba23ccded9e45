"""Answer ``act`` requests with saved SB3 policies in a worker process, so
the process serving them (``serve-http``) never imports torch.

:class:`ActWorker` starts ``python -m engine.rl.act_worker`` on the first
request and keeps it. They talk JSON Lines: ``{"path", "observation",
"deterministic"}`` gets ``{"action": ...}`` or ``{"error": sentence}``. The
worker loads each policy once through :func:`engine.rl.policy.load_policy`
and keeps it while its file is unchanged; a file that is gone is an error
(the policy is dropped). A worker that dies costs one request an error; the
next starts a fresh one.

This module imports nothing heavy at the top.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from engine.errors import ConfigError, EngineError

ACT_TIMEOUT_S = 120.0
"""Longest one request may take (starting the worker and loading included)."""
MAX_CACHED = 16
"""Policies kept loaded at once (the least recently used goes first)."""


class ActWorker:
    """The service's handle on the act worker (thread-safe: one request at
    a time)."""

    def __init__(self, project_dir: Path, timeout_s: float = ACT_TIMEOUT_S) -> None:
        self._project_dir = project_dir
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.rl.act_worker", str(self._project_dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        return self._proc

    def act(self, path: Path, observation: Any, deterministic: bool = True) -> Any:
        """The policy's action for one observation (as JSON: a number or a
        list); EngineError with the worker's sentence otherwise."""
        request = json.dumps(
            {
                "path": str(path),
                "observation": observation,
                "deterministic": deterministic,
            }
        )
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(self._timeout_s, kill)
            timer.start()
            try:
                proc.stdin.write(request + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = ""
            finally:
                timer.cancel()
            if not line:
                code = proc.wait()
                self._proc = None
                why = (
                    f"took longer than {self._timeout_s:.0f} s and was stopped"
                    if timed_out.is_set()
                    else f"stopped with exit code {code}"
                )
                raise EngineError(
                    f"The act worker {why}; the next request starts a new one."
                )
        try:
            answer: dict[str, Any] = json.loads(line)
        except ValueError:
            raise EngineError("The act worker sent an unreadable answer.") from None
        if "error" in answer:
            if answer.get("field"):
                # The request is wrong, not the policy.
                raise ConfigError(str(answer["field"]), str(answer["error"]))
            raise EngineError(str(answer["error"]))
        return answer.get("action")

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the worker ends when its input does
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------ the worker
def act(
    request: dict[str, Any], cache: dict[str, tuple[float, Any]], project_dir: str
) -> Any:
    """One request's action; ``cache`` maps a path to (mtime, policy)."""
    import numpy as np

    from engine.rl.policy import load_policy

    path = Path(str(request["path"]))
    key = str(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        cache.pop(key, None)
        raise EngineError(f"The policy file {path} does not exist.") from None
    held = cache.pop(key, None)
    if held is None or held[0] != mtime:
        held = (mtime, load_policy(path, project_dir=project_dir or None))
        while len(cache) >= MAX_CACHED:
            cache.pop(next(iter(cache)))
    cache[key] = held  # most recently used last
    policy = held[1]
    space = policy.observation_space
    try:
        obs = np.asarray(request["observation"], dtype=space.dtype)
    except (TypeError, ValueError):
        raise ConfigError(
            "observation", f"observation must be numbers shaped {list(space.shape)}."
        ) from None
    if space.shape is not None and obs.shape != tuple(space.shape):
        raise ConfigError(
            "observation",
            f"observation must be shaped {list(space.shape)}, not {list(obs.shape)}.",
        )
    action, _ = policy.predict(obs, deterministic=bool(request["deterministic"]))
    return np.asarray(action).tolist()


def serve(lines: TextIO, out: TextIO, project_dir: str) -> None:
    import torch

    # One small network per request: threads only add hand-offs.
    torch.set_num_threads(1)
    cache: dict[str, tuple[float, Any]] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            answer: dict[str, Any] = {
                "action": act(json.loads(line), cache, project_dir)
            }
        except ConfigError as exc:
            answer = {"error": str(exc), "field": exc.field}
        except EngineError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # a policy that fails to load or predict
            answer = {"error": f"The policy could not act: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    from engine.jobs.context import private_event_stream

    serve(sys.stdin, private_event_stream(), sys.argv[1] if len(sys.argv) > 1 else "")
