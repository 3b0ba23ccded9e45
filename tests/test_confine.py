"""Escape attempts against the confinement of untrusted code (engine.confine).

Each attempt is a small program that tries to leave its box: write outside
its scratch folder, reach a server on 127.0.0.1 (through ``_socket``, a
reloaded ``socket`` and a subprocess), leave children running, fork without
bound, kill a process outside. Every method that works here is tried
(bubblewrap and unshare); a method that does not work is skipped with the
reason. The same programs run unconfined (as the code reward did before)
show that each attempt is a real escape there; the counts are printed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import confine
from engine.errors import ConfigError
from engine.llm import rewards


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 recording what reaches it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    got: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    got.append(conn.recv(64))
                except OSError:
                    got.append(b"")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    done.set()
    t.join(timeout=5)
    srv.close()


@dataclass
class Attempt:
    """One escape attempt: a program and how to tell that it got out."""

    name: str
    program: Callable[[dict[str, object]], str]
    escaped: Callable[[dict[str, object], confine.Result], bool]


def _marker_alive(marker: str) -> bool:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return bool(out.stdout.strip())


def _outlives(marker: str, seconds: float = 5.0) -> bool:
    """Whether processes carrying ``marker`` are still there after ``seconds``
    (a killed pid namespace empties asynchronously)."""
    deadline = time.monotonic() + seconds
    while _marker_alive(marker):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


def _heard(ctx: dict[str, object], payload: bytes) -> bool:
    """Whether ``payload`` reached the listener. A connection of our own goes
    in last and is waited for: the listener takes connections in order, so
    once ours is recorded every earlier one is too (on a busy machine the
    listener thread may not have run yet when the attempt ends)."""
    sentinel = f"sentinel-{uuid.uuid4().hex}".encode()
    got = ctx["got"]
    assert isinstance(got, list)
    port = int(str(ctx["port"]))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(sentinel)
    deadline = time.monotonic() + 60
    while sentinel not in got and time.monotonic() < deadline:
        time.sleep(0.01)
    return payload in got


def _dies(proc: object, seconds: float = 5.0) -> bool:
    """Whether ``proc`` ends within ``seconds``: a SIGKILL takes effect when
    its target next runs, which on a busy machine is not at once."""
    assert isinstance(proc, subprocess.Popen)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


ATTEMPTS = [
    Attempt(
        "write outside the scratch folder",
        lambda ctx: f"open({str(ctx['outside'])!r}, 'w').write('escaped')",
        lambda ctx, r: Path(str(ctx["outside"])).exists(),
    ),
    Attempt(
        "network through _socket",
        lambda ctx: textwrap.dedent(f"""
            import _socket
            s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(("127.0.0.1", {ctx["port"]}))
            s.send(b"_socket")
        """),
        lambda ctx, r: _heard(ctx, b"_socket"),
    ),
    Attempt(
        "network after importlib.reload(socket)",
        lambda ctx: textwrap.dedent(f"""
            import importlib, socket
            socket = importlib.reload(socket)
            s = socket.create_connection(("127.0.0.1", {ctx["port"]}), timeout=2)
            s.send(b"reload")
        """),
        lambda ctx, r: _heard(ctx, b"reload"),
    ),
    Attempt(
        "network from a subprocess",
        lambda ctx: textwrap.dedent(f"""
            import subprocess, sys
            code = ("import socket; socket.create_connection(('127.0.0.1', "
                    "{ctx["port"]}), timeout=2).send(b'subprocess')")
            subprocess.run([sys.executable, "-c", code], check=True)
        """),
        lambda ctx, r: _heard(ctx, b"subprocess"),
    ),
    Attempt(
        "children left running after the end",
        lambda ctx: textwrap.dedent(f"""
            import subprocess, sys
            for _ in range(5):
                subprocess.Popen(
                    [sys.executable, "-c", "import time; time.sleep(60)",
                     {str(ctx["marker"])!r}],
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        """),
        lambda ctx, r: _outlives(str(ctx["marker"])),
    ),
    Attempt(
        "fork bomb",
        lambda ctx: textwrap.dedent("""
            import os, time
            n = 0
            try:
                while n < 400:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    n += 1
            except OSError:
                pass
            print(n)
        """),
        # Bounded: the program could not reach 400 processes.
        lambda ctx, r: r.stdout.strip() == "400",
    ),
    Attempt(
        "kill a process outside",
        lambda ctx: textwrap.dedent(f"""
            import os, signal
            for pid in ({ctx["victim"]}, {ctx["parent"]}):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        """),
        lambda ctx, r: _dies(ctx["victim_proc"]),
    ),
]


def _try(attempt: Attempt, tmp_path: Path, listener: tuple[int, list[bytes]]) -> bool:
    """Run one attempt (confined as the environment says); did it escape?"""
    port, got = listener
    got.clear()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ctx: dict[str, object] = {
        "outside": tmp_path / f"outside-{uuid.uuid4().hex[:6]}.txt",
        "port": port,
        "got": got,
        "marker": f"rlstudio-orphan-{uuid.uuid4().hex}",
        "victim": victim.pid,
        "victim_proc": victim,
        # Confined, the parent (this test) is out of reach; unconfined it
        # is not, so the unconfined run aims at the victim twice instead.
        "parent": "os.getppid()" if confine.method() else victim.pid,
    }
    try:
        result = confine.run(
            [sys.executable, "-I", "-c", attempt.program(ctx)],
            what="The escape test",
            timeout_s=30,
            limits=confine.Limits(cpu_s=20, processes=32),
        )
        return attempt.escaped(ctx, result)
    finally:
        victim.kill()
        victim.wait()
        subprocess.run(["pkill", "-9", "-f", str(ctx["marker"])])


def _methods() -> list[object]:
    out: list[object] = []
    for name in confine.METHODS:
        works = confine._works(name)
        out.append(
            pytest.param(
                name,
                marks=pytest.mark.skipif(
                    not works, reason=f"{name} does not work on this machine"
                ),
            )
        )
    return out


@pytest.mark.parametrize("method", _methods())
def test_every_escape_attempt_is_refused(
    method: str,
    tmp_path: Path,
    listener: tuple[int, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(confine.METHOD_ENV, method)
    escapes = [a.name for a in ATTEMPTS if _try(a, tmp_path, listener)]
    print(f"\n{method}: {len(ATTEMPTS)} escape attempts, {len(escapes)} escaped")
    assert escapes == []


def test_the_same_attempts_escape_unconfined(
    tmp_path: Path, listener: tuple[int, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What confinement prevents: unconfined (allowed explicitly, as the code
    reward ran before), every attempt but the fork bound gets out."""
    monkeypatch.setenv(confine.METHOD_ENV, "none")
    monkeypatch.setenv(confine.ALLOW_UNCONFINED_ENV, "1")
    escapes = [
        a.name
        for a in ATTEMPTS
        if a.name != "fork bomb" and _try(a, tmp_path, listener)
    ]
    print(f"\nunconfined: {len(ATTEMPTS) - 1} escape attempts, {len(escapes)} escaped")
    assert len(escapes) == len(ATTEMPTS) - 1


def test_without_confinement_runs_are_refused_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(confine.METHOD_ENV, "none")
    monkeypatch.delenv(confine.ALLOW_UNCONFINED_ENV, raising=False)
    with pytest.raises(confine.ConfinementUnavailable) as err:
        confine.run([sys.executable, "-c", "pass"], what="The test", timeout_s=5)
    message = str(err.value)
    assert message.startswith("The test needs confinement (bubblewrap or unshare)")
    assert confine.ALLOW_UNCONFINED_ENV in message
    assert message.count(".") == 1 and message.endswith(".")
    # The reward refuses when it is set up, not minutes into training.
    with pytest.raises(confine.ConfinementUnavailable):
        rewards.build_rewards([{"name": "code_execution"}])


needs_confinement = pytest.mark.skipif(
    confine.method() is None, reason="neither bubblewrap nor unshare works here"
)


@needs_confinement
def test_memory_cpu_and_time_limits() -> None:
    hog = confine.run(
        [sys.executable, "-c", "x = bytearray(2 * 1024 ** 3)"],
        what="The test",
        timeout_s=20,
        limits=confine.Limits(memory_mb=256),
    )
    assert hog.returncode not in (0, None) and "MemoryError" in hog.stderr
    spin = confine.run(
        [sys.executable, "-c", "while True: pass"],
        what="The test",
        timeout_s=30,
        limits=confine.Limits(cpu_s=1),
    )
    # Killed by SIGXCPU (bwrap reports a signal as 128 + its number).
    assert spin.returncode not in (0, None) and not spin.timed_out
    sleeper = confine.run(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        what="The test",
        timeout_s=1,
    )
    assert sleeper.timed_out and not sleeper.ok
    big = confine.run(
        [sys.executable, "-c", "open('f', 'wb').write(b'x' * (3 * 1024 * 1024))"],
        what="The test",
        timeout_s=10,
        limits=confine.Limits(file_mb=1),
    )
    assert big.returncode != 0


@needs_confinement
def test_code_execution_reward_scores_confined_code() -> None:
    (reward,) = rewards.build_rewards([{"name": "code_execution", "timeout_s": 5}])
    good = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    network = (
        "```python\nimport socket\n"
        "socket.create_connection(('127.0.0.1', 9), timeout=1)\n```"
    )
    scores = reward(
        ["p", "p", "p"], [good, wrong, network], tests=["assert add(2, 3) == 5"] * 3
    )
    assert scores == [1.0, 0.0, 0.0]
    result = rewards.run_code("print('hi')")
    assert result["ok"] and result["stdout"] == "hi\n"
    assert result["confinement"] in confine.METHODS


def test_code_execution_reward_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"timeout_s must be a number from 0\.1"):
        rewards.build_rewards([{"name": "code_execution", "timeout_s": -1}])
    with pytest.raises(ConfigError, match="memory_mb must be a number"):
        rewards.build_rewards([{"name": "code_execution", "memory_mb": "lots"}])


@needs_confinement
def test_a_killed_run_leaves_nothing_behind() -> None:
    """Killing the confined run mid-way kills everything it started."""
    marker = f"rlstudio-tree-{uuid.uuid4().hex}"
    program = textwrap.dedent(f"""
        import subprocess, sys, time
        for _ in range(3):
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              {marker!r}], start_new_session=True)
        print("started", flush=True)
        time.sleep(60)
    """)
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    with confine.Confined(
        [sys.executable, "-c", program],
        what="The test",
        scratch=scratch,
        stdout=subprocess.PIPE,
    ) as c:
        assert c.proc.stdout is not None
        assert c.proc.stdout.readline() == b"started\n"
        assert _marker_alive(marker)
        os.kill(c.proc.pid, signal.SIGKILL)  # the outermost process only
        c.proc.wait(timeout=10)
    assert not _outlives(marker)


def test_the_studio_setting_reaches_the_engine_environment(tmp_path: Path) -> None:
    from PySide6.QtCore import QSettings

    from studio.settings import Settings

    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.allow_unconfined is False
    assert settings.engine_environment() == {confine.ALLOW_UNCONFINED_ENV: "0"}
    settings.allow_unconfined = True
    assert Settings(settings._s).engine_environment() == {
        confine.ALLOW_UNCONFINED_ENV: "1"
    }


# ------------------------------------------------------------ Unix sockets
#
# A Unix socket of the host (a desktop's session bus, a container runtime, a
# database) is a door out of the box that a network namespace does not
# close: a path name is found through the file system, and a datagram can be
# sent to it from a socketpair's socket. Abstract names (``\0name``) belong
# to the network namespace.

UNIX_PROBE = """
import json, socket, sys

def attempt(family_type, address, send):
    try:
        s = socket.socket(socket.AF_UNIX, family_type)
        s.settimeout(2)
        if send:
            s.sendto(b"escaped", address)
        else:
            s.connect(address)
            s.send(b"escaped")
        return "reached"
    except OSError as exc:
        return type(exc).__name__

def unix_attempts(streams, datagrams, abstract):
    tried = {}
    for path in streams:
        tried["stream " + path] = attempt(socket.SOCK_STREAM, path, False)
    for path in datagrams:
        tried["datagram " + path] = attempt(socket.SOCK_DGRAM, path, True)
        try:  # a socketpair's datagram socket may send to any address
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.sendto(b"escaped", path)
            tried["socketpair datagram " + path] = "reached"
        except OSError as exc:
            tried["socketpair datagram " + path] = type(exc).__name__
    tried["abstract"] = attempt(socket.SOCK_STREAM, "\\0" + abstract, False)
    # What code may keep: a connected pair of its own (multiprocessing's).
    a, b = socket.socketpair()
    a.send(b"ok")
    tried["own pair"] = b.recv(2).decode()
    return tried
"""


@dataclass
class UnixListeners:
    """Listening Unix sockets of the host, in every place that can hold one."""

    streams: dict[str, socket.socket]
    datagrams: dict[str, socket.socket]
    abstract: str
    abstract_sock: socket.socket

    def args(self) -> str:
        return repr((list(self.streams), list(self.datagrams), self.abstract))

    def reached(self) -> list[str]:
        """Which listeners got a connection or a datagram (checked without
        waiting: a connection made is in the accept queue even when its
        client has gone)."""
        got = []
        for path, srv in [*self.streams.items(), ("abstract", self.abstract_sock)]:
            try:
                conn, _ = srv.accept()
                conn.close()
                got.append(f"stream {path}")
            except BlockingIOError:
                pass
        for path, srv in self.datagrams.items():
            while True:  # one entry a datagram
                try:
                    srv.recv(64)
                except BlockingIOError:
                    break
                got.append(f"datagram {path}")
        return got


@pytest.fixture
def unix_listeners(tmp_path: Path) -> Iterator[UnixListeners]:
    folders = [tmp_path]
    made: list[Path] = []
    # /tmp and /run themselves (where sessions keep their sockets), /dev/shm,
    # and a folder the confined code can see (the interpreter's prefix).
    for parent in ("/tmp", "/run", "/dev/shm", sys.prefix):
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            made.append(Path(tempfile.mkdtemp(prefix="rls-", dir=parent)))
    folders += made
    streams: dict[str, socket.socket] = {}
    datagrams: dict[str, socket.socket] = {}
    for folder in folders:
        for kind, into in (
            (socket.SOCK_STREAM, streams),
            (socket.SOCK_DGRAM, datagrams),
        ):
            path = str(folder / ("s" if kind == socket.SOCK_STREAM else "d"))
            srv = socket.socket(socket.AF_UNIX, kind)
            srv.bind(path)
            if kind == socket.SOCK_STREAM:
                srv.listen(16)
            srv.setblocking(False)
            into[path] = srv
    abstract = f"rlstudio-test-{uuid.uuid4().hex}"
    abstract_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_sock.bind("\0" + abstract)
    abstract_sock.listen(16)
    abstract_sock.setblocking(False)
    try:
        yield UnixListeners(streams, datagrams, abstract, abstract_sock)
    finally:
        for srv in [*streams.values(), *datagrams.values(), abstract_sock]:
            srv.close()
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def _unix_methods() -> list[object]:
    return [*_methods(), pytest.param("none", id="unconfined")]


def _confine_as(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(confine.METHOD_ENV, method)
    if method == "none":  # the control: what confinement prevents
        monkeypatch.setenv(confine.ALLOW_UNCONFINED_ENV, "1")


def _check_unix(
    method: str, tried: dict[str, str], listeners: UnixListeners, where: str
) -> None:
    reached = listeners.reached()
    claimed = [k for k, v in tried.items() if v == "reached"]
    attempts = len(tried) - 1
    print(
        f"\n{where}, {method}: {attempts} Unix socket attempts, {len(claimed)} got out"
    )
    assert tried["own pair"] == "ok", tried
    if method == "none":
        # Every attempt gets out unconfined: the attempts are real.
        assert len(claimed) == attempts and len(reached) == len(claimed), tried
    else:
        assert claimed == [] and reached == [], tried


@pytest.mark.parametrize("method", _unix_methods())
def test_a_code_reward_reaches_no_host_unix_socket(
    method: str, unix_listeners: UnixListeners, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    _confine_as(method, monkeypatch)
    code = (
        UNIX_PROBE + f"\nprint(json.dumps(unix_attempts(*{unix_listeners.args()})))\n"
    )
    result = rewards.run_code(code, timeout_s=20)
    assert result["ok"], result
    tried = json.loads(result["stdout"])
    _check_unix(method, tried, unix_listeners, "code reward")


@pytest.mark.parametrize("method", _unix_methods())
def test_a_python_env_reaches_no_host_unix_socket(
    method: str,
    unix_listeners: UnixListeners,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.envs import remote

    _confine_as(method, monkeypatch)
    file = tmp_path / "envs" / "probe.py"
    file.parent.mkdir()
    # A socket beside the env file: a folder the env process must see.
    beside = str(file.parent / "s")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(beside)
    srv.listen(4)
    srv.setblocking(False)
    unix_listeners.streams[beside] = srv
    file.write_text(
        "import gymnasium as gym\nimport numpy as np\nfrom gymnasium import spaces\n"
        + UNIX_PROBE
        + textwrap.dedent(f"""
            class Probe(gym.Env):
                observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
                action_space = spaces.Discrete(2)

                def reset(self, *, seed=None, options=None):
                    super().reset(seed=seed)
                    info = unix_attempts(*{unix_listeners.args()})
                    return np.zeros(1, np.float32), info
            """)
    )
    env = remote.RemoteEnv(file, "Probe")
    try:
        _, tried = env.reset(seed=0)
    finally:
        env.close()
        remote.drop_spare()
    _check_unix(method, dict(tried), unix_listeners, "python env")


@pytest.mark.parametrize("method", _methods())
def test_confined_code_has_its_own_tmp_and_run(
    method: str, unix_listeners: UnixListeners, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each layer on its own: the host's socket folders are not seen (so
    the seccomp filter is not the only guard), and a socket file the code
    can see (under the interpreter's prefix) still refuses it."""
    import json

    monkeypatch.setenv(confine.METHOD_ENV, method)
    # What lies under the interpreter's prefix is bound back in, visible (a
    # clone under /tmp puts its .venv there): "seen" below, not hidden.
    hidden = [
        p
        for p in unix_listeners.streams
        if p.startswith(confine.HIDDEN) and not p.startswith(sys.prefix)
    ]
    seen = [p for p in unix_listeners.streams if p.startswith(sys.prefix)]
    program = textwrap.dedent(f"""
        import json, os, socket
        out = {{p: os.path.exists(p) for p in {hidden!r}}}
        for p in {seen!r}:
            out["exists " + p] = os.path.exists(p)
            try:
                socket.socket(socket.AF_UNIX).connect(p)
                out[p] = "reached"
            except OSError as exc:
                out[p] = type(exc).__name__
        # No descriptor of the host is passed on (a pids cgroup's, once).
        out["fds"] = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        print(json.dumps(out))
    """)
    result = confine.run(
        [sys.executable, "-I", "-c", program], what="The test", timeout_s=20
    )
    assert result.ok, result
    out = json.loads(result.stdout)
    assert hidden and all(out[p] is False for p in hidden), out
    for p in seen:
        assert out["exists " + p] is True and out[p] == "PermissionError", out
    assert out["fds"] == [0, 1, 2, 3], out  # 3: the listing's own
    assert unix_listeners.reached() == []
