"""The supervisor stays light: hardware detection without torch (NVML,
``nvidia-smi``, psutil; torch only in a short-lived worker), chat generation
in a worker process, and fast replies to what the studio asks at start."""

from __future__ import annotations

import json
import os
import stat
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_harness import EngineProcess

from engine import hardware, protocol
from engine.jobs.priority import session_niceness

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20

# What nvidia-smi prints for the detection query: an H100 and a T4.
SMI_DETECT = "0, NVIDIA H100 80GB HBM3, 81559, 9.0\n1, Tesla T4, 15360, 7.5\n"


def fake_smi(folder: Path) -> Path:
    """An ``nvidia-smi`` that answers the detection query only."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if '--query-gpu=index,name,memory.total,compute_cap' not in sys.argv:\n"
        "    sys.exit(2)\n"
        f"sys.stdout.write({SMI_DETECT!r})\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def hello() -> protocol.Hello:
    return protocol.Hello(protocol_version=protocol.PROTOCOL_VERSION)


@pytest.fixture
def engine() -> Iterator[EngineProcess]:
    e = EngineProcess()
    try:
        yield e
    finally:
        e.close()


def test_gpus_from_nvidia_smi_without_torch(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path / "bin")
    code = (
        "import json, sys; from engine.hardware import detect; "
        f"info = detect(nvidia_smi={str(smi)!r}, probe_torch=False); "
        "print(json.dumps({'info': info.to_dict(), 'torch': 'torch' in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result = json.loads(out.stdout)
    assert result["torch"] is False
    info = result["info"]
    assert [(g["name"], g["compute_capability"], g["bf16"]) for g in info["gpus"]] == [
        ("NVIDIA H100 80GB HBM3", "9.0", True),
        ("Tesla T4", "7.5", False),
    ]
    assert info["gpus"][0]["memory_total_bytes"] == 81559 * MIB
    assert info["recommendations"]["device"] == "cuda"
    assert info["recommendations"]["batch_size"] == 16  # from the 80 GB card
    # The torch version comes from its package metadata, not an import.
    assert info["torch_version"] == hardware.torch_version()


def test_smi_lines_it_cannot_read_are_skipped() -> None:
    gpus = hardware.parse_nvidia_smi_gpus(
        "No devices were found\n0, Jetson, [N/A], [N/A]\n"
    )
    assert [(g.name, g.memory_total_bytes, g.compute_capability) for g in gpus] == [
        ("Jetson", 0, "")
    ]


PROBE = """
import json, subprocess, sys
from engine import hardware
calls = []
real_run = subprocess.run
def counting_run(cmd, **kw):
    calls.append(list(cmd))
    return real_run(cmd, **kw)
hardware.subprocess.run = counting_run
first = hardware.detect_gpus(probe_torch=True)
assert first == hardware.detect_gpus(probe_torch=True)
print(json.dumps({
    "gpus": [g.name for g in first],
    "probes": sum("--torch-facts" in c for c in calls),
    "torch": "torch" in sys.modules,
}))
"""


def test_torch_facts_come_from_a_worker_and_are_cached() -> None:
    """Where only torch can see a GPU (MPS, ROCm) a worker process asks it;
    the calling process never imports torch, and asks once."""
    env = {**os.environ, "PATH": "/nonexistent"}  # no nvidia-smi
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(out.stdout)
    assert result["probes"] == 1 and result["torch"] is False
    worker = subprocess.run(
        [sys.executable, "-m", "engine", "hardware", "--torch-facts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert result["gpus"] == [g["name"] for g in json.loads(worker.stdout)["gpus"]]


def _median_ms(call: Callable[[], object], n: int = 15) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


SUPERVISOR_REQUESTS: dict[str, Callable[[], protocol.Request]] = {
    "hello": hello,
    "env catalog": protocol.GetEnvCatalog,
    "flow catalog": protocol.GetFlowCatalog,
    "schema": lambda: protocol.GetRunSchema(kind="rl.train"),
    "hardware": protocol.DetectHardware,
}


def supervisor_medians(engine: EngineProcess, n: int = 15) -> dict[str, float]:
    """Median reply time (ms) of each request the studio sends at start,
    after one warm-up call each."""
    medians = {}
    for name, make in SUPERVISOR_REQUESTS.items():
        engine.call(make(), timeout=60)
        medians[name] = _median_ms(lambda m=make: engine.call(m(), timeout=60), n)
    return medians


def test_supervisor_replies_fast_and_never_loads_torch(
    engine: EngineProcess,
) -> None:
    medians = supervisor_medians(engine)
    print("supervisor reply medians (ms):", json.dumps(medians))
    assert all(ms < 50 for ms in medians.values()), medians
    result = engine.call(hello())
    assert result["heavy_modules"] == []
    # The process itself agrees: no torch library mapped into it.
    maps = Path(f"/proc/{result['pid']}/maps")
    if maps.exists():
        assert "libtorch" not in maps.read_text()


def test_chat_generates_in_a_worker_not_the_supervisor(
    engine: EngineProcess, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    from tiny_models import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny", "qwen2")
    turn = [{"role": "user", "content": "Move PROJ-7 to Done."}]
    ask = protocol.Chat(model=str(folder), messages=turn, max_new_tokens=8)
    first = engine.call(ask, timeout=120)
    again = engine.call(ask, timeout=120)
    assert isinstance(first["reply"], str) and first["reply"] == again["reply"]
    assert first["tokens"] == again["tokens"] and 1 <= first["tokens"] <= 8  # greedy
    # the first turn loaded the model; the worker kept it for the second
    assert first["load_seconds"] > again["load_seconds"] and first["seconds"] > 0
    assert engine.call(hello())["heavy_modules"] == []

    # A folder that holds no model: one sentence from the worker.
    empty = tmp_path / "empty"
    empty.mkdir()
    reply = engine.reply_to(engine.send(protocol.Chat(model=str(empty), messages=turn)))
    assert isinstance(reply, protocol.Error)
    assert reply.message == (
        f"{empty} holds neither a model (config.json) nor a LoRA adapter "
        "(adapter_config.json) to chat with."
    )


def test_a_chat_worker_that_dies_costs_one_turn(tmp_path: Path) -> None:
    """Killed mid-turn (as the OOM killer would): that turn fails in one
    sentence, the next starts a fresh worker."""
    from engine.errors import EngineError
    from engine.llm.chat_worker import ChatWorker

    worker = ChatWorker(timeout_s=60)
    try:
        empty = tmp_path / "empty"
        empty.mkdir()
        turn = [{"role": "user", "content": "hi"}]
        with pytest.raises(EngineError, match="neither a model"):
            worker.chat(empty, turn, 4)
        pid = worker.pid
        assert pid is not None
        os.kill(pid, 9)
        with pytest.raises(EngineError) as exc:
            worker.chat(empty, turn, 4)
        assert str(exc.value) == (
            "The chat worker stopped with exit code -9 (out of memory?); the next "
            "request starts a new one."
        )
        with pytest.raises(EngineError, match="neither a model"):
            worker.chat(empty, turn, 4)
        assert worker.pid not in (None, pid)
    finally:
        worker.close()


def test_jobs_run_nicer_than_the_engine(tmp_path: Path) -> None:
    """A training job yields the CPU to the studio window and its engine,
    and its libraries draw no progress bars into its log."""
    import psutil

    from engine.jobs.runner import JOB_NICENESS
    from engine.jobs.supervisor import NO_PROGRESS_BARS, Supervisor

    seen: list[protocol.Message] = []
    supervisor = Supervisor(seen.append)
    supervisor.open_project(str(tmp_path / "p"), create=True, with_examples=False)
    try:
        run_id = supervisor.start_run(
            "selftest", {"steps": 100_000, "step_seconds": 0.01}
        )
        pid = supervisor.require_project().get_run(run_id).pid
        assert pid
        wanted = min(19, os.nice(0) + JOB_NICENESS)
        # Linux's autogroups share the CPU between sessions first: the job,
        # in a session of its own, makes that session as nice as itself.
        grouped = session_niceness(pid) is not None

        def settled() -> bool:
            session = session_niceness(pid)
            return stat_niceness(pid) == wanted and (not grouped or session == wanted)

        deadline = time.monotonic() + 60
        # The job sets its niceness as it starts.
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.getsid(pid) == pid
        assert stat_niceness(pid) == psutil.Process(pid).nice() == wanted
        if grouped:
            assert session_niceness(pid) == wanted
        environ = psutil.Process(pid).environ()
        assert {k: environ.get(k) for k in NO_PROGRESS_BARS} == NO_PROGRESS_BARS
    finally:
        supervisor.shutdown(5)


def stat_niceness(pid: int) -> int:
    """A process's nice value as ``/proc/<pid>/stat`` has it (field 19)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces; the fields after it do not.
    return int(text.rsplit(")", 1)[1].split()[16])


PRIORITY_PROBE = (
    "import os, sys\n"
    "from engine.jobs.priority import lower_priority, session_niceness\n"
    "lower_priority(int(sys.argv[1]))\n"
    "print(os.nice(0), session_niceness())\n"
)


@pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="no autogroup scheduling"
)
def test_a_job_leading_its_session_makes_the_session_nicer_and_only_then() -> None:
    """In a session of its own (as the supervisor and a sweep start jobs)
    the process's session gets its nice value; in the caller's session
    (a job started from a terminal) the session keeps its own."""
    from engine.jobs.priority import session_niceness

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    base = os.nice(0)
    ours = session_niceness()
    wanted = min(19, base + 3)
    out = subprocess.run(
        [sys.executable, "-c", PRIORITY_PROBE, "3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        start_new_session=True,
    ).stdout.split()
    assert out == [str(wanted), str(wanted)]
    out = subprocess.run(
        [sys.executable, "-c", PRIORITY_PROBE, "3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert out == [str(wanted), str(ours)]
    assert session_niceness() == ours
