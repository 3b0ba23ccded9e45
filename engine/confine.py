"""Run untrusted code in a process the operating system confines.

Code-execution rewards and ``python``-kind env files are code the studio did
not write. They run here, never in the engine or a job's own process:

* **no network**: a network namespace of their own (only a loopback that is
  down);
* **read-only file system** except one scratch folder (``TMPDIR`` and
  ``HOME`` point into it);
* **no Unix socket of the host**: ``/tmp``, ``/var/tmp``, ``/run`` and
  ``/dev/shm``, where sessions and services keep their sockets, are empty
  folders of its own (only the scratch folder and what it must read are
  bound back in), and a seccomp filter refuses ``socket(AF_UNIX)`` and
  datagram socketpairs (``EPERM``) and io_uring, so no socket file anywhere
  can be connected to or sent to; abstract names (``\\0name``) belong to its
  network namespace. A connected stream pair of its own
  (``socket.socketpair()``, as multiprocessing uses) still works;
* **limits**: CPU seconds, address space, file size, open files and a
  process count (``RLIMIT_NPROC`` inside a user namespace, or a ``pids``
  cgroup when the studio runs as root, where the kernel does not apply
  ``RLIMIT_NPROC``);
* **a pid namespace and a session of their own**: the code cannot see or
  signal the process that started it, and when it ends (or is killed) every
  process it started dies with it.

Two ways to get there, tried in order: bubblewrap (``bwrap``, Debian's
``bubblewrap`` package) and util-linux's ``unshare`` with a small launcher
that remounts every mount read-only and drops all capabilities before it
runs the code. The launcher installs the seccomp filter under both, and a
machine where it cannot (no seccomp, an architecture it does not know)
counts as one where the method does not work. Where neither works, confined
runs are refused with one
sentence, unless the user allowed unconfined runs (``RLSTUDIO_ALLOW_UNCONFINED=1``,
or Settings → "Run untrusted code unconfined"); ``RLSTUDIO_CONFINEMENT`` picks
a method by name (``bwrap``, ``unshare`` or ``none``) for tests and for users
who know better than the probe.

Stdlib only: the supervisor imports this module to answer what it can do.
``ALLOW_UNCONFINED_ENV`` is re-exported from ``engine.contract``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.contract import ALLOW_UNCONFINED_ENV as ALLOW_UNCONFINED_ENV
from engine.errors import EngineError

METHOD_ENV = "RLSTUDIO_CONFINEMENT"
"""Force a method: ``bwrap``, ``unshare`` or ``none`` (skip the probe)."""
METHODS = ("bwrap", "unshare")

LAUNCHER_FAILED = 125
"""Exit code of the launcher when it could not set the confinement up."""

HIDDEN = ("/tmp", "/var/tmp", "/run", "/dev/shm")
"""Folders confined code sees empty (its own), for the host's sockets there."""


class ConfinementUnavailable(EngineError):
    """No confinement works here and unconfined runs are not allowed."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one confined process tree."""

    cpu_s: int = 10
    """CPU seconds (``RLIMIT_CPU``); the kernel kills the process after."""
    memory_mb: int = 512
    """Address space per process (``RLIMIT_AS``), in MiB."""
    file_mb: int = 10
    """Largest file the code may write (``RLIMIT_FSIZE``), in MiB."""
    processes: int = 32
    """Processes and threads the code may have at once."""
    open_files: int = 256
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""


# ------------------------------------------------------------------- probing


def allow_unconfined() -> bool:
    """Whether the user allowed unconfined runs (environment setting)."""
    return os.environ.get(ALLOW_UNCONFINED_ENV, "").strip().lower() in (
        "1",
        "true",
        "yes",
    )


@cache
def _works(method: str) -> bool:
    """Whether ``method`` can run ``true`` confined here (probed once)."""
    with tempfile.TemporaryDirectory(prefix="rlstudio-probe-") as scratch:
        try:
            argv = _wrap(method, [sys.executable, "-c", "pass"], Path(scratch), ())
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=20,
                env=_child_env(Path(scratch), None),
                start_new_session=True,
                preexec_fn=_preexec(None),
            )
        except (OSError, subprocess.SubprocessError):
            return False
    return proc.returncode == 0


def method() -> str | None:
    """The confinement used here: ``"bwrap"``, ``"unshare"`` or None."""
    forced = os.environ.get(METHOD_ENV, "").strip().lower()
    if forced == "none":
        return None
    if forced in METHODS:
        return forced if _works(forced) else None
    for name in METHODS:
        if _works(name):
            return name
    return None


def describe() -> dict[str, Any]:
    """What the studio can do here, for the hardware/about views."""
    found = method()
    return {
        "confinement": found,
        "allow_unconfined": allow_unconfined(),
        "pids_cgroup": _pids_cgroup_root() is not None,
    }


def require(what: str) -> str | None:
    """The method to run ``what`` with; raise when none and not allowed.

    Returns None when the user allowed unconfined runs and nothing works.
    """
    found = method()
    if found is None and not allow_unconfined():
        raise ConfinementUnavailable(
            f"{what} needs confinement (bubblewrap or unshare), and neither "
            "works here; install bubblewrap, or allow unconfined runs with "
            f"{ALLOW_UNCONFINED_ENV}=1 if you trust this code."
        )
    return found


# ----------------------------------------------------------------- the command


# Runs inside the namespaces, before the untrusted code: for ``unshare`` it
# makes every mount but the scratch read-only and drops all capabilities
# (bubblewrap does both itself), then it sets the limits and execs the code.
# It is passed with -c so it needs nothing importable inside the sandbox.
_LAUNCHER = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
argv = sys.argv[2:]
def fail(msg):
    sys.stderr.write("rl-studio confinement: " + msg + "\n")
    os._exit(125)
libc = ctypes.CDLL(None, use_errno=True)
if cfg["method"] == "unshare":
    RDONLY, NOSUID, NODEV, NOEXEC = 1, 2, 4, 8
    NOATIME, NODIRATIME, REMOUNT, BIND, REC = 1024, 2048, 32, 4096, 16384
    RELATIME, STRICTATIME = 1 << 21, 1 << 24
    KEEP = {"nosuid": NOSUID, "nodev": NODEV, "noexec": NOEXEC,
            "noatime": NOATIME, "nodiratime": NODIRATIME,
            "relatime": RELATIME, "strictatime": STRICTATIME}
    def mount(src, target, flags):
        if libc.mount(src, target.encode(), None, flags, None) != 0:
            e = ctypes.get_errno()
            fail("mount %s: %s" % (target, os.strerror(e)))
    scratch = cfg["scratch"]
    # Hide the host's socket folders under empty ones of our own, then bind
    # back (through descriptors opened before) what must stay readable
    # beneath them and, last so nothing covers it, the scratch folder.
    back = []
    for path in cfg["keep"] + [scratch]:
        back.append((path, os.open(path, os.O_PATH)))
    for folder in cfg["hide"]:
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", NOSUID | NODEV,
                      b"mode=755,size=1m") != 0:
            e = ctypes.get_errno()
            fail("cannot hide %s: %s" % (folder, os.strerror(e)))
    for path, fd in back:
        if not os.path.exists(path):
            if os.path.isdir("/proc/self/fd/%d" % fd):
                os.makedirs(path)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "x").close()
        mount(b"/proc/self/fd/%d" % fd, path, BIND | REC)
        os.close(fd)
    def hidden(point):
        return any(point == h or point.startswith(h + "/") for h in cfg["hide"])
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            point = parts[4].encode().decode("unicode_escape")
            points.append((point, parts[5].split(",")))
    for point, opts in points:
        if point == scratch or point.startswith(scratch.rstrip("/") + "/"):
            continue
        flags = REMOUNT | BIND | RDONLY
        for o in opts:
            flags |= KEEP.get(o, 0)
        if libc.mount(None, point.encode(), None, flags, None) != 0:
            e = ctypes.get_errno()
            if e in (2, 20):  # a mount point that vanished or is hidden
                continue
            if e == 22 and hidden(point):  # under a hiding tmpfs: not a mount
                continue
            fail("cannot make %s read-only: %s" % (point, os.strerror(e)))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("no_new_privs refused")
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; EINVAL past the last
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    data = (Data * 2)()
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), data) != 0:
        fail("cannot drop capabilities")
    os.setsid()
lim = cfg["limits"]
mb = 1024 * 1024
for name, value in (("RLIMIT_CPU", lim["cpu_s"]),
                    ("RLIMIT_AS", lim["memory_mb"] * mb),
                    ("RLIMIT_FSIZE", lim["file_mb"] * mb),
                    ("RLIMIT_NOFILE", lim["open_files"]),
                    ("RLIMIT_NPROC", lim["processes"]),
                    ("RLIMIT_CORE", 0)):
    res = getattr(resource, name)
    hard = value + 1 if name == "RLIMIT_CPU" else value
    cur = resource.getrlimit(res)[1]
    if cur != resource.RLIM_INFINITY:
        hard = min(hard, cur)
    resource.setrlimit(res, (min(value, hard), hard))
# No Unix socket of its own making: socket(AF_UNIX) and a datagram
# socketpair (whose socket may send to any path) fail with EPERM, as do
# io_uring (which makes sockets without the socket call); a foreign
# architecture's calls kill the process (they would pass unchecked).
import struct
ARCHES = {"x86_64": (0xC000003E, 41, 53, 0x40000000),
          "aarch64": (0xC00000B7, 198, 199, 0xFFFFFFFF),
          "riscv64": (0xC00000F3, 198, 199, 0xFFFFFFFF)}
machine = os.uname().machine
if machine not in ARCHES:
    fail("no seccomp filter for Unix sockets on %s" % machine)
arch, nr_socket, nr_pair, x32 = ARCHES[machine]
LD, JEQ, JGE, AND, RET = 0x20, 0x15, 0x35, 0x54, 0x06
ALLOW, DENY, KILL = 0x7FFF0000, 0x00050000 | 1, 0x80000000
OK_, NO, DIE = 16, 17, 18  # where the three answers below are
def at(i, target):
    return target - i - 1
prog = [
    (LD, 0, 0, 4),  # 0: arch
    (JEQ, 0, at(1, DIE), arch),
    (LD, 0, 0, 0),  # 2: syscall number
    (JGE, at(3, NO), 0, x32),  # x32 calls on x86_64
    (JEQ, at(4, NO), 0, 425),  # io_uring_setup
    (JEQ, at(5, NO), 0, 426),  # io_uring_enter
    (JEQ, at(6, NO), 0, 427),  # io_uring_register
    (JEQ, 0, at(7, 10), nr_socket),
    (LD, 0, 0, 16),  # 8: socket's domain
    (JEQ, at(9, NO), at(9, OK_), 1),  # AF_UNIX
    (JEQ, 0, at(10, OK_), nr_pair),
    (LD, 0, 0, 16),  # 11: socketpair's domain
    (JEQ, 0, at(12, OK_), 1),
    (LD, 0, 0, 24),  # 13: socketpair's type
    (AND, 0, 0, 0xF),
    (JEQ, at(15, OK_), at(15, NO), 1),  # SOCK_STREAM
    (RET, 0, 0, ALLOW),
    (RET, 0, 0, DENY),
    (RET, 0, 0, KILL),
]
code = b"".join(struct.pack("HBBI", *i) for i in prog)
buf = ctypes.create_string_buffer(code, len(code))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Prog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
    fail("no_new_privs refused")
if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # SECCOMP_MODE_FILTER
    fail("seccomp filter refused: %s" % os.strerror(ctypes.get_errno()))
os.chdir(cfg["scratch"])
try:
    os.execve(argv[0], argv, os.environ)
except OSError as e:
    fail("cannot run %s: %s" % (argv[0], e))
"""


def _wrap(
    method: str | None,
    argv: Sequence[str],
    scratch: Path,
    readable: Sequence[Path],
    limits: Limits | None = None,
) -> list[str]:
    """``argv`` run by ``method`` with ``scratch`` writable (None: as is)."""
    if method is None:
        return list(argv)
    hide = [h for h in HIDDEN if os.path.isdir(h) and not os.path.islink(h)]
    keep = _visible_under(hide, [*readable, *_interpreter_paths()], scratch)
    cfg = {
        "method": method,
        "scratch": str(scratch),
        "limits": asdict(limits or Limits()),
        "hide": hide,
        "keep": [str(p) for p in keep],
    }
    inner = [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(cfg), *argv]
    if method == "bwrap":
        outer = [
            "bwrap",
            "--ro-bind", "/", "/",
            "--dev", "/dev",  # a /dev/shm of its own too
            "--proc", "/proc",
        ]  # fmt: skip
        for folder in hide:
            if folder != "/dev/shm":
                outer += ["--tmpfs", folder]
        for path in [*readable, *keep]:
            # Visible read-only through "/" already; binding it again keeps
            # it readable where it lies under a folder replaced above.
            outer += ["--ro-bind", str(path), str(path)]
        # Last, so that no folder bound above covers it.
        outer += ["--bind", str(scratch), str(scratch)]
        for folder in hide:
            if folder != "/dev/shm":
                outer += ["--remount-ro", folder]
        outer += [
            "--unshare-user",
            "--unshare-all",
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",
            "--chdir", str(scratch),
            "--",
        ]  # fmt: skip
        return outer + inner
    if method == "unshare":
        user = [] if os.geteuid() == 0 else ["--map-root-user"]
        return [
            "unshare",
            *user,
            "--net",
            "--pid",
            "--ipc",
            "--uts",
            "--mount-proc",
            "--propagation", "private",
            "--kill-child",
            "--",
            *inner,
        ]  # fmt: skip
    raise ValueError(f"unknown confinement method {method!r}")


def _interpreter_paths() -> list[Path]:
    """What the confined Python needs to read: its prefixes, the folder of
    its executable, and the engine (the launcher and env workers import it)."""
    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(os.path.realpath(sys.executable)).parent,
        Path(__file__).resolve().parents[1],
    }
    return sorted(paths)


def _visible_under(
    hidden: Sequence[str], paths: Sequence[Path], scratch: Path
) -> list[Path]:
    """The existing ``paths`` that lie under a ``hidden`` folder (they must
    be bound back in), without repeats or ones inside another."""

    def under(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    found: list[Path] = []
    for p in sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}):
        if under(p, str(scratch)) or not any(under(p, h) for h in hidden):
            continue
        if not any(under(p, str(q)) for q in found):
            found.append(Path(p))
    return found


def _child_env(scratch: Path, extra: Mapping[str, str] | None) -> dict[str, str]:
    """A clean environment: no proxies, tokens or credentials of the user."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env.update(
        HOME=str(scratch),
        TMPDIR=str(scratch),
        PYTHONDONTWRITEBYTECODE="1",
        no_proxy="*",
    )
    env.update(extra or {})
    return env


# ------------------------------------------------------------------ pids cgroup


@cache
def _pids_cgroup_root() -> Path | None:
    """A cgroup v1 ``pids`` hierarchy we may create groups in (root only)."""
    if os.geteuid() != 0:
        return None  # RLIMIT_NPROC works for everyone else
    root = Path("/sys/fs/cgroup/pids")
    probe = root / f"rlstudio-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return None
    _sweep_stale_cgroups(root)
    return root


@contextmanager
def _pids_cgroup(limit: int) -> Iterator[int | None]:
    """A fresh pids cgroup capped at ``limit``; yields an fd of its procs file.

    The kernel does not apply ``RLIMIT_NPROC`` to root's processes, so when
    the studio runs as root a cgroup bounds a fork bomb instead.
    """
    root = _pids_cgroup_root()
    if root is None:
        yield None
        return
    group = root / f"rlstudio-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit))
        fd = os.open(group / "cgroup.procs", os.O_WRONLY)
    except OSError:
        with suppress(OSError):
            group.rmdir()
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)
        _remove_group(group)


def _remove_group(group: Path) -> None:
    """Remove a cgroup once its processes are gone (they are being killed)."""
    import time

    deadline = time.monotonic() + 2.0
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left for the next start-up's sweep
            time.sleep(0.01)


def _sweep_stale_cgroups(root: Path) -> None:
    """Remove cgroups earlier processes left (their owner pid is gone)."""
    for group in root.glob("rlstudio-*-*"):
        try:
            owner = int(group.name.split("-")[1])
        except ValueError:
            continue
        if not process_alive(owner):
            with suppress(OSError):
                group.rmdir()


def process_alive(pid: int, *, zombies: bool = True) -> bool:
    """Whether process ``pid`` exists on this machine (stdlib only). A zombie,
    ended but not yet reaped by its parent, counts unless ``zombies`` is
    false (a launcher waiting for its own children's end)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not zombies:
        with suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _preexec(cgroup_fd: int | None) -> Any:
    """Runs in the child before exec: join the pids cgroup, if any."""
    if cgroup_fd is None:
        return None

    def join() -> None:
        os.write(cgroup_fd, b"0")

    return join


# ------------------------------------------------------------------- running


class Confined:
    """A confined process tree: ``popen`` plus the cleanup it needs.

    Use as a context manager or call ``close()``: the whole tree is killed
    (its session, and the pid namespace with it) and the cgroup removed.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        what: str,
        scratch: Path,
        limits: Limits | None = None,
        readable: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        **popen_kwargs: Any,
    ) -> None:
        limits = limits or Limits()
        # What the code imports from (an env worker's engine) must stay
        # readable where it lies under a folder the confinement hides.
        path_entries = (env or {}).get("PYTHONPATH", "").split(os.pathsep)
        readable = [*readable, *(Path(p) for p in path_entries if p)]
        self.method = require(what)
        self._cgroup = _pids_cgroup(limits.processes + 8)
        fd = self._cgroup.__enter__() if self.method else None
        self._entered = self.method is not None
        try:
            self.proc = subprocess.Popen(
                _wrap(self.method, argv, scratch, readable, limits),
                env=_child_env(scratch, env),
                cwd=scratch,
                start_new_session=True,
                # The child joins the cgroup before exec; the descriptor is
                # not passed on (confined code could write to it).
                preexec_fn=_preexec(fd),
                **popen_kwargs,
            )
        except BaseException:
            self._exit_cgroup()
            raise

    def _exit_cgroup(self) -> None:
        if self._entered:
            self._entered = False
            self._cgroup.__exit__(None, None, None)

    def kill(self) -> None:
        """Kill the whole tree now (idempotent)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(ProcessLookupError):
            self.proc.kill()

    def close(self) -> None:
        """Kill what is left, reap it, remove the cgroup."""
        self.kill()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self._exit_cgroup()

    def __enter__(self) -> Confined:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Result:
    """What a confined run did."""

    returncode: int | None
    """Exit code; negative for a signal; None when it ran out of time."""
    timed_out: bool
    stdout: str
    stderr: str
    method: str | None
    """The confinement it ran under (None: unconfined, as allowed)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run(
    argv: Sequence[str],
    *,
    what: str,
    timeout_s: float,
    limits: Limits | None = None,
    stdin: str | None = None,
    output_chars: int = 2000,
) -> Result:
    """Run ``argv`` confined in a fresh scratch folder, then remove it.

    Output is cut to its last ``output_chars`` characters each.
    """

    def cut(v: bytes | None) -> str:
        return (v or b"").decode("utf-8", "replace")[-output_chars:]

    scratch = Path(tempfile.mkdtemp(prefix="rlstudio-confined-"))
    try:
        with Confined(
            argv,
            what=what,
            scratch=scratch,
            limits=limits,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as c:
            try:
                out, err = c.proc.communicate(
                    None if stdin is None else stdin.encode(), timeout=timeout_s
                )
            except subprocess.TimeoutExpired as exc:
                c.kill()
                out, err = exc.stdout, exc.stderr
                # Confined, the pipes close with the pid namespace; unconfined
                # (as allowed), a detached grandchild may hold them open.
                with suppress(subprocess.TimeoutExpired):
                    out, err = c.proc.communicate(timeout=5)
                return Result(None, True, cut(out), cut(err), c.method)
            return Result(c.proc.returncode, False, cut(out), cut(err), c.method)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
