"""The process a python-kind env runs in: ``python -m engine.envs.env_worker``.

The only place a user's env file is imported. The engine (and a job, a
preview, an env check) talks to it through :class:`engine.envs.remote.RemoteEnv`
over JSON Lines on stdin/stdout, one answer per request, values encoded by
:mod:`engine.envs.env_wire`:

* ``{"op": "load", "file", "class"}`` imports the file and finds the class:
  ``{"ok": {"parameters", "render_modes", "render_fps", "action_masks"}}``;
* ``{"op": "make", "kwargs"}`` builds the env: ``{"ok": {"observation_space",
  "action_space", "render_mode", "metadata"...}}``;
* ``reset {seed, options}``, ``step {action}``, ``render``, ``action_masks``,
  ``close``: ``{"ok": value}``, the value exactly as the env returned it.

A failure is ``{"error": {"kind": "spec", "field", "message"}}`` (the file or
class is wrong) or ``{"error": {"kind": "env", "type", "message"}}`` (the
env's own code raised; the traceback goes to stderr, the job's log). The
worker ends after ``close`` or when its input ends; whatever else happens to
it (``os._exit``, a segfault, a hang) is the caller's to report.

The protocol's own stdin/stdout are moved to private descriptors first: a
``print`` in the user's code lands on stderr, and ``input()`` reads nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import select
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from engine.envs import env_wire
from engine.envs.spec_types import SpecError


def load_python_env_class(path: Path, class_name: str) -> type:
    """Import the user's env file and return its env class (in this process:
    call it only inside the env worker)."""
    import gymnasium as gym

    if not path.is_file():
        raise SpecError("python.file", f"python.file {path} does not exist.")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    module_name = f"rlstudio_user_env_{digest}"
    mod_spec = importlib.util.spec_from_file_location(module_name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise SpecError("python.file", f"python.file {path} cannot be imported.")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[module_name] = module
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        traceback.print_exc()
        line = ""
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(path):
                line = f" at line {tb.tb_lineno}"
            tb = tb.tb_next
        if isinstance(exc, SyntaxError) and exc.lineno:
            line = f" at line {exc.lineno}"
        raise SpecError(
            "python.file",
            f"python.file {path.name} failed to import{line}: "
            f"{type(exc).__name__}: {exc}",
        ) from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise SpecError(
            "python.class",
            f"python.class {class_name!r} is not defined in {path.name}.",
        )
    if not (isinstance(cls, type) and issubclass(cls, gym.Env)):
        raise SpecError(
            "python.class",
            f"python.class {class_name!r} is not a gymnasium.Env subclass.",
        )
    return cls


class _Worker:
    def __init__(self) -> None:
        self.cls: type | None = None
        self.env: Any = None

    def load(self, req: dict[str, Any]) -> dict[str, Any]:
        from engine.envs.registry import constructor_parameters

        self.cls = cls = load_python_env_class(Path(req["file"]), req["class"])
        metadata = getattr(cls, "metadata", None) or {}
        return {
            "parameters": env_wire.encode(constructor_parameters(cls)),
            "render_modes": env_wire.encode(list(metadata.get("render_modes", []))),
            "render_fps": env_wire.encode(metadata.get("render_fps")),
            "action_masks": callable(getattr(cls, "action_masks", None)),
        }

    def make(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.cls is not None, "make before load"
        kwargs = env_wire.decode(req["kwargs"])
        try:
            self.env = env = self.cls(**kwargs)
        except Exception as exc:
            if not isinstance(exc, TypeError):
                # A TypeError is the arguments' (the sentence says it all,
                # and make_vec_env's try without render_mode would leave a
                # traceback in every run's log).
                traceback.print_exc()
            raise SpecError(
                "python.kwargs",
                f"{self.cls.__name__}(...) failed: {type(exc).__name__}: {exc}",
            ) from exc
        spaces = {}
        for name in ("observation_space", "action_space"):
            try:
                spaces[name] = env_wire.describe_space(getattr(env, name, None))
            except env_wire.UnsupportedSpaceError as exc:
                raise SpecError("python.class", f"{name}: {exc}.") from None
        metadata = getattr(env, "metadata", None) or {}
        return {
            **spaces,
            "render_mode": env_wire.encode(getattr(env, "render_mode", None)),
            "render_modes": env_wire.encode(list(metadata.get("render_modes", []))),
            "render_fps": env_wire.encode(metadata.get("render_fps")),
        }

    def call(self, op: str, req: dict[str, Any]) -> Any:
        if op == "load":
            return self.load(req)
        if op == "make":
            return self.make(req)
        env = self.env
        assert env is not None, f"{op} before make"
        if op == "step":
            return env_wire.encode(env.step(env_wire.decode(req["action"])))
        if op == "reset":
            options = env_wire.decode(req.get("options"))
            return env_wire.encode(env.reset(seed=req.get("seed"), options=options))
        if op == "render":
            return env_wire.encode(env.render())
        if op == "action_masks":
            return env_wire.encode(env.action_masks())
        if op == "close":
            self.env = None
            return env_wire.encode(env.close())
        raise ValueError(f"unknown op {op!r}")


def serve(inp: BinaryIO, out: BinaryIO, first_request_s: float | None = None) -> None:
    """Answer requests until ``close`` or the end of ``inp``; end at once
    if the first request does not come within ``first_request_s`` (a
    process started ahead that nobody took)."""
    if first_request_s is not None:
        ready, _, _ = select.select([inp], [], [], first_request_s)
        if not ready:
            return
    worker = _Worker()
    for line in inp:
        req = json.loads(line)
        op = req.get("op", "")
        try:
            reply: dict[str, Any] = {"ok": worker.call(op, req)}
        except SpecError as exc:
            cause = exc.__cause__
            reply = {
                "error": {
                    "kind": "spec",
                    "field": exc.field,
                    "message": str(exc),
                    "type": "" if cause is None else type(cause).__name__,
                }
            }
        except Exception as exc:
            traceback.print_exc()
            reply = {
                "error": {
                    "kind": "env",
                    "type": type(exc).__name__,
                    "message": env_wire.encode(str(exc)),
                }
            }
        out.write(json.dumps(reply, allow_nan=False).encode("utf-8") + b"\n")
        out.flush()
        if op == "close":
            return


def _die_with_parent() -> None:
    # A job killed by SIGKILL cannot close its envs; the kernel ends this
    # process with it (Linux; elsewhere the end of stdin does, once the env
    # is not busy).
    try:
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main() -> None:
    _die_with_parent()
    # The protocol gets private descriptors; fd 0 reads nothing and fd 1 is
    # stderr, so the user's prints and reads cannot corrupt it.
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115
    first_request_s = float(sys.argv[1]) if len(sys.argv) > 1 else None
    serve(inp, out, first_request_s)


if __name__ == "__main__":
    main()
