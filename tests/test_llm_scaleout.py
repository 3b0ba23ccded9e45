"""Scale-out of llm.train on the CPU: real ``accelerate launch`` processes
(gloo) training the tiny model, two "machines" on 127.0.0.1, Stop, resume
with another number of processes, a killed rank, and bad input."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from tiny_models import TINY_TRAIN, build_tiny_model

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, validate_config
from engine.llm import distributed

ROOT = Path(__file__).resolve().parents[1]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
TRAIN = {**TINY_TRAIN, "max_steps": 2, "num_processes": 2, "join_timeout_s": 240.0}
WAIT_S = 300
DIGEST = re.compile(r"\[rank (\d+)\] trained weights digest (\w+)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoggedContext(JobContext):
    """A JobContext that keeps its log lines and the events it sends to the
    supervisor for the test to read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent = io.StringIO()
        super().__init__(*args, events=self.sent, **kwargs)
        self.lines: list[str] = []

    def log(self, text: str) -> None:
        self.lines.append(text)


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = build_tiny_model(root / "base")
        self.datasets: dict[str, str] = {}
        ctx = JobContext(
            "collect",
            root / "runs" / "collect",
            "llm.collect",
            validate_config(
                "llm.collect",
                {"env": ENV, "policy": "expert", "episodes": 8, "seed": 0, "name": "x"},
            ),
        )
        (root / "runs" / "collect").mkdir(parents=True, exist_ok=True)
        get_kind("llm.collect").entry(ctx)
        ctx.close()
        for method in ("sft", "grpo"):
            cfg = validate_config(
                "llm.dataset",
                {"traces": ["x.jsonl"], "method": method, "seed": 0, "name": method},
            )
            run_dir = root / "runs" / f"ds-{method}"
            run_dir.mkdir(parents=True)
            ctx = JobContext(f"ds-{method}", run_dir, "llm.dataset", cfg)
            summary = get_kind("llm.dataset").entry(ctx)
            ctx.close()
            self.datasets[method] = summary["dataset"]

    def config(self, method: str, **over: Any) -> dict[str, Any]:
        cfg = {
            **TRAIN,
            "method": method,
            "model": str(self.model),
            "dataset": self.datasets[method],
            "main_process_port": free_port(),
            **over,
        }
        if method == "grpo":
            cfg["rewards"] = [{"name": "format", "weight": 1.0}]
        return cfg

    def context(
        self, config: dict[str, Any], run_id: str | None = None, resume: bool = False
    ) -> LoggedContext:
        cfg = validate_config("llm.train", config)
        run_id = run_id or f"train-{uuid.uuid4().hex[:6]}"
        run_dir = self.root / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        return LoggedContext(run_id, run_dir, "llm.train", cfg, resume=resume)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return Project(tmp_path_factory.mktemp("scaleout"))


def metrics_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    )


def train(ctx: LoggedContext) -> dict[str, Any]:
    try:
        return get_kind("llm.train").entry(ctx)
    finally:
        ctx.close()


class Background:
    """A job function running in a thread: its summary or its error."""

    def __init__(self, ctx: LoggedContext) -> None:
        self.ctx = ctx
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.summary = train(self.ctx)
        except BaseException as exc:  # the test reads it
            self.error = exc

    def join(self, context: str = "") -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), f"the run did not end\n{context}"


def wait_until(cond: Any, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def pids_of(run_dir: Path) -> list[int]:
    folder = run_dir / "distributed" / "ranks"
    return [int(p.read_text()) for p in folder.glob("rank-*.pid")]


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, OSError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_naming(path: Path) -> list[int]:
    """Live processes whose command line names ``path``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if str(path).encode() in cmdline and alive(int(proc.name)):
                found.append(int(proc.name))
    return found


# ---------------------------------------------------------------- complete runs
@pytest.mark.slow
def test_grpo_with_two_processes(project: Project) -> None:
    ctx = project.context(project.config("grpo", max_steps=1))
    summary = train(ctx)
    assert summary["metrics"]["global_step"] == 1
    rows = metrics_rows(ctx.run_dir)
    assert [r["step"] for r in rows if "reward/mean" in r] == [1]
    assert summary["models"][0]["kind"] == "lora-adapter"
    # the ranks averaged their gradients: the same weights after the step
    digests = dict(m.groups() for m in map(DIGEST.match, ctx.lines) if m is not None)
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]
    # the job passed rank 0's rows and the progress on to the studio
    events = [json.loads(x) for x in ctx.sent.getvalue().splitlines()]
    sent = [r for e in events if e["type"] == "run.metrics" for r in e["rows"]]
    assert [r["step"] for r in sent if "reward/mean" in r] == [1]
    assert any(e["type"] == "run.progress" and e["done"] == 1 for e in events)


@pytest.mark.slow
def test_stop_then_resume_with_one_process(project: Project) -> None:
    cfg = project.config("sft", max_steps=400)
    ctx = project.context(cfg, run_id="sft-stop")
    job = Background(ctx)
    wait_until(
        lambda: (
            any("train/loss" in r for r in metrics_rows(ctx.run_dir))
            or job.error is not None
        ),
        "a first training step",
    )
    ctx.request_stop()
    job.join()
    assert job.error is None, job.error
    assert job.summary is not None and job.summary["stopped"]
    stopped_at = job.summary["metrics"]["global_step"]
    checkpoints = list((ctx.run_dir / "checkpoints").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == [f"checkpoint-{stopped_at}"]
    # resumed in one process: the plain path, from the same checkpoint
    resumed = project.context(
        {**cfg, "num_processes": 1, "max_steps": stopped_at + 1},
        run_id="sft-stop",
        resume=True,
    )
    summary = train(resumed)
    assert summary["metrics"]["global_step"] == stopped_at + 1
    assert f"resuming from checkpoint-{stopped_at}" in resumed.lines


@pytest.mark.slow
def test_a_killed_rank_fails_the_run_and_leaves_no_process(project: Project) -> None:
    ctx = project.context(project.config("sft", max_steps=400))
    job = Background(ctx)
    pid_file = ctx.run_dir / "distributed" / "ranks" / "rank-1.pid"
    wait_until(
        lambda: (
            (pid_file.exists() and metrics_rows(ctx.run_dir)) or job.error is not None
        ),
        "rank 1 training",
    )
    pids = pids_of(ctx.run_dir)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    job.join()
    assert isinstance(job.error, EngineError), job.error
    assert str(job.error).startswith("Rank 1 of the run was killed by signal 9")
    assert not any(alive(p) for p in pids)
    assert processes_naming(ctx.run_dir) == []  # the launcher too


def start_machine_0(project: Project) -> tuple[LoggedContext, Background]:
    """An SFT run of two machines on localhost, started on machine 0 and
    waited for until it has written the job file machine 1 reads."""
    cfg = project.config("sft", num_machines=2, main_process_ip="127.0.0.1")
    ctx = project.context(cfg)
    job = Background(ctx)
    wait_until(
        lambda: (
            (ctx.run_dir / "distributed" / "job.json").exists() or job.error is not None
        ),
        "machine 0's launch",
    )
    return ctx, job


@pytest.mark.slow
def test_two_machines_on_localhost(project: Project) -> None:
    ctx, job = start_machine_0(project)
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "worker",
            "--run-dir",
            str(ctx.run_dir),
            "--machine-rank",
            "1",
            "--main-process-ip",
            "127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    job.join(f"worker exit {worker.returncode}\n{worker.stdout}\n{worker.stderr}")
    assert job.error is None, f"{job.error}\n{worker.stdout}\n{worker.stderr}"
    assert worker.returncode == 0, worker.stderr
    # SFT with num_processes=2 to completion, one process per "machine"
    summary = job.summary
    assert summary is not None and summary["metrics"]["global_step"] == 2
    assert not summary["stopped"]
    (model,) = summary["models"]
    assert (Path(model["file"]) / "adapter_config.json").is_file()
    # rank 0 alone wrote metrics: one loss row per step
    steps = [r["step"] for r in metrics_rows(ctx.run_dir) if "train/loss" in r]
    assert steps == [1, 2]
    config = json.loads(
        (ctx.run_dir / "distributed" / "accelerate_config.json").read_text()
    )
    assert config["num_processes"] == 2 and config["num_machines"] == 2
    assert config["use_cpu"] is True and config["machine_rank"] == 0
    assert any("--config_file" in line for line in ctx.lines)
    # each machine's run log has its ranks' lines, with their rank
    assert any(line.startswith("[rank 0] ") for line in ctx.lines)
    assert "[rank 1] " in worker.stdout
    assert not any(alive(p) for p in pids_of(ctx.run_dir))


@pytest.mark.slow
def test_a_machine_that_fails_ends_the_run_on_machine_0(project: Project) -> None:
    """Machine 0's ranks would wait for the failed machine's in a collective
    with no deadline; the failure sentence it leaves ends the run at once."""
    ctx, job = start_machine_0(project)
    distributed.machine_failure(ctx.run_dir, 1).write_text(
        "Rank 1 of the run was killed by signal 9.", encoding="utf-8"
    )
    job.join()
    assert isinstance(job.error, EngineError)
    assert (
        str(job.error) == "Machine 1 failed: Rank 1 of the run was killed by signal 9."
    )
    assert not any(alive(p) for p in pids_of(ctx.run_dir))


# ------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"num_processes": (os.cpu_count() or 1) + 1}, "num_processes", "CPU cores"),
        ({"strategy": "deepspeed_zero2"}, "strategy", "deepspeed package"),
        ({"strategy": "fsdp"}, "strategy", "needs CUDA GPUs"),
        ({"num_machines": 2}, "main_process_ip", "main_process_ip must give"),
        (
            {"num_processes": 3, "num_machines": 2, "main_process_ip": "10.0.0.1"},
            "num_processes",
            "multiple of num_machines",
        ),
        ({"use_vllm": True}, "use_vllm", "needs a CUDA GPU"),
        (
            {"num_generations": 3, "num_processes": 2},
            "num_generations",
            "x num_processes",
        ),
    ],
)
def test_bad_scale_out_settings_are_one_sentence(
    project: Project, over: dict, field: str, words: str
) -> None:
    import importlib.util

    if over.get("strategy", "").startswith("deepspeed") and importlib.util.find_spec(
        "deepspeed"
    ):
        pytest.skip("deepspeed is installed here")
    with pytest.raises(ConfigError) as err:
        validate_config("llm.train", project.config("grpo", **over))
    assert err.value.field == field and words in str(err.value)
    assert str(err.value).count(". ") == 0


def test_machine_zero_fails_when_no_machine_joins(project: Project) -> None:
    cfg = project.config(
        "sft", num_machines=2, main_process_ip="127.0.0.1", join_timeout_s=8.0
    )
    ctx = project.context(cfg)
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="other machine\\(s\\) did not join"):
        train(ctx)
    assert time.monotonic() - t0 < 8.0 + 60
    assert not any(alive(p) for p in pids_of(ctx.run_dir))
    assert processes_naming(ctx.run_dir) == []


def run_worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "worker", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_worker_with_an_unreachable_main_process_gives_up_in_time(
    project: Project, tmp_path: Path
) -> None:
    cfg = validate_config(
        "llm.train",
        project.config(
            "sft", num_machines=2, main_process_ip="127.0.0.1", join_timeout_s=3.0
        ),
    )
    run_dir = tmp_path / "runs" / "r"
    distributed.write_launch_files(
        run_dir, "r", "llm.train", get_kind("llm.train").load(cfg)
    )
    t0 = time.monotonic()
    done = run_worker(
        "--run-dir",
        str(run_dir),
        "--machine-rank",
        "1",
        "--main-process-ip",
        "127.0.0.1",
    )
    assert done.returncode == 2
    assert "could not be reached within join_timeout_s (3 s)" in done.stderr
    assert time.monotonic() - t0 < 3.0 + 60
    assert not (run_dir / "distributed" / "ranks").exists()  # nothing started


def test_worker_names_the_files_it_needs(tmp_path: Path) -> None:
    done = run_worker(
        "--run-dir",
        str(tmp_path),
        "--machine-rank",
        "1",
        "--main-process-ip",
        "10.0.0.1",
    )
    assert done.returncode == 2
    assert "put it on storage both machines share" in done.stderr
    assert str(tmp_path / "distributed" / "job.json") in done.stderr


def test_worker_gives_up_when_machine_zero_never_takes_its_ranks(
    project: Project, tmp_path: Path
) -> None:
    """Something listens at the main process's address but is no run: the
    worker's launch waits for a rendezvous that never comes, fails within
    join_timeout_s and leaves no process."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        cfg = validate_config(
            "llm.train",
            project.config(
                "sft",
                num_machines=2,
                main_process_ip="127.0.0.1",
                main_process_port=port,
                join_timeout_s=5.0,
            ),
        )
        run_dir = tmp_path / "runs" / "r"
        distributed.write_launch_files(
            run_dir, "r", "llm.train", get_kind("llm.train").load(cfg)
        )
        done = run_worker(
            "--run-dir",
            str(run_dir),
            "--machine-rank",
            "1",
            "--main-process-ip",
            "127.0.0.1",
        )
    assert done.returncode == 2, done.stderr
    assert "did not start within join_timeout_s (5 s)" in done.stderr
    assert processes_naming(run_dir) == []
