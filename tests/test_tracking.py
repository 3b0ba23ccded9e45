"""Tracking: language-model runs write TensorBoard events; with a tracking URI
every run logs to a real local MLflow server (started here, on 127.0.0.1):
params and metrics with their steps, the same MLflow run after a resume, the
model registry for a run that reached its target; an unreachable server
costs one warning and loses no metric; a malformed URI is one sentence."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine import cli, contract
from engine.errors import ConfigError
from engine.jobs import tracking
from engine.jobs.lifecycle import HeadlessContext, run_in_process
from engine.jobs.registry import run_name
from engine.store.metrics import read_metrics
from engine.store.project import Project

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TINY_PPO = {
    "env": "CartPole-v1",
    "algo": "PPO",
    "seed": 3,
    "n_envs": 2,
    "eval_every_steps": 256,
    "eval_episodes": 2,
    "checkpoint_every_steps": 256,
    "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", autouse=True)
def mlflow_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A real MLflow server on a free port, started with the module's first
    test (it takes 10-40 s to start on a busy box; the tests that do not
    need it run meanwhile) and stopped after its last."""
    root = tmp_path_factory.mktemp("mlflow")
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent))
    assert mlflow is not None, "mlflow is in the dev extras"
    port = free_port()
    proc = subprocess.Popen(
        [
            mlflow,
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--default-artifact-root",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "server.log", "wb"),  # noqa: SIM115 - the child has it
        start_new_session=True,
        # the server's background job runner is not needed and slow to start
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    yield f"http://127.0.0.1:{port}", proc, root
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def mlflow_uri(mlflow_server: tuple[str, subprocess.Popen[bytes], Path]) -> str:
    """The server's URI, once its /health answers."""
    uri, proc, root = mlflow_server
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        assert proc.poll() is None, (root / "server.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "mlflow server did not start in 120 s"
        time.sleep(0.2)
    return uri


def client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def mlflow_run_id(run_dir: Path) -> str:
    return str(json.loads((run_dir / contract.MLFLOW_RUN_FILE).read_text())["run_id"])


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    rows = client(uri).get_metric_history(run_id, key)
    return sorted((int(m.step), float(m.value)) for m in rows)


def jsonl_history(run_dir: Path, key: str) -> list[tuple[int, float]]:
    rows = read_metrics(run_dir / contract.METRICS_FILE)
    return sorted((int(r["step"]), float(r[key])) for r in rows if key in r)


def train(
    project_dir: Path,
    config: dict[str, Any],
    uri: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    stop_at: int | None = None,
) -> tuple[str, Path, Any]:
    """A headless rl.train run in this process, tracked at ``uri``; with
    ``stop_at`` it is stopped (as by Stop) once a metric row reaches that
    step."""
    from engine.rl import train as rl_train
    from engine.rl.config import validate

    monkeypatch.setenv(contract.TRACKING_URI_ENV, uri)
    project = Project.open(project_dir, create=True)
    try:
        config = validate({**config, "project_dir": str(project_dir)})
        record = project.create_run(
            "rl.train", config, name=run_name("rl.train", config)
        )
        run_dir = Path(record.run_dir)
        ctx = HeadlessContext(record.id, run_dir, "rl.train", config, project=project)
        ctx.say = lambda _text: None  # type: ignore[method-assign]

        def entry(ctx: Any) -> dict[str, Any]:
            if stop_at is not None:
                metrics = ctx.metrics

                def stopping(step: int, values: Any) -> None:
                    metrics(step, values)
                    if step >= stop_at:
                        ctx.request_stop()

                ctx.metrics = stopping
            return rl_train.run(ctx)

        outcome = run_in_process(project, record.id, ctx, entry)
    finally:
        project.close()
    assert outcome.error is None, outcome.reason
    return record.id, run_dir, outcome


# ------------------------------------------------------------------ pure
@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("htp://127.0.0.1:5000", "MLflow has no 'htp' store"),
        ("http://", "it names no host"),
        ("http://127.0.0.1:99999", "its host or port is not valid"),
        ("http://my server:5000", "holds spaces"),
        ("   ", "it is empty"),
    ],
)
def test_a_malformed_uri_is_one_sentence(uri: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        tracking.check_uri(uri)
    assert info.value.field == "mlflow_uri"
    message = str(info.value)
    assert words in message and message.count(". ") == 0 and message[-1] == "."


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "file:///tmp/mlruns",
        "sqlite:///tmp/m.db",
        "postgresql+psycopg2://u@h/db",
        "mlruns",
        "/tmp/mlruns",
    ],
)
def test_uris_mlflow_takes(uri: str) -> None:
    assert tracking.check_uri(f" {uri} ") == uri


def test_the_cli_refuses_a_malformed_uri_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "train",
            "--mlflow-uri",
            "htp://x",
            "--env",
            "CartPole-v1",
            "--project",
            str(tmp_path / "p"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("rl-studio-engine train: The MLflow tracking URI")
    assert not (tmp_path / "p").exists()


def test_a_malformed_uri_in_the_environment_fails_the_run_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.TRACKING_URI_ENV, "htp://x")
    ctx = SimpleNamespace(log=print)
    with pytest.raises(ConfigError, match="MLflow has no 'htp' store"):
        tracking.start(ctx)


def test_the_studio_setting_reaches_the_engine_environment(tmp_path: Path) -> None:
    from PySide6.QtCore import QSettings

    from studio.settings import Settings

    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.mlflow_uri == ""
    assert contract.TRACKING_URI_ENV not in settings.engine_environment()
    settings.mlflow_uri = " http://127.0.0.1:5000 "
    env = Settings(settings._s).engine_environment()
    assert env[contract.TRACKING_URI_ENV] == "http://127.0.0.1:5000"


def test_without_a_uri_nothing_imports_mlflow(tmp_path: Path) -> None:
    """A run with no tracking URI: no tracker, no MLflow file, no mlflow
    module (checked in a fresh interpreter, as the suite has it loaded)."""
    code = f"""
import os, sys
from pathlib import Path
os.environ.pop({contract.TRACKING_URI_ENV!r}, None)
from engine.jobs.context import JobContext
from engine.jobs.lifecycle import execute
run_dir = Path({str(tmp_path)!r}) / "runs" / "r1"
run_dir.mkdir(parents=True)
ctx = JobContext("r1", run_dir, "selftest", {{}})
def entry(ctx):
    ctx.metrics(1, {{"a/b": 1.0}})
    return {{}}
outcome = execute(ctx, entry)
assert outcome.status == "completed", outcome
assert not (run_dir / "mlflow_run.json").exists()
assert "mlflow" not in sys.modules
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_flatten_and_target() -> None:
    flat = tracking.flatten(
        {
            "algo": "PPO",
            "hyperparameters": {"gamma": 0.99, "net_arch": [64, 64]},
            "target_eval_reward": None,
            "env_kwargs": {},
        }
    )
    assert flat == {
        "algo": "PPO",
        "hyperparameters.gamma": "0.99",
        "hyperparameters.net_arch": "[64,64]",
        "target_eval_reward": "null",
        "env_kwargs": "{}",
    }
    assert tracking.reached_target({}, {"stopped_by": "target"})
    assert tracking.reached_target({"target_eval_reward": 5}, {"best_eval_reward": 5})
    assert not tracking.reached_target(
        {"target_eval_reward": 5}, {"best_eval_reward": 4}
    )
    assert not tracking.reached_target({}, {"best_eval_reward": 4})


# --------------------------------------------------------------- MLflow
def test_an_sb3_run_is_in_mlflow_and_a_resumed_run_continues_it(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_dir = tmp_path / "proj"
    config = {**TINY_PPO, "total_steps": 1024, "name": "tracked"}
    run_id, run_dir, outcome = train(
        project_dir, config, mlflow_uri, monkeypatch, stop_at=512
    )
    assert outcome.status == "stopped"
    first = mlflow_run_id(run_dir)
    mlflow = client(mlflow_uri)
    run = mlflow.get_run(first)
    assert run.info.status == "KILLED"
    assert run.data.tags["rlstudio.run_id"] == run_id
    assert run.data.tags["rlstudio.kind"] == "rl.train"
    assert run.info.run_name == "tracked"
    params = run.data.params
    assert params["env"] == "CartPole-v1" and params["algo"] == "PPO"
    assert params["hyperparameters.n_steps"] == "64"
    assert params["total_steps"] == "1024" and params["seed"] == "3"
    for key in ("eval/mean_reward", "rollout/ep_rew_mean", "train/loss"):
        assert history(mlflow_uri, first, key) == jsonl_history(run_dir, key), key
    stopped_steps = max(s for s, _ in jsonl_history(run_dir, "eval/mean_reward"))

    # resumed through the CLI: the same MLflow run goes on
    code = cli.main(
        [
            "train",
            "--mlflow-uri",
            mlflow_uri,
            "--project",
            str(project_dir),
            "--resume",
            run_id,
            "--quiet",
        ]
    )
    assert code == 0
    assert mlflow_run_id(run_dir) == first
    run = mlflow.get_run(first)
    assert run.info.status == "FINISHED"
    evals = history(mlflow_uri, first, "eval/mean_reward")
    assert evals == jsonl_history(run_dir, "eval/mean_reward")
    assert max(s for s, _ in evals) > stopped_steps
    artifacts = {a.path for a in mlflow.list_artifacts(first)}
    assert {"config.json", "result.json", "reproduce.json", "models"} <= artifacts
    (models,) = mlflow.list_artifacts(first, "models")
    assert {Path(a.path).name for a in mlflow.list_artifacts(first, models.path)} == {
        "model.zip"
    }
    # no target: nothing registered
    assert not mlflow.search_model_versions(f"run_id='{first}'")


def test_a_runs_evaluation_videos_are_its_artifacts(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {**TINY_PPO, "total_steps": 256, "eval_video_episodes": 1}
    _, run_dir, outcome = train(tmp_path / "proj", config, mlflow_uri, monkeypatch)
    assert outcome.status == "completed"
    videos = sorted(p.name for p in (run_dir / contract.VIDEOS_FOLDER).iterdir())
    assert videos and all(v.endswith(".mp4") for v in videos)
    logged = client(mlflow_uri).list_artifacts(mlflow_run_id(run_dir), "videos")
    assert sorted(Path(a.path).name for a in logged) == videos


def test_a_run_resumed_after_a_crash_sends_no_step_twice(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the checkpoint at step 256 but after metrics up to 512
    reached MLflow: the resumed run trains 257-512 again; MLflow keeps the
    first attempt's points there (it cannot delete any) and gets each later
    step once, as metrics.jsonl has it."""
    from engine.rl.train import CHECKPOINT_PREFIX

    project_dir = tmp_path / "proj"
    config = {**TINY_PPO, "total_steps": 1024, "name": "crashed"}
    run_id, run_dir, _ = train(
        project_dir, config, mlflow_uri, monkeypatch, stop_at=512
    )
    first = mlflow_run_id(run_dir)
    before = {
        k: history(mlflow_uri, first, k) for k in ("eval/mean_reward", "train/loss")
    }
    sent = max(s for s, _ in before["train/loss"])
    assert sent >= 512
    # The crash: the checkpoints after 256 never happened.
    checkpoints = sorted((run_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}*"))
    assert len(checkpoints) >= 2
    for later in checkpoints[1:]:
        shutil.rmtree(later)
    resume = ["--resume", run_id, "--quiet"]
    code = cli.main(
        ["train", "--mlflow-uri", mlflow_uri, "--project", str(project_dir), *resume]
    )
    assert code == 0
    for key, old in before.items():
        points = history(mlflow_uri, first, key)
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{key}: a step sent twice"
        assert [p for p in points if p[0] <= sent] == old, key
        later = [p for p in jsonl_history(run_dir, key) if p[0] > sent]
        assert later and [p for p in points if p[0] > sent] == later, key


def test_a_run_that_reaches_its_target_is_registered_with_its_lineage(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {
        **TINY_PPO,
        "total_steps": 2048,
        "target_eval_reward": 5.0,
        "name": "on-target",
    }
    run_id, run_dir, outcome = train(tmp_path / "proj", config, mlflow_uri, monkeypatch)
    assert outcome.summary["stopped_by"] == "target"
    first = mlflow_run_id(run_dir)
    (version,) = client(mlflow_uri).search_model_versions(f"run_id='{first}'")
    assert version.name == "on-target"
    assert version.tags["rlstudio.run_id"] == run_id
    assert version.tags["rlstudio.env"] == "CartPole-v1"
    assert version.tags["rlstudio.algo"] == "PPO"
    assert version.tags["rlstudio.file"].endswith("model.zip")
    assert float(version.tags["rlstudio.metric.eval/mean_reward"]) >= 5.0


def test_an_unreachable_server_costs_one_warning_and_no_metric(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setattr(tracking, "RETRY_S", 0.5)  # retried while it runs
    config = {**TINY_PPO, "total_steps": 768}
    _, run_dir, outcome = train(tmp_path / "proj", config, away, monkeypatch)
    assert outcome.status == "completed"  # the run went on
    log = (run_dir / contract.LOG_FILE).read_text()
    assert log.count("does not answer") == 1, log
    assert f"MLflow at {away} does not answer" in log
    spool = run_dir / contract.MLFLOW_SPOOL_FILE
    ops = [json.loads(line) for line in spool.read_text().splitlines()]
    assert ops[0]["op"] == "params" and ops[-1]["op"] == "finish"
    spooled = sorted(
        (r["step"], r["eval/mean_reward"])
        for op in ops
        if op["op"] == "metrics"
        for r in op["rows"]
        if "eval/mean_reward" in r
    )
    assert spooled == jsonl_history(run_dir, "eval/mean_reward")
    assert not (run_dir / contract.MLFLOW_RUN_FILE).exists()

    # the server answers: the spool is replayed in order, then gone
    assert tracking.replay(run_dir, mlflow_uri)
    assert not spool.exists()
    replayed = mlflow_run_id(run_dir)
    run = client(mlflow_uri).get_run(replayed)
    assert run.info.status == "FINISHED" and run.data.params["total_steps"] == "768"
    for key in ("eval/mean_reward", "train/loss"):
        assert history(mlflow_uri, replayed, key) == jsonl_history(run_dir, key)


# ------------------------------------------------------- language models
_LIBRARY_STORE_RUN = """
import json, sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from engine.jobs.context import JobContext
from engine.jobs.lifecycle import execute

uri, run_dir = sys.argv[1], Path(sys.argv[2])
run_dir.mkdir(parents=True)
ctx = JobContext("r1", run_dir, "selftest", {"steps": 2, "note": {"a": 1}})


def entry(ctx):
    ctx.metrics(1, {"x/y": 0.5})
    ctx.metrics(2, {"x/y": 0.25})
    return {}


status = execute(ctx, entry).status
from engine import contract
run_id = json.loads((run_dir / contract.MLFLOW_RUN_FILE).read_text())["run_id"]
mlflow = MlflowClient(tracking_uri=uri, registry_uri=uri)
run = mlflow.get_run(run_id)
history = sorted(
    (int(m.step), float(m.value)) for m in mlflow.get_metric_history(run_id, "x/y")
)
print(json.dumps({
    "job": status,
    "status": run.info.status,
    "params": run.data.params,
    "history": history,
    "kind": run.data.tags.get("rlstudio.kind"),
}))
"""


def test_a_store_other_than_a_server_goes_through_mlflows_client(
    mlflow_server: tuple[str, subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    """A database URI (a copy of the server's, its tables made already): the
    same run, through mlflow's own client; any job kind (here a function
    logging two rows) is tracked alike. It runs in a child process, as jobs
    do: mlflow's database client (SQLAlchemy, its own threads) stays out of
    the test process, which holds Qt."""
    import sqlite3

    # A copy, not the server's own file: two writers on one SQLite file wait
    # on each other's locks, and under load mlflow's client gives up.
    db = tmp_path / "mlflow.db"
    source, copy = sqlite3.connect(mlflow_server[2] / "mlflow.db"), sqlite3.connect(db)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    uri = f"sqlite:///{db}"
    env = {**os.environ, contract.TRACKING_URI_ENV: uri, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY_STORE_RUN, uri, str(tmp_path / "runs" / "r1")],
        cwd=tmp_path,  # mlflow's client puts a new experiment's artifacts in ./mlruns
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["job"] == "completed" and seen["status"] == "FINISHED"
    assert seen["params"] == {"steps": "2", "note.a": "1"}
    assert seen["history"] == [[1, 0.5], [2, 0.25]]
    assert seen["kind"] == "selftest"


def test_a_language_model_run_writes_tensorboard_events_and_is_tracked(
    mlflow_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``llm.train`` run through the lifecycle: TensorBoard events beside
    metrics.jsonl, and the same MLflow tracking as an SB3 run (one hook for
    every job kind): params, metrics, the adapter as artifacts."""
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )
    from tiny_models import build_tiny_model

    from engine.jobs.context import JobContext
    from engine.jobs.lifecycle import execute
    from engine.jobs.registry import get_kind, validate_config

    model = build_tiny_model(tmp_path / "base")
    data = tmp_path / "data" / "sft"
    data.mkdir(parents=True)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Move PROJ-{i} to Done."}],
            "completion": [{"role": "assistant", "content": "transition_issue"}],
        }
        for i in range(4)
    ]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = validate_config(
        "llm.train",
        {
            "method": "sft",
            "model": str(model),
            "dataset": str(data),
            "max_steps": 2,
            "batch_size": 2,
            "max_length": 64,
            "lora_rank": 4,
            "save_steps": 0,
            "seed": 0,
            "precision": "fp32",
            "device": "cpu",
            "gradient_checkpointing": False,
            "name": "tb-adapter",
        },
    )
    run_dir = tmp_path / "runs" / "llm-1"
    run_dir.mkdir(parents=True)
    monkeypatch.setenv(contract.TRACKING_URI_ENV, mlflow_uri)
    ctx = JobContext("llm-1", run_dir, "llm.train", cfg)
    outcome = execute(ctx, get_kind("llm.train").entry)
    assert outcome.status == "completed", outcome.reason
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("train/loss")]
    loss_rows = jsonl_history(run_dir, "train/loss")
    assert [step for step, _ in loss] == [s for s, _ in loss_rows]
    assert loss and all(v > 0 for _, v in loss)
    assert "train/learning_rate" in events.Tags()["scalars"]

    run_id = mlflow_run_id(run_dir)
    mlflow = client(mlflow_uri)
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["rlstudio.kind"] == "llm.train"
    assert run.data.params["method"] == "sft" and run.data.params["lora_rank"] == "4"
    assert history(mlflow_uri, run_id, "train/loss") == loss_rows
    (adapter,) = mlflow.list_artifacts(run_id, "models")
    files = {Path(a.path).name for a in mlflow.list_artifacts(run_id, adapter.path)}
    assert "adapter_config.json" in files
