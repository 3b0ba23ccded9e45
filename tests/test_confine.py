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
import signal
import socket
import subprocess
import sys
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
