"""Alerts reach webhooks without ever holding up what they tell of
(``engine.alerts``): a run's end told by the supervisor, a webhook answering
500 retried then given up in one log sentence, a webhook that hangs while
the run ends anyway, promotions and rollbacks told by the service.

The webhooks are a real HTTP server in a thread of the test process (where
the supervisor runs); the runs are real job processes (the self-test)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine import alerts, protocol
from engine.errors import ConfigError
from engine.jobs.supervisor import Supervisor
from engine.store.decisions import DecisionLog
from engine.store.project import Project
from engine.store.promotion import Promotion

DEADLINE_S = 60.0


@dataclass
class Hook:
    """A webhook: what it received, and how it answers."""

    url: str = ""
    status: int = 200
    release: threading.Event | None = None
    """When set: each request waits for it before answering (a hang)."""
    received: list[dict[str, Any]] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(
        self, what: str, check: Callable[[list[dict[str, Any]]], bool]
    ) -> None:
        with self.arrived:
            ok = self.arrived.wait_for(lambda: check(self.received), DEADLINE_S)
        assert ok, f"the webhook never received {what}: {self.received}"


@pytest.fixture
def hook() -> Iterator[Hook]:
    found = Hook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with found.arrived:
                found.received.append(json.loads(body))
                found.arrived.notify_all()
            if found.release is not None:
                found.release.wait(DEADLINE_S)
            self.send_response(found.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hook/secret-path"
    try:
        yield found
    finally:
        if found.release is not None:
            found.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def quick_sender(monkeypatch: pytest.MonkeyPatch) -> alerts.Sender:
    """The process's sender with short pauses (and no environment's hooks)."""
    monkeypatch.delenv(alerts.WEBHOOKS_ENV, raising=False)
    monkeypatch.setattr(alerts.SENDER, "backoff_s", 0.01)
    monkeypatch.setattr(alerts.SENDER, "timeout_s", DEADLINE_S)
    return alerts.SENDER


class Events:
    """The supervisor's events, waited for as they come."""

    def __init__(self) -> None:
        self.seen: list[protocol.Message] = []
        self.came = threading.Condition()

    def emit(self, msg: protocol.Message) -> None:
        with self.came:
            self.seen.append(msg)
            self.came.notify_all()

    def ended(self, run_id: str) -> protocol.Message:
        """The run's end event."""

        def end() -> protocol.Message | None:
            return next(
                (
                    m
                    for m in self.seen
                    if isinstance(m, protocol.RunFinished | protocol.RunFailed)
                    and m.run_id == run_id
                ),
                None,
            )

        with self.came:
            found = self.came.wait_for(end, DEADLINE_S)
        assert found is not None, f"run {run_id} never ended"
        return found


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[Supervisor, Events]]:
    events = Events()
    supervisor = Supervisor(events.emit)
    supervisor.open_project(str(tmp_path / "p"), create=True, with_examples=False)
    try:
        yield supervisor, events
    finally:
        supervisor.shutdown(5)


def test_a_completed_and_a_failed_run_each_post_one_message(
    hook: Hook, quick_sender: alerts.Sender, supervised: Any
) -> None:
    supervisor, seen = supervised
    supervisor.project.set_setting(alerts.SETTING_KEY, {"webhooks": [hook.url]})
    done = supervisor.start_run("selftest", {"steps": 3, "step_seconds": 0}, "good")
    bad = supervisor.start_run(
        "selftest", {"steps": 9, "step_seconds": 0, "fail_at_step": 2}, "broken"
    )
    seen.ended(done), seen.ended(bad)
    assert quick_sender.wait_idle(DEADLINE_S)
    by_run = {m["fields"]["run_id"]: m for m in hook.received}
    assert len(hook.received) == 2 and set(by_run) == {done, bad}
    good, failed = by_run[done], by_run[bad]
    assert good["event"] == "run.completed" and good["fields"]["run_name"] == "good"
    assert good["text"] == f"Run good ({done}) completed."
    assert failed["event"] == "run.failed" and failed["fields"]["status"] == "failed"
    assert "broken" in failed["text"] and "step 2" in failed["text"]
    # Slack shows the facts as an attachment's fields.
    shown = {f["title"]: f["value"] for f in failed["attachments"][0]["fields"]}
    assert shown["run_id"] == bad and failed["attachments"][0]["color"] == "danger"


def test_a_webhook_answering_500_is_retried_then_given_up_in_one_sentence(
    hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    hook.status = 500
    sender = alerts.Sender(tries=3, timeout_s=DEADLINE_S, backoff_s=0.01)
    alert = alerts.run_ended("r-1", "one", "selftest", "failed", "It broke.")
    assert alert is not None
    with caplog.at_level(logging.WARNING, logger="engine.alerts"):
        sender.post([hook.url], alert)
        assert sender.wait_idle(DEADLINE_S)
    assert len(hook.received) == 3
    (record,) = caplog.records
    assert record.getMessage() == (
        f"The webhook at {hook.url.split('/')[2]} did not take the run.failed "
        "alert after 3 tries (HTTP 500)."
    )
    assert "secret-path" not in record.getMessage()


def test_a_webhook_that_hangs_does_not_delay_the_run(
    hook: Hook, quick_sender: alerts.Sender, supervised: Any
) -> None:
    hook.release = threading.Event()
    supervisor, seen = supervised
    supervisor.project.set_setting(alerts.SETTING_KEY, {"webhooks": [hook.url]})
    run_id = supervisor.start_run("selftest", {"steps": 3, "step_seconds": 0})
    end = seen.ended(run_id)
    assert isinstance(end, protocol.RunFinished) and end.status == "completed"
    assert supervisor.project.get_run(run_id).status == "completed"
    # The run ended while the hook holds its request: released only now.
    hook.wait_for("the run's alert", lambda got: len(got) == 1)
    assert not hook.release.is_set() and not quick_sender.wait_idle(0)
    hook.release.set()
    assert quick_sender.wait_idle(DEADLINE_S)
    assert hook.received[0]["fields"]["run_id"] == run_id


def test_promotion_and_rollback_are_told(
    hook: Hook, quick_sender: alerts.Sender, tmp_path: Path
) -> None:
    project = Project.open(tmp_path / "p", create=True)
    log = DecisionLog(project.path)
    try:
        project.set_setting(alerts.SETTING_KEY, {"webhooks": [hook.url]})
        for score in (10.0, 20.0):
            weights = tmp_path / f"m{score}.zip"
            weights.write_bytes(b"weights")
            model = project.register_model(
                name=f"m{score}",
                kind="sb3-policy",
                files=[weights],
                metrics={"eval/mean_reward": score},
            )
            project.add_version("support", model.id)
        promotion = Promotion(project, log)
        assert promotion.state("support").current == 2
        promotion.rollback("support", "ops", "v2 answers badly")
        assert quick_sender.wait_idle(DEADLINE_S)
    finally:
        log.close()
        project.close()
    told = [(m["event"], m["fields"]["version"]) for m in hook.received]
    assert told == [
        ("version.promoted", "v1"),
        ("version.promoted", "v2"),
        ("version.rolled_back", "v2"),
    ]
    assert hook.received[2]["text"] == (
        "Agent support: v2 rolled back to v1 by ops: v2 answers badly."
    )


def test_webhook_urls_are_checked_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match=r"^webhooks: 'ftp://x' is not an http"):
        alerts.check_urls(["https://hooks.example/a", "ftp://x"])
    monkeypatch.setenv(alerts.WEBHOOKS_ENV, "http://a.example/1, http://b.example/2")
    stored = {"webhooks": ["http://b.example/2", "https://c.example/3"]}
    assert alerts.webhook_urls(stored) == [
        "http://b.example/2",
        "https://c.example/3",
        "http://a.example/1",
    ]
    # A stopped run is the user's doing: not told.
    assert alerts.run_ended("r-1", "one", "selftest", "stopped") is None


def test_a_fallback_is_told_at_most_once_a_minute(
    hook: Hook, quick_sender: alerts.Sender, tmp_path: Path
) -> None:
    """An agent whose only version lost its folder: every ``act`` fails down
    the chain; the first failure alerts, the next ones are counted."""
    import shutil

    from engine.service.agents import ActFailed, Agents

    project = Project.open(tmp_path / "p", create=True)
    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    model = project.register_model(name="llm", kind="hf", files=[folder])
    project.add_version("helper", model.id)
    shutil.rmtree(model.path)
    project.set_setting(alerts.SETTING_KEY, {"webhooks": [hook.url]})
    agents = Agents(project)
    try:
        for _ in range(3):
            with pytest.raises(ActFailed, match="does not exist"):
                agents.act("helper", messages=[{"role": "user", "content": "hi"}])
        assert quick_sender.wait_idle(DEADLINE_S)
    finally:
        agents.close()
        project.close()
    # The gate promoted v1 when act first looked (told too).
    assert [m["event"] for m in hook.received] == ["version.promoted", "fallback.used"]
    told = hook.received[1]
    assert told["fields"]["agent"] == "helper"
    assert told["text"].startswith("Agent helper answered with nothing: v1 failed")


def test_the_projects_webhooks_are_set_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from engine.service.app import create_app
    from engine.service.state import Service

    monkeypatch.setenv(alerts.WEBHOOKS_ENV, "http://env.example/hook")
    service = Service(str(tmp_path / "p"))
    try:
        client = TestClient(create_app(service, None))
        put = client.put("/alerts", json={"webhooks": ["https://h.example/x"]})
        assert put.status_code == 200
        assert put.json()["webhooks"] == ["https://h.example/x"]
        assert put.json()["from_environment"] == 1
        assert alerts.webhook_urls(service.project.setting(alerts.SETTING_KEY)) == [
            "https://h.example/x",
            "http://env.example/hook",
        ]
        bad = client.put("/alerts", json={"webhooks": ["ftp://x"]})
        assert bad.status_code == 422
        assert bad.json()["error"] == (
            "webhooks: 'ftp://x' is not an http:// or https:// URL."
        )
    finally:
        service.close()
