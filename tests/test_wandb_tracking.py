"""Weights & Biases beside MLflow (``engine.jobs.wandb_tracking``): a real
run logged offline (``WANDB_MODE=offline``, no network) under the names
MLflow gets, and one sentence when wandb is not installed."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import contract, protocol
from engine.jobs import wandb_tracking
from engine.jobs.supervisor import Supervisor
from engine.jobs.tracking import metric_key
from engine.store.metrics import iter_metrics

DEADLINE_S = 120.0


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B on, offline; the job processes inherit the variables."""
    pytest.importorskip("wandb")
    monkeypatch.setenv(wandb_tracking.PROJECT_ENV, "rl-studio-test")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv(contract.TRACKING_URI_ENV, raising=False)


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[tuple[Supervisor, threading.Event]]:
    done = threading.Event()

    def emit(msg: protocol.Message) -> None:
        if isinstance(msg, protocol.RunFinished | protocol.RunFailed):
            done.set()

    sup = Supervisor(emit)
    sup.open_project(str(tmp_path / "p"), create=True, with_examples=False)
    try:
        yield sup, done
    finally:
        sup.shutdown(5)


def test_a_run_is_logged_offline_under_mlflows_names(
    offline: None, supervisor: tuple[Supervisor, threading.Event]
) -> None:
    sup, done = supervisor
    run_id = sup.start_run("selftest", {"steps": 20, "step_seconds": 0}, "wb")
    assert done.wait(DEADLINE_S), "the run never ended"
    run = sup.require_project().get_run(run_id)
    assert run.status == "completed", run.reason
    run_dir = Path(run.run_dir)
    (logged,) = run_dir.glob(f"wandb/offline-run-*/run-{run_id}.wandb")
    data = logged.read_bytes()
    names = {
        metric_key(k)
        for row in iter_metrics(run_dir / contract.METRICS_FILE)
        for k in row
        if k not in ("step", "time")
    }
    assert names == {"selftest/value", "selftest/steps_done"}
    # The offline run's records (protobuf) hold each metric's name, the
    # config's settings and the final status.
    for text in (*names, "step_seconds", "completed"):
        assert text.encode() in data, text
    log = (run_dir / contract.LOG_FILE).read_text()
    assert "Weights & Biases" not in log  # nothing went wrong


def test_a_missing_wandb_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "wandb" else real(name, *a),
    )
    said: list[str] = []

    class Ctx:
        def log(self, text: str) -> None:
            said.append(text)

    ctx: Any = Ctx()
    monkeypatch.delenv(wandb_tracking.PROJECT_ENV, raising=False)
    assert wandb_tracking.start(ctx) is None and said == []  # off: silent
    monkeypatch.setenv(wandb_tracking.PROJECT_ENV, "p")
    assert wandb_tracking.start(ctx) is None
    assert said == [
        "WANDB_PROJECT is set but wandb is not installed; install "
        "rl-studio[wandb] to log runs to Weights & Biases."
    ]
