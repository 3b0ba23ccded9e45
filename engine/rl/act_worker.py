"""Answer ``act`` requests with saved SB3 policies in a worker process, so
the process serving them (``serve-http``) never imports torch.

:class:`ActWorker` keeps a :class:`engine.line_worker.LineWorker` running
``python -m engine.rl.act_worker``: ``{"path", "observation",
"deterministic"}`` gets ``{"action": ...}`` or ``{"error": sentence}``. The
worker loads each policy once through :func:`engine.rl.policy.load_policy`
and keeps it while its file is unchanged; a file that is gone is an error
(the policy is dropped).

This module imports nothing heavy at the top.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from engine import line_worker
from engine.errors import ConfigError, EngineError

ACT_TIMEOUT_S = 120.0
"""Longest one request may take (starting the worker and loading included)."""
MAX_CACHED = 16
"""Policies kept loaded at once (the least recently used goes first)."""


class ActWorker:
    """The service's handle on the act worker (thread-safe: one request at
    a time)."""

    def __init__(self, project_dir: Path, timeout_s: float = ACT_TIMEOUT_S) -> None:
        self._worker = line_worker.LineWorker(
            "engine.rl.act_worker",
            [str(project_dir)],
            label="act worker",
            timeout_s=timeout_s,
        )

    @property
    def pid(self) -> int | None:
        return self._worker.pid

    def act(self, path: Path, observation: Any, deterministic: bool = True) -> Any:
        """The policy's action for one observation (as JSON: a number or a
        list); ConfigError naming a wrong field, EngineError otherwise."""
        answer = self._worker.request(
            {
                "path": str(path),
                "observation": observation,
                "deterministic": deterministic,
            }
        )
        return answer.get("action")

    def close(self) -> None:
        self._worker.close()


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
    if policy.recurrent:
        # Its action depends on the steps before, which requests do not carry.
        raise EngineError(
            f"{path.name} holds a recurrent policy (RecurrentPPO), whose actions "
            "depend on the episode's earlier steps, which act requests do not "
            "carry; evaluate or play it instead."
        )
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
    line_worker.serve(
        lines,
        out,
        lambda request: {"action": act(request, cache, project_dir)},
        failure="The policy could not act",
    )


if __name__ == "__main__":
    from engine.jobs.context import private_event_stream

    serve(sys.stdin, private_event_stream(), sys.argv[1] if len(sys.argv) > 1 else "")
