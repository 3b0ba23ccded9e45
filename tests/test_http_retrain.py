"""Readiness and automatic retraining over the real ``serve-http`` server:
trajectories ingested until readiness flips, the trigger then runs the
project's training flow (its model becomes the agent's next version), the
``--retrain-every`` schedule does the same by itself, and each bad input's
one-sentence error."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_http_service import REPO, Served, one_sentence, serve, wait_until

from engine.client_http import ApiError, StudioClient
from engine.retrain_status import recorded_schedule
from engine.store.project import Project


def node(node_id: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"id": node_id, "type": kind, "position": {"x": 0, "y": 0}, "params": params}


def link(a: str, out: str, b: str, into: str) -> dict[str, Any]:
    return {"from": {"node": a, "port": out}, "to": {"node": b, "port": into}}


TRAIN_FLOW = {
    "format": 1,
    "kind": "flow",
    "name": "retrain_pole",
    "nodes": [
        node("env", "env.environment", {"env": "CartPole-v1", "check": False}),
        node(
            "train",
            "rl.train",
            {
                "algo": "PPO",
                "total_steps": 128,
                "seed": 0,
                "n_envs": 1,
                "eval_every_steps": 0,
                "checkpoint_every_steps": 0,
                "n_steps": 128,
                "batch_size": 64,
            },
        ),
        node("evaluate", "rl.evaluate", {"episodes": 2, "seed": 0}),
        node("register", "models.register", {"name": "pole"}),
    ],
    "links": [
        link("env", "env", "train", "env"),
        link("train", "policy", "evaluate", "policy"),
        link("train", "policy", "register", "policy"),
        link("evaluate", "report", "register", "report"),
    ],
}
CHEAP_FLOW = {
    "format": 1,
    "kind": "flow",
    "name": "cheap",
    "nodes": [node("env", "env.environment", {"env": "CartPole-v1", "check": False})],
    "links": [],
}


def write_flow(project: Path, doc: dict[str, Any]) -> None:
    (project / "flows" / f"{doc['name']}.flow.json").write_text(json.dumps(doc))


def record(client: StudioClient, scenario: str, agent: str = "pole") -> None:
    tid = client.start_trajectory(agent, scenario=scenario)
    client.add_step(tid, state={"x": 1}, action=0, reward=1.0)
    client.end_trajectory(tid, "completed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("retrain")
    served = serve(root / "project", root / "server.log")
    write_flow(root / "project", TRAIN_FLOW)
    yield served
    served.stop_cleanly()


@pytest.fixture
def client(server: Served) -> StudioClient:
    return server.client()


def refused(call: Any, status: int, words: str) -> str:
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.status == status, err.value
    assert words in str(err.value), err.value
    assert one_sentence(str(err.value)), err.value
    return str(err.value)


@pytest.mark.slow
def test_readiness_flips_and_the_trigger_trains(client: StudioClient) -> None:
    status = client.request("GET", "/training/status")
    assert not status["readiness"]["ready"]
    assert "No training flow is set" in status["readiness"]["reason"]
    refused(lambda: client.request("POST", "/training/trigger"), 422, "flow")

    client.request(
        "PUT",
        "/training/settings",
        {
            "flow": "retrain_pole",
            "agent": "pole",
            "min_trajectories": 3,
            "min_scenario_groups": 2,
            "min_hours_between": 0,
            "batch_param": "train.total_steps",
        },
    )
    trigger = lambda: client.request("POST", "/training/trigger", {})  # noqa: E731
    refused(trigger, 409, "Not ready to train: 0 of 3 trajectories recorded.")
    for _ in range(3):
        record(client, "RLHUB-1")
    refused(trigger, 409, "1 of 2 scenario groups recorded.")
    record(client, "RLHUB-2")
    record(client, "other", agent="someone-else")  # not pole's: not counted
    readiness = client.request("GET", "/training/status")["readiness"]
    assert readiness["ready"] and readiness["reason"] == "Ready to train!"
    stats = readiness["stats"]
    assert (stats["totalTrajectories"], stats["scenarioGroups"]) == (4, 2)

    started = client.request("POST", "/training/trigger", {"batchSize": 256})
    job = started["job_id"]
    assert not started["forced"]
    status = client.request("GET", "/training/status")
    assert status["currentJob"]["job_id"] == job
    assert status["currentJob"]["trigger"] == "api"
    refused(trigger, 409, f"The training run {job} the trigger started is still")
    config = client.run(job)["config"]
    assert config["overrides"] == {"train.total_steps": 256}
    assert (config["agent"], config["only_stale"]) == ("pole", False)
    assert client.wait(job, timeout=240)["status"] == "completed"

    status = client.request("GET", "/training/status")
    assert status["currentJob"] is None
    assert status["lastCompleted"]["job_id"] == job
    assert (status["latestModelVersion"], status["deployedModelVersion"]) == (
        "v1",
        "v1",
    )
    assert status["dataRates"]["trajectoriesLastHour"] == 4
    readiness = status["readiness"]
    assert not readiness["ready"] and readiness["stats"]["newTrajectories"] == 0
    assert readiness["reason"] == (
        "0 of 3 trajectories recorded since the last training."
    )
    (v1,) = client.agent("pole")["versions"]
    assert v1["source_run"] == job and v1["evaluation"]
    assert client.health()["heavy_modules"] == []

    forced = client.request("POST", "/training/trigger", {"force": True})
    assert forced["forced"] and not forced["readiness"]["ready"]
    client.stop(forced["job_id"])
    client.wait(forced["job_id"], timeout=120)


def test_retraining_bad_input(client: StudioClient) -> None:
    before = client.request("GET", "/training/settings")

    def put(body: Any) -> Any:
        return lambda: client.request("PUT", "/training/settings", body)

    refused(put({"min_trajectories": 0}), 422, "min_trajectories")
    refused(put({"min_hours_between": "soon"}), 422, "min_hours_between must be")
    refused(put({"speed": 2}), 422, "Unknown setting 'speed'")
    refused(put({"flow": "no_such_flow"}), 404, "no flow 'no_such_flow'")
    refused(put({"agent": "../x", "min_trajectories": 5}), 422, "agent")
    refused(put([1]), 400, "must be a JSON object")
    assert client.request("GET", "/training/settings") == before

    def post(body: Any) -> Any:
        return lambda: client.request("POST", "/training/trigger", body)

    refused(post({"force": "yes"}), 422, "force must be true or false")
    refused(post({"batchSize": 1.5}), 422, "batchSize must be a whole number")
    refused(post({"batchSize": 0}), 422, "batchSize")
    refused(post({"now": True}), 422, "Unknown field 'now'")


def test_the_schedule_retrains_by_itself(tmp_path: Path) -> None:
    served = serve(
        tmp_path / "project", tmp_path / "server.log", "--retrain-every", "1s"
    )
    try:
        client = served.client()
        write_flow(tmp_path / "project", CHEAP_FLOW)
        client.request(
            "PUT",
            "/training/settings",
            {"flow": "cheap", "min_trajectories": 1, "min_hours_between": 0},
        )
        status = client.request("GET", "/training/status")
        assert status["schedule"]["everySeconds"] == 1.0
        record(client, "s", agent="anyone")

        def started() -> Any:
            # lastStarted, not lastCheck: the next look, a second later, finds
            # the training running and becomes lastCheck (a loaded machine's
            # polls missed that second).
            schedule = client.request("GET", "/training/status")["schedule"]
            return (schedule["lastStarted"] or {}).get("started")

        job = wait_until("the schedule to start training", started, timeout=60)
        assert client.wait(job, timeout=120)["status"] == "completed"
        status = client.request("GET", "/training/status")
        assert status["lastCompleted"]["trigger"] == "schedule"
        # Nothing new since: the next looks find it not ready.
        wait_until(
            "a check that is not ready",
            lambda: (
                "reason"
                in (client.request("GET", "/training/status")["schedule"]["lastCheck"])
            ),
        )
        # Recorded in the project, for the studio's engine to show.
        project = Project.open(tmp_path / "project")
        try:
            assert recorded_schedule(project)["everySeconds"] == 1.0
        finally:
            project.close()
    finally:
        served.stop()
    project = Project.open(tmp_path / "project")
    try:  # cleared when the server stopped
        assert recorded_schedule(project)["everySeconds"] is None
    finally:
        project.close()


def test_retrain_every_must_be_a_duration(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "engine.cli", "serve-http"),
            *("--project", str(tmp_path / "p"), "--port", "0"),
            *("--retrain-every", "soon"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "--retrain-every must be a duration such as 24h" in message
    assert not (tmp_path / "p").exists()  # refused before the project opens
