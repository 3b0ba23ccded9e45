"""Python-kind envs run in their own process (engine.envs.env_worker) behind
a proxy (engine.envs.remote.RemoteEnv): values and spaces cross as JSON, the
engine never imports the file, and a worker that dies, hangs or answers
nonsense is one sentence naming the file."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from gymnasium import spaces

from engine import protocol
from engine.envs import env_wire, remote
from engine.envs.registry import describe_env, make, register_spec
from engine.envs.remote import RemoteEnv, RemoteEnvError, load_env_class
from engine.envs.spec import SpecError, load_spec
from tests.engine_harness import EngineProcess

HEADER = """
import os, sys
import gymnasium as gym
import numpy as np
from gymnasium import spaces
"""

MANY_SPACES = (
    HEADER
    + '''
class Many(gym.Env):
    """Every space that crosses, values of every kind, a user exception."""

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 7}
    observation_space = spaces.Dict({
        "pos": spaces.Box(-np.inf, np.inf, (2,), np.float64),
        "grid": spaces.MultiBinary([2, 3]),
        "pair": spaces.Tuple((spaces.Discrete(3, start=1),
                              spaces.MultiDiscrete([2, 5]))),
        "img": spaces.Box(0, 255, (4, 4, 3), np.uint8),
    })
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, render_mode=None, speed: float = 1.0, label="x"):
        self.render_mode = render_mode
        self.speed = speed

    def _obs(self):
        return {
            "pos": np.array([self.speed, -0.0]),
            "grid": np.array([[1, 0, 1], [0, 1, 0]], np.int8),
            "pair": (np.int64(2), np.array([1, 4])),
            "img": np.full((4, 4, 3), 200, np.uint8),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        print("stdout is not the protocol")  # lands on stderr
        return self._obs(), {"options": options, "seed": seed}

    def step(self, action):
        if float(action[0]) > 0.99:
            raise ValueError(f"action {action[0]:.2f} too large")
        if float(action[0]) < -0.99:
            class Wobble(Exception):
                pass
            raise Wobble("the table wobbles")
        info = {"obj": object, "nan": float("nan"), 3: "int key",
                "__rls__": "tag-like key", "deep": [[[[[[1]]]]]],
                "big": 2**80, "f32": np.float32(0.5)}
        return self._obs(), np.float32(0.25), False, False, info

    def render(self):
        if self.render_mode == "ansi":
            return "text"
        return np.zeros((2, 2, 3), np.uint8)

    def action_masks(self):
        return np.array([True, False])
'''
)

CARTPOLE_LIKE = (
    HEADER
    + '''
class Pole(gym.Env):
    """CartPole's dynamics, in the user's file."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self.np_random.uniform(-0.05, 0.05, 4)
        self.t = 0
        return self.s.astype(np.float32), {}

    def step(self, action):
        x, dx, th, dth = self.s
        f = 10.0 if action == 1 else -10.0
        c, s = np.cos(th), np.sin(th)
        tmp = (f + 0.05 * dth**2 * s) / 1.1
        thacc = (9.8 * s - c * tmp) / (0.5 * (4 / 3 - 0.1 * c**2 / 1.1))
        xacc = tmp - 0.05 * thacc * c / 1.1
        self.s = np.array([x + 0.02 * dx, dx + 0.02 * xacc,
                           th + 0.02 * dth, dth + 0.02 * thacc])
        self.t += 1
        done = bool(abs(self.s[0]) > 2.4 or abs(self.s[2]) > 0.21)
        return self.s.astype(np.float32), 1.0, done, self.t >= 200, {}
'''
)

PLAIN = (
    HEADER
    + """
class Plain(gym.Env):
    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        STEP_HOOK
        return np.zeros(1, np.float32), 1.0, self.t >= 10, False, {}
"""
)


def _spec(folder: Path, name: str, code: str, cls: str, **body: Any) -> Path:
    envs = folder / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    (envs / f"{name}.py").write_text(code)
    path = envs / f"{name}.env.json"
    doc = {
        "format": 1,
        "name": name,
        "kind": "python",
        "python": {"file": f"{name}.py", "class": cls, **body},
    }
    path.write_text(json.dumps(doc))
    return path


def _plain(folder: Path, name: str, hook: str = "pass", at_import: str = "") -> Path:
    return _spec(folder, name, PLAIN.replace("STEP_HOOK", hook) + at_import, "Plain")


def _remote(spec_path: Path, **kwargs: Any) -> RemoteEnv:
    spec = load_spec(spec_path)
    return RemoteEnv(spec.resolve(spec.body["file"]), spec.body["class"], **kwargs)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------- the wire


def test_values_cross_exactly_and_info_is_reduced_to_json(tmp_path: Path) -> None:
    env = _remote(_spec(tmp_path, "many", MANY_SPACES, "Many"), speed=2.5)
    try:
        assert env.pid != os.getpid()
        assert isinstance(env.observation_space, spaces.Dict)
        pair = env.observation_space["pair"]
        assert isinstance(pair, spaces.Tuple) and pair[0] == spaces.Discrete(3, start=1)
        assert env.metadata == {"render_modes": ["rgb_array", "ansi"], "render_fps": 7}
        assert [p["name"] for p in env.parameters] == ["speed", "label"]
        obs, info = env.reset(seed=3, options={"level": [1, 2]})
        assert info == {"options": {"level": [1, 2]}, "seed": 3}
        assert obs in env.observation_space
        assert obs["pos"].dtype == np.float64 and obs["pos"][0] == 2.5
        assert np.signbit(obs["pos"][1])  # -0.0 stays -0.0
        assert isinstance(obs["pair"], tuple) and obs["pair"][0] == 2
        assert isinstance(obs["pair"][0], np.int64)
        obs["img"][0, 0, 0] = 1  # arrays that arrive are writable
        obs, reward, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        assert isinstance(reward, np.float32) and reward == 0.25
        assert terminated is False and truncated is False
        assert info["obj"] == "<class 'object'>"
        assert np.isnan(info["nan"]) and info["3"] == "int key"
        assert info["__rls__"] == "tag-like key"
        assert info["deep"] == [[[[[[1]]]]]]
        assert info["big"] == str(2**80)
        assert info["f32"] == np.float32(0.5)
        assert env.action_masks().tolist() == [True, False]
        assert env.render().shape == (2, 2, 3)
        # The env's own exceptions come back as themselves.
        with pytest.raises(ValueError, match=r"^action 1\.00 too large$"):
            env.step(np.ones(2, np.float32))
        with pytest.raises(RemoteEnvError, match="the table wobbles") as info_:
            env.step(-np.ones(2, np.float32))
        assert type(info_.value).__name__ == "Wobble"
        env.step(np.zeros(2, np.float32))  # and the env goes on
    finally:
        env.close()
    assert _gone(env.pid)


def test_a_gym_make_of_a_python_spec_is_the_proxy(tmp_path: Path) -> None:
    env = make(_spec(tmp_path, "many", MANY_SPACES, "Many"), render_mode="ansi")
    try:
        assert isinstance(env.unwrapped, RemoteEnv)
        assert env.render_mode == "ansi"
        # MaskablePPO finds the masks as it would on the user's class.
        assert env.get_wrapper_attr("action_masks")().tolist() == [True, False]
        env.reset(seed=0)
        assert env.render() == "text"
        assert not any(m.startswith("rlstudio_user_env_") for m in sys.modules)
    finally:
        env.close()


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_subclasses_travel_as_their_plain_types() -> None:
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    value = collections.OrderedDict(a=Level.HIGH, b=np.bool_(True))
    back = env_wire.decode(env_wire.encode(value))
    assert back == {"a": 3, "b": True} and type(back["a"]) is int
    assert type(back["b"]) is np.bool_


def test_decode_refuses_malformed_values() -> None:
    good = env_wire.encode(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert env_wire.decode(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    bad = [
        {**good, "shape": [1000, 1000]},  # more than was sent
        {**good, "dtype": "object"},
        {**good, "shape": [-1, -6]},
        {**good, "data": "%%%"},
        {"__rls__": "pickle", "items": []},
        {"__rls__": "f", "v": "1e999"},
        {"__rls__": "dict", "items": [[1, 2, 3]]},
        {"__rls__": "dict", "items": [[1, 2]]},
        {"__rls__": "tuple"},
        "\ud800",
        _nested(70),
    ]
    for value in bad:
        with pytest.raises(ValueError):
            env_wire.decode(value)
    for line in (
        b"[1e999]",
        b"[" + b"9" * 30 + b"]",
        b"[-Infinity]",
        b"\xff",
        b"[" * 5000 + b"]" * 5000,
        b'{"a": ',
    ):
        with pytest.raises(ValueError):
            env_wire.parse_line(line)
    assert env_wire.parse_line(b'{"ok": [1, -2.5, "\\u00e9"]}') == {
        "ok": [1, -2.5, "é"]
    }
    for desc in (
        {"type": "Graph"},
        {"type": "Discrete", "n": "2", "start": 0},
        {"type": "Box", "low": [0], "high": [1], "dtype": "float32"},
        {
            "type": "Box",
            "low": np.ones(2, np.float32),
            "high": np.zeros(2, np.float32),
            "dtype": "float32",
        },
        {"type": "Dict", "spaces": [["a"]]},
    ):
        with pytest.raises(ValueError):
            env_wire.build_space(desc)


def test_a_space_that_cannot_cross_is_named(tmp_path: Path) -> None:
    code = PLAIN.replace("STEP_HOOK", "pass").replace(
        "observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)",
        "observation_space = spaces.Text(5)",
    )
    with pytest.raises(SpecError) as info:
        _remote(_spec(tmp_path, "text", code, "Plain"))
    assert info.value.field == "python.class"
    assert "observation_space: a Text space cannot cross" in str(info.value)


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("hook", "sentence"),
    [
        ("os._exit(7)", "the env process exited with code 7 during step."),
        (
            "import ctypes; ctypes.string_at(0)",
            "the env process was killed by SIGSEGV during step.",
        ),
        (
            "import time; time.sleep(60)",
            "the env process took longer than 1 s during step and was stopped.",
        ),
        (
            # A hostile env writes to the protocol's own pipe.
            '[os.write(fd, b\'{"ok": 1, "x": 2}\\n\') for fd in range(3, 40)'
            " if _is_pipe_out(fd)]",
            "the env process sent a malformed answer to step.",
        ),
        (
            "[os.write(fd, b'{\"ok\": NaN}\\n') for fd in range(3, 40)"
            " if _is_pipe_out(fd)]",
            "the env process sent a malformed answer to step (NaN, which JSON "
            "does not allow).",
        ),
        (
            '[os.write(fd, b\'{"ok": {"__rls__": "nd", "dtype": '
            '"object"}}\\n\') for fd in range(3, 40) if _is_pipe_out(fd)]',
            "the env process sent a malformed answer to step (an array of dtype "
            "'object').",
        ),
        (
            "[os.write(fd, b'[' * 99 + b']' * 99 + b'\\n') for fd in range(3, 40)"
            " if _is_pipe_out(fd)]",
            "the env process sent a malformed answer to step (nested deeper "
            "than 64 levels).",
        ),
        (
            "[os.write(fd, b'x' * (17 << 20)) for fd in range(3, 40)"
            " if _is_pipe_out(fd)]",
            "the env process sent an answer to step larger than 16 MiB.",
        ),
    ],
)
def test_a_worker_that_dies_or_misbehaves_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: str, sentence: str
) -> None:
    helper = """
import fcntl, stat
def _is_pipe_out(fd):
    try:
        mode = os.fstat(fd).st_mode
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return stat.S_ISFIFO(mode) and flags & os.O_ACCMODE == os.O_WRONLY and fd != 1
"""
    env = _remote(_plain(tmp_path, "bad", hook, at_import=helper))
    env.reset(seed=0)
    monkeypatch.setattr(remote, "CALL_TIMEOUT_S", 1.0)  # for the step only
    with pytest.raises(SpecError) as info:
        env.step(0)
    assert info.value.field == "python.file"
    assert str(info.value).startswith(f"python.file bad.py: {sentence}")
    assert _gone(env.pid)
    with pytest.raises(SpecError):  # and it stays failed
        env.reset()
    env.close()


def test_a_process_killed_from_outside_is_named(tmp_path: Path) -> None:
    env = _remote(_plain(tmp_path, "oom"))
    env.reset(seed=0)
    tree = [env.pid, *(p.pid for p in psutil.Process(env.pid).children(True))]
    os.killpg(env.pid, 9)  # as the out-of-memory killer would
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in tree):  # the sandbox dies with it
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with pytest.raises(SpecError) as info:
        env.step(0)
    assert str(info.value) == (
        "python.file oom.py: the env process was killed by SIGKILL during step."
    )


def test_import_failures_and_wrong_classes_are_named(tmp_path: Path) -> None:
    path = _plain(tmp_path, "x", at_import="\nos._exit(3)\n")
    with pytest.raises(SpecError, match=r"exited with code 3 during import\.$"):
        load_env_class(tmp_path / "envs" / "x.py", "Plain")
    with pytest.raises(SpecError) as info:
        _remote(_spec(tmp_path, "y", PLAIN.replace("STEP_HOOK", ""), "Nope"))
    assert info.value.field == "python.class"
    path = _spec(tmp_path, "z", PLAIN.replace("STEP_HOOK", ""), "Plain")
    spec = load_spec(path)
    with pytest.raises(SpecError) as info:
        RemoteEnv(spec.resolve("z.py"), "Plain", colour="red")
    assert info.value.field == "python.kwargs"
    assert "Plain(...) failed: TypeError" in str(info.value)


def test_close_ends_the_whole_process_tree(tmp_path: Path) -> None:
    at_import = """
import subprocess
_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
"""
    env = _remote(_plain(tmp_path, "kids", "pass", at_import))
    env.reset(seed=0)
    tree = psutil.Process(env.pid).children(recursive=True)
    assert any("time.sleep(600)" in " ".join(p.cmdline()) for p in tree)
    env.close()
    deadline = time.monotonic() + 10
    while not all(_gone(p.pid) for p in tree):
        assert time.monotonic() < deadline, "a process of the env survived close"
        time.sleep(0.05)
    assert _gone(env.pid)


def test_the_next_env_gets_a_process_started_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each env process starts the next one's interpreter; one nobody takes
    ends by itself."""
    path = _plain(tmp_path, "ahead")
    remote.drop_spare()
    first = _remote(path)
    spare = remote._spare
    assert spare is not None
    second = _remote(path)
    assert second.pid == spare.confined.proc.pid != first.pid
    monkeypatch.setattr(remote, "SPARE_IDLE_S", 1.0)
    third = _remote(path)  # starts a spare that waits 1 s
    for env in (first, second, third):
        env.close()
    spare = remote._spare
    assert spare is not None and spare.confined.proc.wait(timeout=30) == 0
    fourth = _remote(path)  # a spare that ended is not used
    assert fourth.pid != spare.confined.proc.pid
    fourth.close()
    remote.drop_spare()


def _child_drops(env: RemoteEnv) -> None:
    with pytest.raises(SpecError, match="made in another process"):
        env.step(0)
    env.close()
    remote.drop_spare()


def test_a_forked_child_leaves_the_parents_env_processes_alone(
    tmp_path: Path,
) -> None:
    import multiprocessing

    env = _remote(_plain(tmp_path, "forked"))
    env.reset(seed=0)
    spare = remote._spare
    assert spare is not None
    child = multiprocessing.get_context("fork").Process(
        target=_child_drops, args=(env,)
    )
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert env.step(0)[1] == 1.0  # still the parent's
    assert spare.confined.proc.poll() is None
    env.close()
    remote.drop_spare()


def test_a_dropped_proxy_ends_its_process(tmp_path: Path) -> None:
    env = _remote(_plain(tmp_path, "p"))
    assert not hasattr(env, "action_masks")  # Plain has none
    pid = env.pid
    del env  # never closed
    assert _gone(pid)


# ---------------------------------------------------------------- callers


def test_env_check_survives_an_env_that_exits(tmp_path: Path) -> None:
    """The engine never imports the file: os._exit in it ends only the env's
    process; env.check answers with the sentence and the engine goes on."""
    at_import = _plain(tmp_path, "exit_import", at_import="\nos._exit(7)\n")
    in_step = _plain(tmp_path, "exit_step", hook="os._exit(7)")
    in_init = _plain(
        tmp_path, "exit_init", at_import="\nPlain.__init__ = lambda s: os._exit(7)\n"
    )
    engine = EngineProcess()
    try:
        engine.call(protocol.Hello(client="test"))
        for path, when in (
            (at_import, "during import"),
            (in_step, "during step"),
            (in_init, "while building the env"),
        ):
            report = engine.call(
                protocol.CheckEnv(path=str(path), steps=20), timeout=120
            )
            assert report["ok"] is False
            sentence = (
                f"python.file {path.stem.removesuffix('.env')}.py: the env process "
                f"exited with code 7 {when}."
            )
            errors = [p for p in report["problems"] if p["severity"] == "error"]
            assert errors and all(p["path"] == "python.file" for p in errors)
            assert errors[0]["message"] == sentence
            assert engine.call(protocol.Ping())  # and the engine answers
        # The catalog makes its instances in env processes too.
        ids = ["rlstudio/exit_step-v0", "rlstudio/exit_init-v0"]
        envs = engine.call(protocol.GetEnvCatalog(ids=ids, with_spaces=True))["envs"]
        by_id = {e["id"]: e for e in envs}
        assert by_id[ids[0]]["observation_space"] == "Box(0.0, 1.0, (1,), float32)"
        assert by_id[ids[1]]["error"] == (
            "SpecError: python.file exit_init.py: the env process exited with "
            "code 7 while building the env."
        )
        assert engine.proc.poll() is None
    finally:
        assert engine.close() == 0


def test_the_catalog_describes_a_python_env_from_its_process(tmp_path: Path) -> None:
    env_id = register_spec(load_spec(_spec(tmp_path, "many", MANY_SPACES, "Many")))
    described = describe_env(env_id)
    assert [p["name"] for p in described["parameters"]] == ["speed", "label"]
    assert described["render_modes"] == ["rgb_array", "ansi"]
    assert described["action_space"] == "Box(-1.0, 1.0, (2,), float32)"
    assert not any(m.startswith("rlstudio_user_env_") for m in sys.modules)


@pytest.mark.slow
def test_ppo_trains_on_a_python_env_through_the_proxy(tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    from engine.jobs.context import JobContext
    from engine.rl import train as rltrain
    from engine.rl.config import validate
    from engine.store.atomic import atomic_write_json

    _spec(tmp_path, "pole", CARTPOLE_LIKE, "Pole", max_episode_steps=200)
    cfg = validate(
        {
            "env": "rlstudio/pole-v0",
            "algo": "PPO",
            "total_steps": 384,
            "seed": 1,
            "n_envs": 2,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
            "project_dir": str(tmp_path),
        }
    )
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    atomic_write_json(
        run_dir / "config.json", {"run_id": "r1", "kind": "rl.train", "config": cfg}
    )
    me = psutil.Process()
    # what earlier tests of the session left running is not this run's
    before = {c.pid for c in me.children(recursive=True)}
    ctx = JobContext("r1", run_dir, "rl.train", cfg, resume=False, events=None)
    try:
        summary = rltrain.run(ctx)
    finally:
        ctx.close()
    assert summary["total_steps"] >= 384
    assert not any(m.startswith("rlstudio_user_env_") for m in sys.modules)
    remote.drop_spare()
    left = [c for c in me.children(recursive=True) if c.pid not in before]
    assert not [c for c in left if c.status() != "zombie"]
    model = PPO.load(next(run_dir.glob("checkpoints/*/model.zip")))
    assert model.observation_space == spaces.Box(-np.inf, np.inf, (4,), np.float32)


@pytest.mark.slow
def test_a_run_whose_env_process_dies_fails_with_the_sentence(tmp_path: Path) -> None:
    from engine import cli
    from engine.store.project import Project

    _plain(tmp_path, "dies", hook="if self.t == 5: os._exit(7)")
    argv = ["train", "--env", "rlstudio/dies-v0", "--algo", "PPO", "--steps", "128"]
    argv += ["--project", str(tmp_path), "--quiet", "--set", "n_envs=1"]
    argv += ["--set", "n_steps=64", "--set", "batch_size=32"]
    assert cli.main(argv) == 2  # the CLI says the sentence, no traceback
    project = Project.open(tmp_path)
    try:
        (run,) = project.list_runs()
    finally:
        project.close()
    assert run.status == "failed"
    assert run.reason == (
        "python.file dies.py: the env process exited with code 7 during step."
    )


# ---------------------------------------------------------------- confinement

PROBE = """
import socket
_reset = Plain.reset
def reset(self, *, seed=None, options=None):
    obs, _ = _reset(self, seed=seed)
    tried = {}
    try:
        with open(OUTSIDE, "w") as f:
            f.write("escaped")
        tried["write"] = "done"
    except OSError as exc:
        tried["write"] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        tried["connect"] = "done"
    except OSError as exc:
        tried["connect"] = type(exc).__name__
    with open("scratch.txt", "w") as f:  # the working folder is writable
        tried["scratch"] = f.write("ok")
    return obs, tried
Plain.reset = reset
"""


def _methods() -> list[Any]:
    from engine import confine

    return [
        pytest.param(m)
        if confine._works(m)
        else pytest.param(m, marks=pytest.mark.skip(reason=f"{m} does not work here"))
        for m in confine.METHODS
    ]


@pytest.mark.parametrize("method", _methods())
def test_the_env_process_is_confined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    import socket

    from engine import confine

    monkeypatch.setenv(confine.METHOD_ENV, method)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    outside = tmp_path / "escaped.txt"
    probe = PROBE.replace("OUTSIDE", repr(str(outside)))
    probe = probe.replace("PORT", str(server.getsockname()[1]))
    env = _remote(_plain(tmp_path, "probe", at_import=probe))
    try:
        _, tried = env.reset(seed=0)
        assert tried["write"] in ("OSError", "PermissionError")
        assert tried["connect"] != "done" and tried["scratch"] == 2
        assert env.step(0)[1] == 1.0
    finally:
        env.close()
        server.close()
    assert not outside.exists()


def test_without_confinement_a_python_env_is_refused_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import confine

    monkeypatch.setenv(confine.METHOD_ENV, "none")
    monkeypatch.delenv(confine.ALLOW_UNCONFINED_ENV, raising=False)
    path = _plain(tmp_path, "free")
    with pytest.raises(SpecError) as info:
        _remote(path)
    assert info.value.field == "python.file"
    assert str(info.value).startswith(
        "The python env free.py needs confinement (bubblewrap or unshare)"
    )
    monkeypatch.setenv(confine.ALLOW_UNCONFINED_ENV, "1")  # the user allows it
    env = _remote(path)
    try:
        env.reset(seed=0)
        assert env.step(0)[1] == 1.0
    finally:
        env.close()
