"""Model versions, rollout and fallback over the real ``serve-http`` server:
two training runs for agent ``pole`` become v1 and v2; v2 rolled out at 50 %
answers about half of the keyed requests and v1 the rest (routing by key, so
the test is not left to chance); v2's file deleted, its share falls back to v1
with the reason recorded; a language model's version answers messages; each
bad input's one-sentence error."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_http_service import QUICK, Served, assert_refusals, one_sentence, serve

from engine.client_http import ApiError, StudioClient
from engine.store.project import Project

AGENT = "pole"
OBS = [0.01, -0.02, 0.03, 0.04]
KEYS = [f"user-{i}" for i in range(40)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("agents")
    served = serve(root / "project", root / "server.log")
    yield served
    served.stop_cleanly()


@pytest.fixture(scope="module")
def versions(server: Served) -> StudioClient:
    """Agent ``pole`` with v1 and v2 (two short PPO runs, side by side)."""
    client = server.client()
    settings = {**QUICK, "agent": AGENT, "seed": 1}
    first = client.train("CartPole-v1", algo="PPO", steps=256, settings=settings)
    second = client.train(
        "CartPole-v1", algo="PPO", steps=256, settings={**settings, "seed": 2}
    )
    for job in (first, second):
        assert client.wait(job, timeout=240)["status"] == "completed"
    return client


def test_versions_rollout_and_fallback(versions: StudioClient) -> None:
    client = versions
    agent = client.agent(AGENT)
    assert [v["version"] for v in agent["versions"]] == ["v1", "v2"]
    # Trained without evaluation: the gate keeps v2 a candidate.
    assert agent["follows_promoted"] and agent["current"] == "v1"
    assert [v["status"] for v in agent["versions"]] == ["promoted", "candidate"]
    assert "has no eval/mean_reward" in agent["versions"][1]["gate"]
    v1 = agent["versions"][0]
    assert v1["kind"] == "sb3-policy" and v1["lineage"]  # the run that trained it
    assert v1["lineage"][0]["relation"] == "trained"

    # v1 current (pinned), v2 the candidate at 50 %.
    agent = client.configure_agent(AGENT, pin="v1", candidate=2, rollout=50)
    assert (agent["current"], agent["candidate"], agent["rollout"]) == ("v1", "v2", 50)
    answers = [client.act(AGENT, observation=OBS, key=k) for k in KEYS]
    served = {a["version"] for a in answers}
    assert served == {"v1", "v2"}
    assert all(a["action"] in (0, 1) and not a["fallback"] for a in answers)
    # The same key reaches the same version again.
    again = [client.act(AGENT, observation=OBS, key=k)["version"] for k in KEYS]
    assert again == [a["version"] for a in answers]
    to_candidate = [
        k for k, a in zip(KEYS, answers, strict=True) if a["version"] == "v2"
    ]
    assert 5 < len(to_candidate) < 35

    # The candidate's file goes: its share falls back to v1, and says why.
    v2_path = Path(next(m["path"] for m in client.models() if m["version"] == 2))
    v2_path.unlink()
    answer = client.act(AGENT, observation=OBS, key=to_candidate[0])
    assert answer["chosen"] == "v2" and answer["version"] == "v1"
    assert answer["fallback"] and "does not exist" in answer["reason"]
    agent = client.agent(AGENT)
    outcomes = {v["version"]: v["outcomes"] for v in agent["versions"]}
    assert outcomes["v2"]["fallbacks"] == 1
    assert "does not exist" in outcomes["v2"]["last_reason"]
    assert outcomes["v2"]["requests"] == 2 * len(to_candidate) + 1
    assert outcomes["v1"]["served"] == 2 * (len(KEYS) - len(to_candidate)) + 1
    assert outcomes["v1"]["mean_latency_ms"] > 0
    assert agent["recent_decisions"][0]["fallback"] == 1

    # Rollout 0: everything to v1; unpinned with no candidate and v2
    # promoted by hand: v2 (gone) falls back to v1, the one before it.
    client.configure_agent(AGENT, rollout=0)
    assert client.act(AGENT, observation=OBS, key=to_candidate[0])["version"] == "v1"
    client.configure_agent(AGENT, pin=None, candidate=None)
    answer = client.promote(AGENT, "v2", why="try it")
    assert (answer["current"], answer["previous"]) == ("v2", "v1")
    answer = client.act(AGENT, observation=OBS)
    assert (answer["chosen"], answer["version"]) == ("v2", "v1")
    assert client.health()["heavy_modules"] == []  # policies act in a worker


def test_agent_bad_input(versions: StudioClient) -> None:
    client = versions
    cases = [
        ("GET", "/agents/nobody", None, 404, "There is no agent 'nobody'"),
        ("PUT", f"/agents/{AGENT}", {"rollout": 101}, 422, "rollout must be"),
        ("PUT", f"/agents/{AGENT}", {"rollout": -1}, 422, "rollout must be"),
        ("PUT", f"/agents/{AGENT}", {"rollout": "50"}, 422, "rollout must be"),
        ("PUT", f"/agents/{AGENT}", {"candidate": "v9"}, 404, "has no version v9"),
        ("PUT", f"/agents/{AGENT}", {"pin": "latest"}, 422, "pin must be a version"),
        ("PUT", f"/agents/{AGENT}", {"share": 5}, 422, "Unknown field 'share'"),
        ("POST", f"/agents/{AGENT}/act", {}, 422, "observation is required"),
        (
            "POST",
            f"/agents/{AGENT}/act",
            {"observation": [1, 2]},
            422,
            "observation must be shaped [4]",
        ),
        (
            "POST",
            f"/agents/{AGENT}/act",
            {"observation": ["a", "b", "c", "d"]},
            422,
            "observation must be numbers",
        ),
        ("POST", "/agents/nobody/act", {"observation": OBS}, 404, "no agent"),
        (
            "POST",
            f"/agents/{AGENT}/versions",
            {"model_id": "m-nothing"},
            404,
            "There is no model",
        ),
    ]
    assert_refusals(client, cases)
    # Nothing half-written: the failed PUTs left the routing as it was.
    before = client.agent(AGENT)
    with pytest.raises(ApiError):
        client.configure_agent(AGENT, candidate="v1", rollout=500)
    after = client.agent(AGENT)
    assert (after["candidate"], after["rollout"]) == (
        before["candidate"],
        before["rollout"],
    )


def test_a_language_model_version_answers_messages(
    server: Served, tmp_path: Path
) -> None:
    """A Hugging Face model folder registered elsewhere (another connection to
    the project) becomes v1 of agent ``chatty`` and answers in the chat
    worker; the service still imports no torch."""
    from tiny_models import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny", "qwen2")
    project = Project.open(server.log.parent / "project")
    model = project.register_model(name="tiny", kind="hf", files=[folder])
    project.close()
    client = server.client()
    added = client.request("POST", "/agents/chatty/versions", {"model_id": model.id})
    assert added == {"agent": "chatty", "version": "v1", "model_id": model.id}
    answer = client.request(
        "POST",
        "/agents/chatty/act",
        {"messages": [{"role": "user", "content": "Next tool?"}], "max_new_tokens": 4},
    )
    assert answer["version"] == "v1" and isinstance(answer["reply"], str)
    with pytest.raises(ApiError) as err:
        client.act("chatty", observation=OBS)
    assert err.value.status == 422 and "messages are required" in str(err.value)
    assert client.health()["heavy_modules"] == []


class ChatOllama(BaseHTTPRequestHandler):
    """Ollama's ``/api/chat`` as far as ``act`` uses it: ``good`` answers,
    any other model is not found."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "good:latest":
            code, answer = 200, {"message": {"role": "assistant", "content": "ok"}}
        else:
            code, answer = 404, {"error": f"model '{body['model']}' not found"}
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_ollama_versions_answer_and_fall_back(server: Served) -> None:
    """Versions deployed to Ollama answer through it; a candidate Ollama
    lacks falls back to the current version, with Ollama's reason."""
    ollama = ThreadingHTTPServer(("127.0.0.1", 0), ChatOllama)
    threading.Thread(target=ollama.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{ollama.server_address[1]}"
    try:
        client = server.client()
        for model in ("good:latest", "gone:latest"):
            client.request(
                "POST",
                "/agents/llama/versions",
                {"ollama_model": model, "host": host},
            )
        client.configure_agent("llama", pin="v1", candidate="v2", rollout=100)
        messages = [{"role": "user", "content": "Hi"}]
        answer = client.act("llama", messages=messages)
        assert (answer["chosen"], answer["version"], answer["reply"]) == (
            "v2",
            "v1",
            "ok",
        )
        assert "has no model named gone:latest" in answer["reason"]
        for body, words in (
            ({"ollama_model": "bad name!"}, "not a valid Ollama model name"),
            ({"ollama_model": "x", "host": "ftp://h"}, "is not an http://"),
            ({"ollama_model": "x", "model_id": "m-1"}, "Give either model_id"),
            ({}, "Give either model_id"),
        ):
            with pytest.raises(ApiError) as err:
                client.request("POST", "/agents/llama/versions", body)
            assert err.value.status == 422 and words in str(err.value), err.value
            assert one_sentence(str(err.value))
    finally:
        ollama.shutdown()
