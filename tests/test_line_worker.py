"""The JSON Lines worker client shared by the chat and act workers: answers,
error sentences, a worker that dies, hangs, talks garbage or sits idle."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from engine.errors import ConfigError, EngineError
from engine.line_worker import LineWorker

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def make_worker(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    made: list[LineWorker] = []

    def make(**kwargs) -> LineWorker:
        options = {"label": "test worker", "timeout_s": 60.0, **kwargs}
        worker = LineWorker("line_worker_echo", [], **options)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.close()


def test_answers_come_back_and_the_worker_is_kept(make_worker) -> None:
    worker = make_worker()
    first = worker.request({"op": "echo", "value": [1, 2]})
    second = worker.request({"op": "echo", "value": "x"})
    assert first["echo"] == [1, 2] and second["echo"] == "x"
    assert first["pid"] == second["pid"] == worker.pid


def test_errors_are_sentences_and_keep_the_worker(make_worker) -> None:
    worker = make_worker()
    pid = worker.request({"op": "echo"})["pid"]
    with pytest.raises(ConfigError) as named:
        worker.request({"op": "field"})
    assert named.value.field == "value"
    assert str(named.value) == "value must be positive."
    with pytest.raises(EngineError, match=r"^The thing is missing\.$"):
        worker.request({"op": "sentence"})
    with pytest.raises(EngineError, match=r"^The test worker failed: unknown op 'x'$"):
        worker.request({"op": "x"})
    with pytest.raises(EngineError, match="The test worker failed: 'op'"):
        worker.request({})
    assert worker.pid == pid


def test_a_worker_that_dies_costs_one_request(make_worker) -> None:
    worker = make_worker(lost_hint="out of memory?")
    pid = worker.request({"op": "echo"})["pid"]
    with pytest.raises(EngineError) as lost:
        worker.request({"op": "die"})
    assert str(lost.value) == (
        "The test worker stopped with exit code 7 (out of memory?); the next "
        "request starts a new one."
    )
    assert worker.request({"op": "echo"})["pid"] != pid


def test_a_request_past_its_deadline_kills_the_worker(make_worker) -> None:
    worker = make_worker(timeout_s=1.0)
    pid = worker.request({"op": "echo"})["pid"]
    with pytest.raises(EngineError, match="took longer than 1 s and was stopped"):
        worker.request({"op": "sleep", "s": 120})
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert worker.request({"op": "echo"})["pid"] != pid


def test_an_unreadable_answer_is_one_sentence(make_worker) -> None:
    worker = make_worker()
    with pytest.raises(EngineError, match=r"^The test worker sent an unreadable"):
        worker.request({"op": "garbage"})


def test_an_idle_worker_is_closed_and_comes_back_on_demand(make_worker) -> None:
    worker = make_worker(idle_s=0.5)
    pid = worker.request({"op": "echo"})["pid"]
    process = psutil.Process(pid)
    process.wait(timeout=30)  # closed by the idle timer, not killed by us
    assert worker.pid is None
    assert worker.request({"op": "echo"})["pid"] != pid


def test_close_ends_the_worker(make_worker) -> None:
    worker = make_worker()
    pid = worker.request({"op": "echo"})["pid"]
    worker.close()  # reaps it: the worker ended when its input did
    assert not psutil.pid_exists(pid)
    worker.close()  # twice is harmless
