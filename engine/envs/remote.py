"""A python-kind env as seen from the engine, a job or a check: a proxy
(:class:`RemoteEnv`) for the env living in its own process
(:mod:`engine.envs.env_worker`).

The user's file is never imported here. Every call is one JSON line each way
(:mod:`engine.envs.env_wire`); answers are read as hostile input: bounded in
size (:data:`engine.untrusted.MAX_FILE_BYTES` a line), depth and numbers,
and checked tag by tag. A process that exits, is killed, stops answering or
answers nonsense becomes one :class:`SpecError` on ``python.file`` that names
the file and what it was doing ("python.file my_env.py: the env process
exited with code 7 during step."); the caller never crashes with it. An
exception raised by the env's own code comes back as the same builtin
exception type with its message (a user-defined one as a
:class:`RemoteEnvError` subclass of the same name); its traceback is in the
worker's stderr, which is the caller's.

Every worker starts through :func:`start_env_process`, the one place its
command line is built.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym

from engine import confine, untrusted
from engine.envs import env_wire
from engine.envs.spec_types import SpecError
from engine.errors import EngineError
from engine.line_worker import engine_pythonpath

LOAD_TIMEOUT_S = 120.0
"""Longest the env process may take to start and import the file."""
CALL_TIMEOUT_S = 120.0
"""Longest one call (make, reset, step, render, close) may take."""
CLOSE_GRACE_S = 5.0
"""How long ``close`` waits for the env's own close before killing it."""
SPARE_IDLE_S = 30.0
"""How long an env process waits for its first request before it ends by
itself (a spare nobody took)."""
MAX_LINE_BYTES = untrusted.MAX_FILE_BYTES
"""Largest answer line read from the env process."""

_WHEN = {"load": "during import", "make": "while building the env"}


def _when(op: str) -> str:
    """When something happened, for the sentence: "during step"."""
    return _WHEN.get(op, f"during {op}")


class RemoteEnvError(EngineError):
    """An exception raised by the env's code that is not a builtin one;
    raised as a subclass named like the original."""


class EnvArgumentError(SpecError, TypeError):
    """The env class refused its keyword arguments. A TypeError too, as if
    the class were called here: stable-baselines3's ``make_vec_env`` tries
    ``render_mode="rgb_array"`` and retries without it on a TypeError."""


_remote_types: dict[str, type[RemoteEnvError]] = {}


def _user_exception(type_name: str, message: str) -> Exception:
    """The env's exception, rebuilt here from its type name and message."""
    builtin = getattr(builtins, type_name, None)
    if (
        isinstance(builtin, type)
        and issubclass(builtin, Exception)
        and not issubclass(builtin, OSError | UnicodeError)  # need more args
    ):
        try:
            exc: Exception = builtin(message)
            return exc
        except Exception:  # a builtin with another signature
            pass
    name = type_name if type_name.isidentifier() and len(type_name) <= 80 else "Error"
    cls = _remote_types.get(name)
    if cls is None:
        cls = _remote_types[name] = type(name, (RemoteEnvError,), {})
    return cls(message)


ENV_LIMITS = confine.Limits(
    cpu_s=7 * 24 * 3600,
    memory_mb=8192,
    file_mb=256,
    processes=64,
    open_files=512,
)
"""Limits of one env process: it lives as long as a training run, so CPU
time is bounded only by a week (a hung call is caught by
:data:`CALL_TIMEOUT_S`); address space is virtual memory, which numpy and
its thread pools reserve generously."""


def start_env_process(file: Path) -> tuple[confine.Confined, Path]:
    """Start ``python -m engine.envs.env_worker`` for the env ``file``,
    confined (:mod:`engine.confine`: no network, a read-only file system
    except a fresh scratch folder, its working directory, and
    :data:`ENV_LIMITS`); the file's folder stays readable. Returns the
    confined process and the scratch folder, which the caller removes.
    :class:`~engine.confine.ConfinementUnavailable` where nothing confines
    and unconfined runs are not allowed."""
    scratch = Path(tempfile.mkdtemp(prefix="rlstudio-env-"))
    env = {
        # The worker imports the same engine as its caller.
        "PYTHONPATH": engine_pythonpath(),
        # One thread each: an env process per env, and the process limit.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    try:
        confined = confine.Confined(
            [sys.executable, "-m", "engine.envs.env_worker", str(SPARE_IDLE_S)],
            what=f"The python env {file.name}",
            scratch=scratch,
            limits=ENV_LIMITS,
            readable=[file.parent],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return confined, scratch


def _stop(confined: confine.Confined, scratch: Path, owner: int) -> None:
    """Kill the worker's whole process tree and remove its scratch folder;
    only in the process that started it (a forked child inherits the
    finalizers and the spare, not the env processes)."""
    if os.getpid() != owner:
        return
    proc = confined.proc
    for stream in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()
    confined.close()
    shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class _Spare:
    key: tuple[str, ...]
    confined: confine.Confined
    scratch: Path
    started: float
    owner: int


_spare: _Spare | None = None
_spare_lock = threading.Lock()


def _spare_key(file: Path) -> tuple[str, ...]:
    # A spare serves only an env of the same folder, under the confinement
    # settings it was started with.
    return (
        str(file.parent),
        os.environ.get(confine.METHOD_ENV, ""),
        os.environ.get(confine.ALLOW_UNCONFINED_ENV, ""),
    )


def _take_process(file: Path) -> tuple[confine.Confined, Path]:
    """An env process for ``file``: the spare started ahead for its folder
    (its Python and numpy already imported) or a new one; then start the
    next spare, so a check's or a vector env's instances after the first
    do not each wait for an interpreter to start."""
    global _spare
    key = _spare_key(file)
    with _spare_lock:
        spare, _spare = _spare, None
    taken = None
    if spare is not None:
        # Half the time it waits: it must not end as it is taken.
        fresh = time.monotonic() - spare.started < SPARE_IDLE_S / 2
        if (
            spare.key == key
            and fresh
            and spare.owner == os.getpid()
            and spare.confined.proc.poll() is None
        ):
            taken = (spare.confined, spare.scratch)
        else:
            _stop(spare.confined, spare.scratch, spare.owner)
    if taken is None:
        taken = start_env_process(file)
    try:
        confined, scratch = start_env_process(file)
    except (EngineError, OSError):
        return taken  # no spare this time; the next env starts its own
    with _spare_lock:
        old, _spare = (
            _spare,
            _Spare(key, confined, scratch, time.monotonic(), os.getpid()),
        )
    if old is not None:
        _stop(old.confined, old.scratch, old.owner)
    return taken


def drop_spare() -> None:
    """End the spare env process, if any (at exit, and for tests that count
    processes)."""
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None:
        _stop(spare.confined, spare.scratch, spare.owner)


atexit.register(drop_spare)


class EnvProcess:
    """One env worker and the calls to it (one at a time)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        try:
            self._confined, scratch = _take_process(file)
        except confine.ConfinementUnavailable as exc:
            raise SpecError("python.file", str(exc)) from None
        except OSError as exc:
            raise SpecError(
                "python.file",
                f"python.file {file.name}: the env process could not start "
                f"({exc.strerror or exc}).",
            ) from None
        self._proc = self._confined.proc
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(
            self, _stop, self._confined, scratch, self._owner
        )
        assert self._proc.stdout is not None
        self._fd = self._proc.stdout.fileno()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN | select.POLLHUP)
        self._buf = bytearray()
        self._failure: SpecError | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._failure is None and self._finalizer.alive

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        """Send one request and return its ``ok`` value (decoded); the
        timeout is :data:`CALL_TIMEOUT_S` unless given."""
        if timeout_s is None:
            timeout_s = CALL_TIMEOUT_S
        if self._failure is not None:
            raise self._failure
        if os.getpid() != self._owner:
            raise SpecError(
                "python.file",
                f"python.file {self.file.name}: this env was made in another "
                "process; a forked process must make its own.",
            )
        if not self._finalizer.alive:
            self._fail(f"was already closed before {op}")
        line = json.dumps({"op": op, **args}, allow_nan=False).encode() + b"\n"
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died(op)
        reply = self._read_reply(op, time.monotonic() + timeout_s, timeout_s)
        if not isinstance(reply, dict) or len(reply) != 1:
            self._fail(f"sent a malformed answer to {op}")
        if "ok" in reply:
            return reply["ok"]
        error = reply.get("error")
        if not isinstance(error, dict):
            self._fail(f"sent a malformed answer to {op}")
        message = str(error.get("message", ""))[:2000]
        if error.get("kind") == "spec":
            field = str(error.get("field", "python.file"))
            if field not in ("python.file", "python.class", "python.kwargs"):
                field = "python.file"
            if field == "python.kwargs" and error.get("type") == "TypeError":
                raise EnvArgumentError(field, message)
            raise SpecError(field, message)
        raise _user_exception(str(error.get("type", "Error")), message)

    def _read_reply(self, op: str, deadline: float, timeout_s: float) -> Any:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                try:
                    return env_wire.parse_line(line)
                except ValueError as exc:
                    self._fail(f"sent a malformed answer to {op} ({exc})")
            if len(self._buf) > MAX_LINE_BYTES:
                self._fail(
                    f"sent an answer to {op} larger than "
                    f"{MAX_LINE_BYTES // (1024 * 1024)} MiB"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(
                    f"took longer than {timeout_s:g} s {_when(op)} and was stopped"
                )
            if not self._poll.poll(int(remaining * 1000) + 1):
                continue
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                self._died(op)
            self._buf += chunk

    def _died(self, op: str) -> NoReturn:
        try:
            code = self._proc.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self._fail(f"closed its output {_when(op)}")
        # bubblewrap reports a child killed by a signal as 128 + its number.
        signum = -code if code < 0 else code - 128 if self._confined.method else 0
        if signum > 0:
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
            self._fail(f"was killed by {name} {_when(op)}")
        self._fail(f"exited with code {code} {_when(op)}")

    def _fail(self, what: str) -> NoReturn:
        """Stop the worker for good; this and every later call raise."""
        self._failure = SpecError(
            "python.file", f"python.file {self.file.name}: the env process {what}."
        )
        self.kill()
        raise self._failure

    def close(self) -> None:
        """Ask the env to close, then end the process group, whatever it does
        (nothing in a forked child: the process is its parent's)."""
        if os.getpid() != self._owner:
            self._finalizer.detach()
            return
        if self._finalizer.alive and self._failure is None:
            with contextlib.suppress(EngineError):
                self.call("close", CLOSE_GRACE_S)
        self.kill()

    def kill(self) -> None:
        self._finalizer()


def load_env_class(file: Path, class_name: str) -> dict[str, Any]:
    """Import ``file`` in a fresh env process and describe ``class_name``:
    ``parameters``, ``render_modes``, ``render_fps``, ``action_masks``.
    SpecError when the file or class is wrong or the process fails."""
    proc = EnvProcess(file)
    try:
        info: dict[str, Any] = proc.call(
            "load", LOAD_TIMEOUT_S, file=str(file), **{"class": class_name}
        )
        return info
    finally:
        proc.kill()


class RemoteEnv(gym.Env[Any, Any]):
    """A python-kind env whose code runs in its own process.

    Spaces, ``metadata`` (render modes and fps), ``render_mode``,
    ``action_masks()`` (when the class has it) and the constructor's
    ``parameters`` mirror the real env's; other attributes of the user's
    class are not reachable from here.
    """

    def __init__(self, file: Path, class_name: str, **kwargs: Any) -> None:
        self._process = EnvProcess(file)
        try:
            info = self._process.call(
                "load", LOAD_TIMEOUT_S, file=str(file), **{"class": class_name}
            )
            made = self._process.call("make", kwargs=env_wire.encode(kwargs))
            try:
                self.observation_space = env_wire.build_space(
                    made.get("observation_space")
                )
                self.action_space = env_wire.build_space(made.get("action_space"))
            except ValueError as exc:
                self._process._fail(f"described a malformed space ({exc})")
        except BaseException:
            self._process.kill()
            raise
        self.parameters: list[dict[str, Any]] = list(info.get("parameters") or [])
        render_modes = made.get("render_modes") or info.get("render_modes") or []
        self.metadata = {
            "render_modes": [str(m) for m in render_modes],
            "render_fps": made.get("render_fps", info.get("render_fps")),
        }
        mode = made.get("render_mode")
        self.render_mode = mode if isinstance(mode, str) else None
        if info.get("action_masks"):
            # An instance attribute: getattr(env.unwrapped, "action_masks")
            # finds it exactly when the user's class has one.
            self.action_masks = self._action_masks

    @property
    def pid(self) -> int:
        """The env process's id."""
        return self._process.pid

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        # Seeds this proxy's np_random too, as the env seeds its own.
        super().reset(seed=seed)
        return self._process.call("reset", seed=seed, options=env_wire.encode(options))

    def step(self, action: Any) -> Any:
        return self._process.call("step", action=env_wire.encode(action))

    def render(self) -> Any:
        return self._process.call("render")

    def _action_masks(self) -> Any:
        return self._process.call("action_masks")

    def close(self) -> None:
        self._process.close()
