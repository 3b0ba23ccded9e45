"""Promotion with a gate, the switch and the fallback chain, and the trajectory
recorder's interface, over the real ``serve-http`` server (issue 32, items
1, 2 and 4).

Agent ``pole`` gets a good version (PPO on CartPole, evaluated at its end)
and then a broken one (the same run with a learning rate of 1.0: its first
updates saturate the policy into pushing one way, and the pole falls in
about nine steps): the gate promotes the first and
keeps the second a candidate, saying why. A person promotes and rolls back
by hand, both logged with who and why. With the switch off the base model
answers; a version that cannot load falls back to the base model, and a
workflow agent's model that cannot be reached to the env's expert action.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_http_service import QUICK, REPO, Served, assert_refusals, one_sentence, serve

from engine.client_http import ApiError, StudioClient
from engine.errors import EngineError
from engine.store.decisions import replay
from engine.store.project import ModelRecord, Project
from engine.store.promotion import (
    AgentSettings,
    ServingSettings,
    configure_serving,
    gate,
    serving_settings,
)

AGENT = "pole"
OBS = [0.01, -0.02, 0.03, 0.04]
STEPS = 4096
EVALUATED = {**QUICK, "agent": AGENT, "seed": 3, "eval_every_steps": STEPS,
             "eval_episodes": 5}  # fmt: skip
WORKFLOW = "jira_status_update"


# ------------------------------------------------------------ the gate alone
def _record(version: int, metrics: dict[str, float]) -> ModelRecord:
    return ModelRecord(
        id=f"m{version}", name="m", kind="sb3-policy", path="", created=0.0,
        metrics=metrics, version=version, agent=AGENT,
    )  # fmt: skip


def test_the_gate_rules() -> None:
    plain = AgentSettings()
    good, bad = (
        _record(1, {"eval/mean_reward": 149.9}),
        _record(2, {"eval/mean_reward": 17.7}),
    )
    assert gate(plain, good, None, []) == (
        True,
        "v1 promoted: the agent had no current version.",
    )
    ok, reason = gate(plain, bad, good, [])
    assert not ok and reason == (
        "v2 stays a candidate: eval/mean_reward 17.7 is below v1's 149.9 minus "
        "the tolerance 0."
    )
    assert gate(AgentSettings(tolerance=200.0), bad, good, [])[0]
    ok, reason = gate(plain, good, bad, ["The loss was NaN at step 3."])
    assert not ok and reason.endswith("its run warned: The loss was NaN at step 3.")
    loss = AgentSettings(gate_metric="eval/loss", higher_is_better=False)
    low, high = _record(3, {"eval/loss": 0.5}), _record(4, {"eval/loss": 0.9})
    assert gate(loss, low, high, [])[0] and not gate(loss, high, low, [])[0]
    ok, reason = gate(plain, _record(5, {}), good, [])
    assert not ok and "has no eval/mean_reward" in reason
    # The log replayed: promote, refuse, promote by hand, roll back.
    state = replay(
        [
            {"version": 1, "action": "promoted", "reason": "a"},
            {"version": 2, "action": "refused", "reason": "b"},
            {"version": 2, "action": "promote", "reason": "c"},
            {"version": 2, "action": "rollback", "reason": "d"},
        ]
    )
    assert (state.current, state.previous) == (1, None)
    assert state.status == {1: "promoted", 2: "rolled back"}


def test_the_agent_training_services_variables_are_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """USE_RL_MODEL, RL_FALLBACK_TO_BASE and BASE_MODEL give the defaults;
    what the project stores wins; a bad value is one sentence."""
    project = Project.open(tmp_path / "p", create=True)
    try:
        assert serving_settings(project) == ServingSettings()
        monkeypatch.setenv("USE_RL_MODEL", "false")
        monkeypatch.setenv("RL_FALLBACK_TO_BASE", "0")
        monkeypatch.setenv("BASE_MODEL", "m-base")
        assert serving_settings(project) == ServingSettings(False, False, "m-base")
        configure_serving(project, {"rl_enabled": True})
        assert serving_settings(project) == ServingSettings(True, False, "m-base")
        monkeypatch.setenv("BASE_MODEL", "m-other")  # still a default
        assert serving_settings(project).base_model == "m-other"
        monkeypatch.setenv("RL_FALLBACK_TO_BASE", "sometimes")
        with pytest.raises(EngineError) as err:
            serving_settings(project)
        assert str(err.value) == (
            "RL_FALLBACK_TO_BASE must be true or false, not 'sometimes'."
        )
    finally:
        project.close()


# ------------------------------------------------------------ over HTTP
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("promotion")
    project = root / "project"
    examples = REPO / "resources" / "examples"
    (project / "envs").mkdir(parents=True)
    (project / "data").mkdir()
    shutil.copy(examples / "envs" / f"{WORKFLOW}.env.json", project / "envs")
    shutil.copy(examples / "data" / "jira_mock_data.json", project / "data")
    served = serve(project, root / "server.log")
    yield served
    served.stop_cleanly()


@pytest.fixture(scope="module")
def trained(server: Served) -> StudioClient:
    """v1 trained, then v2 broken: one after the other, so the good one
    is v1."""
    client = server.client()
    for lr in (3e-4, 1.0):
        job = client.train(
            "CartPole-v1",
            algo="PPO",
            steps=STEPS,
            settings={**EVALUATED, "learning_rate": lr},
        )
        assert client.wait(job, timeout=300)["status"] == "completed"
    return client


@pytest.mark.slow
def test_the_gate_refuses_the_broken_version(trained: StudioClient) -> None:
    agent = trained.agent(AGENT)
    v1, v2 = agent["versions"]
    good, broken = (v["evaluation"]["eval/mean_reward"] for v in (v1, v2))
    assert good > broken, (good, broken)  # the runs did what they were meant to
    assert (v1["status"], v2["status"]) == ("promoted", "candidate")
    assert v2["gate"].startswith("v2 stays a candidate: eval/mean_reward")
    assert "below v1's" in v2["gate"] and one_sentence(v2["gate"])
    assert agent["current"] == "v1"
    assert [(e["version"], e["action"], e["by"]) for e in agent["promotions"]] == [
        (1, "promoted", "gate"),
        (2, "refused", "gate"),
    ]
    assert trained.act(AGENT, observation=OBS)["version"] == "v1"


@pytest.mark.slow
def test_promote_and_rollback_by_hand(trained: StudioClient, server: Served) -> None:
    client = trained
    agent = client.promote(AGENT, "v2", why="canary looked fine", by="alice")
    assert (agent["current"], agent["previous"]) == ("v2", "v1")
    assert client.act(AGENT, observation=OBS)["version"] == "v2"
    agent = client.rollback(AGENT, why="worse on live traffic", by="bob")
    assert (agent["current"], agent["previous"]) == ("v1", None)
    log = agent["promotions"][-2:]
    assert [(e["version"], e["action"], e["by"]) for e in log] == [
        (2, "promote", "alice"),
        (2, "rollback", "bob"),
    ]
    assert log[0]["reason"] == "v2 promoted by alice: canary looked fine."
    assert log[1]["reason"] == "v2 rolled back to v1 by bob: worse on live traffic."
    # The command line reads and writes the same log.
    project = server.log.parent / "project"
    command = [sys.executable, "-m", "engine.cli", "agent"]
    shown = subprocess.run(
        [*command, "promote", AGENT, "v2", "--project", str(project),
         "--why", "from the terminal", "--by", "carol"],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert '"current": "v2"' in shown.stdout
    assert client.agent(AGENT)["current"] == "v2"
    client.rollback(AGENT, why="back again")
    refused = subprocess.run(
        [*command, "rollback", AGENT, "--project", str(project), "--why", "x"],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "has no version promoted before its current one" in refused.stderr


@pytest.mark.slow
def test_switch_and_fallback_chain(trained: StudioClient) -> None:
    client = trained
    models = {m["version"]: m for m in client.models() if m.get("agent") == AGENT}
    # Switched off with no base model and no rule policy (CartPole has no
    # expert): refused, nothing changed.
    with pytest.raises(ApiError) as err:
        client.configure_agent_settings(AGENT, rl_enabled=False)
    assert err.value.status == 409 and one_sentence(str(err.value))
    assert "no base model and no rule policy" in str(err.value)
    assert client.agent(AGENT)["rl_enabled"]

    # The broken v2's model as the base: switched off, the base answers.
    client.configure_serving(base_model=models[2]["id"])
    agent = client.configure_agent_settings(AGENT, rl_enabled=False)
    assert not agent["rl_enabled"] and "switch is off" in agent["switch_reason"]
    answer = client.act(AGENT, observation=OBS)
    assert (answer["answered_by"], answer["chosen"]) == ("base", None)
    assert answer["reason"].startswith("Switched off:")
    client.configure_agent_settings(AGENT, rl_enabled=True)

    # v1's file gone: v1 fails, no version before it, the base answers.
    Path(models[1]["path"]).unlink()
    answer = client.act(AGENT, observation=OBS)
    assert (answer["chosen"], answer["answered_by"]) == ("v1", "base")
    assert answer["fallback"] and "v1 failed" in answer["reason"]
    assert client.agent(AGENT)["answered_by"]["base"] == 2
    # The project's switch off, no fallback to base: nothing answers.
    client.configure_serving(fallback_to_base=False)
    with pytest.raises(ApiError) as err:
        client.act(AGENT, observation=OBS)
    assert err.value.status == 503 and "v1 failed" in str(err.value)
    client.configure_serving(fallback_to_base=True, base_model="")


def test_the_rule_policy_answers_for_a_model_that_cannot_load(
    server: Served, tmp_path: Path
) -> None:
    """A workflow agent whose v2 is a model folder with no weights and whose
    v1 is on an Ollama server that is not there: the env's expert action
    answers, after both failed."""
    client = server.client()
    client.request(
        "POST",
        "/agents/flow/versions",
        {"ollama_model": "gone", "host": "http://127.0.0.1:9"},
    )
    # No evaluation to compare: the gate promotes on health alone.
    client.configure_agent_settings("flow", rule_env=WORKFLOW, gate_metric="")
    empty = tmp_path / "no-weights"
    empty.mkdir()
    (empty / "config.json").write_text('{"model_type": "qwen2"}')
    project = Project.open(server.log.parent / "project")
    try:
        model = project.register_model(name="empty", kind="hf", files=[empty])
    finally:
        project.close()
    client.request("POST", "/agents/flow/versions", {"model_id": model.id})
    ask = [{"role": "user", "content": "Next tool?"}]
    answer = client.act(
        "flow", messages=ask, state={"status": "In Review", "target": "Done"}
    )
    assert (answer["answered_by"], answer["reply"]) == ("rule", "move_to_done")
    assert answer["chosen"] == "v2" and "has no weights" in answer["reason"]
    assert "v1 failed" in answer["reason"]
    # Switched off, the rule policy answers at once.
    client.configure_serving(rl_enabled=False)
    try:
        answer = client.act(
            "flow", messages=ask, state={"status": "To Do", "target": "Done"}
        )
        assert (answer["answered_by"], answer["reply"]) == (
            "rule",
            "move_to_in_progress",
        )
        assert "v1" not in answer["reason"]
    finally:
        client.configure_serving(rl_enabled=True)
    # A state the workflow does not have is refused, not guessed at.
    lost = {"messages": ask, "state": {"status": "Lost"}}
    assert_refusals(
        client,
        [("POST", "/agents/flow/act", lost, 422, "state.status must be a status")],
    )


@pytest.mark.slow
def test_bad_input(trained: StudioClient) -> None:
    client = trained
    why = {"why": "x"}
    cases = [
        ("POST", "/agents/nobody/promote", {"version": 1, **why}, 404, "no agent"),
        ("POST", f"/agents/{AGENT}/promote", {"version": "v9", **why}, 404,
         "has no version v9"),
        ("POST", f"/agents/{AGENT}/promote", {"version": 1}, 422, "why is required"),
        ("POST", "/agents/nobody/rollback", why, 404, "no agent"),
        ("POST", f"/agents/{AGENT}/rollback", why, 409,
         "has no version promoted before"),
        ("PUT", f"/agents/{AGENT}/settings", {"tolerance": -1}, 422, "tolerance"),
        ("PUT", "/agents/nobody/settings", {"tolerance": 1}, 404, "no agent"),
        ("PUT", "/serving", {"rl_enabled": "maybe"}, 422, "rl_enabled"),
    ]  # fmt: skip
    assert_refusals(client, cases)


# ------------------------------------------------------ the recorder's names
@pytest.mark.slow
def test_the_recorders_fields_and_the_admin_routes(
    server: Served, trained: StudioClient
) -> None:
    """The recorder's camelCase fields, and the training routes under the
    agent-training service's prefix (a job of ``trained``'s to look up)."""
    client = server.client()
    started = client.request(
        "POST",
        "/trajectories",
        {"agentId": "rec", "scenarioId": "s1", "windowId": "w1"},
    )
    tid = started["trajectory_id"]
    step = {
        "stepNumber": 0,
        "environmentState": {"status": "To Do"},
        "action": {"type": "move_to_in_progress", "params": {"issue": "J-1"}},
        "reward": 1.0,
    }
    assert client.request("POST", f"/trajectories/{tid}/steps", step)["t"] == 0
    batch = {"steps": [{**step, "stepNumber": 1, "reward": 2.0}]}
    assert client.request("POST", f"/trajectories/{tid}/steps", batch)["t"] == 1
    ended = client.request(
        "POST",
        f"/trajectories/{tid}/end",
        {"finalStatus": "completed", "totalReward": 3.0},
    )
    assert ended["status"] == "completed"
    episode = client.trajectory(tid)
    first = episode["steps"][0]
    assert first["tool"] == "move_to_in_progress"
    assert first["action"] == step["action"] and first["info"]["step_number"] == 0
    assert first["state"] == {"status": "To Do"}
    assert (episode["scenario"], episode["window"]) == ("s1", "w1")
    with pytest.raises(ApiError) as err:
        client.request("POST", "/trajectories", {"agentId": "a", "agent": "b"})
    assert err.value.status == 422
    assert err.value.message == "Give agent or agentId, not both."
    # The training routes under the agent-training service's prefix.
    assert (
        client.request("GET", "/api/admin/training/status").keys()
        == client.request("GET", "/training/status").keys()
    )
    job = client.runs()[0]["id"]
    assert client.request("GET", f"/api/admin/training/{job}")["job_id"] == job
