"""``serve-http --database postgresql://...``: two real service processes on
one PostgreSQL database (``pg_server``'s), each with its own project folder
as on two machines. Steps of one trajectory go through both and all arrive
once; an agent's version registered through one is the other's, and so are
its routing and the serving settings; a service killed with SIGKILL loses
no acknowledged step; the database going away answers 503 in one sentence,
writes nothing half and the service recovers when it is back. The 4 x
2,000-step version with its figures is
tests/benchmarks/test_bench_http_postgres.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pg_server import PgServer
from test_http_service import Served, serve, wait_until

from engine.client_http import ApiError, StudioClient

pytestmark = pytest.mark.slow
CLOSED_PORT_HOST = "http://127.0.0.1:9"
"""An Ollama address nothing listens on: acting fails at once."""


def _two(tmp_path: Path, url: str) -> list[Served]:
    return [
        serve(tmp_path / f"project{n}", tmp_path / f"server{n}.log", "--database", url)
        for n in (1, 2)
    ]


def test_two_services_share_one_database(tmp_path: Path, pg_url: str) -> None:
    """2 clients x 200 steps, each step through the service the last one
    did not use: 400 of 400 stored, none twice, in order."""
    services = _two(tmp_path, pg_url)
    try:
        clients = [s.client() for s in services]
        assert clients[0].health()["database"] == pg_url
        acked: dict[str, list[int]] = {}

        def ingest(n: int) -> None:
            tid = clients[n].start_trajectory("shared", scenario=f"c{n}")
            acked[tid] = [
                clients[(n + i) % 2].add_step(tid, action=i, reward=1.0)
                for i in range(200)
            ]
            clients[1 - n].end_trajectory(tid, "completed")

        threads = [threading.Thread(target=ingest, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert len(acked) == 2 and all(a == list(range(200)) for a in acked.values())
        for tid in acked:
            for client in clients:  # either service reads what both wrote
                episode = client.trajectory(tid)
                assert [s["action"] for s in episode["steps"]] == list(range(200))
                assert episode["status"] == "completed" and episode["return"] == 200
        rows = clients[0].trajectories(agent="shared")
        assert sorted(r["id"] for r in rows) == sorted(acked)
        # Each trajectory's line is in the trace file of the service that
        # ended it, once.
        lines = [
            (tmp_path / f"project{n}" / "data/traces/agent-shared.jsonl")
            for n in (1, 2)
        ]
        text = "".join(p.read_text() for p in lines if p.exists())
        assert sorted(t for t in acked if t in text) == sorted(acked)
        assert all(text.count(t) == 1 for t in acked)
        _agents_are_shared(clients)
    finally:
        for served in services:
            served.stop_cleanly()


def _agents_are_shared(clients: list[StudioClient]) -> None:
    """An agent's version registered through one service is listed by the
    other, whose routing and serving settings the first then serves with;
    the other acts with it (an Ollama model needs no files: its server,
    closed here, is what fails, 503)."""
    first, second = clients
    added = first.request(
        "POST",
        "/agents/shared/versions",
        {"ollama_model": "shared-llm", "host": CLOSED_PORT_HOST},
    )
    assert added["version"] == "v1"
    assert second.request("GET", "/agents")["agents"] == ["shared"]
    seen = second.agent("shared")
    assert [(v["version"], v["model_id"]) for v in seen["versions"]] == [
        ("v1", added["model_id"])
    ]
    second.configure_agent("shared", candidate="v1", rollout=40)
    second.configure_serving(base_model="nothing-here")
    there = first.agent("shared")
    assert (there["candidate"], there["rollout"]) == ("v1", 40)
    assert there["base_model"] == "nothing-here"
    with pytest.raises(ApiError) as failed:
        second.act("shared", messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status == 503 and "v1 failed" in failed.value.message


def test_a_service_killed_mid_ingest_loses_no_acknowledged_step(
    tmp_path: Path, pg_url: str
) -> None:
    services = _two(tmp_path, pg_url)
    try:
        doomed, survivor = (s.client() for s in services)
        tid = doomed.start_trajectory("ingest", scenario="crash")
        acked: list[int] = []
        failed = threading.Event()

        def ingest() -> None:
            try:
                while True:
                    acked.append(doomed.add_step(tid, action=len(acked), reward=1.0))
            except (OSError, ApiError):
                failed.set()

        thread = threading.Thread(target=ingest, daemon=True)
        thread.start()
        wait_until("some steps", lambda: len(acked) >= 50, timeout=30)
        services[0].proc.kill()  # SIGKILL: no shutdown, no flush
        services[0].proc.wait()
        thread.join(timeout=30)
        assert failed.is_set() and acked == list(range(len(acked)))
        stored = [s["t"] for s in survivor.trajectory(tid)["steps"]]
        assert stored[: len(acked)] == acked  # perhaps one more, unacknowledged
        assert len(stored) - len(acked) in (0, 1)
        # The other service goes on with it.
        assert survivor.add_step(tid, action="after", reward=0.0) == len(stored)
        assert survivor.end_trajectory(tid, "abandoned")["steps"] == len(stored) + 1
    finally:
        for served in services:
            served.stop()


def test_the_database_going_away_is_a_503_and_the_service_recovers(
    tmp_path: Path, postgres: PgServer, pg_url: str
) -> None:
    served = serve(tmp_path / "project", tmp_path / "server.log", "--database", pg_url)
    try:
        client = served.client()
        tid = client.start_trajectory("bot")
        assert client.add_steps(tid, [{"action": 0, "reward": 1.0}] * 3) == 0
        postgres.stop()
        try:
            with pytest.raises(ApiError) as gone:
                client.add_steps(tid, [{"action": 0, "reward": 2.0}] * 5)
            assert gone.value.status == 503
            message = gone.value.message
            assert "cannot be reached" in message and message.count(". ") == 0
            assert client.health()["status"] == "ok"  # the service itself lives
        finally:
            postgres.start()
        assert (
            client.add_steps(tid, [{"action": 0, "reward": 4.0}] * 2) == 3
        )  # 201 again
        episode = client.trajectory(tid)
        assert [s["reward"] for s in episode["steps"]] == [1.0] * 3 + [4.0] * 2
    finally:
        served.stop_cleanly()


def test_a_database_that_cannot_be_reached_stops_the_start_in_one_sentence(
    tmp_path: Path,
) -> None:
    with pytest.raises(AssertionError, match="cannot be reached"):
        serve(
            tmp_path / "project",
            tmp_path / "server.log",
            "--database",
            "postgresql://nobody@127.0.0.1:1/none",
        )
    assert "Traceback" not in (tmp_path / "server.log").read_text()
