"""Benchmark: ``serve-http`` request latency and trajectory ingest, idle and
while a PPO run trains beside it.

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_http.py -s -o addopts=""``

Client and server share the machine (and, on a small one, its cores with the
training run), so the figures are what one machine serving itself gets.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_http_service import QUICK, serve

from engine.client_http import StudioClient

pytestmark = pytest.mark.bench

STEPS = 2000
"""Steps ingested one a request; batched runs ingest up to five times more
(more requests to take percentiles of)."""


def _percentiles(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"p50 {ms[len(ms) // 2]:.2f} ms, p99 {ms[int(len(ms) * 0.99)]:.2f} ms"


TARGET_STEPS_PER_S = 1000
TARGET_P99_MS = 20.0


def _ingest(
    url: str,
    clients: int,
    batch: int = 1,
    steps: int = STEPS,
    rate: float | None = None,
) -> str:
    """``steps`` steps from ``clients`` threads, ``batch`` steps a request
    (as a recorder buffering them would send), as fast as they are answered
    or, with ``rate``, that many steps/s in all (agents at work send at
    their own pace, not when the last answer came); steps/s and the latency
    of one request."""
    times: list[list[float]] = [[] for _ in range(clients)]

    def one(out: list[float]) -> None:
        client = StudioClient(url)
        tid = client.start_trajectory("bench", scenario="s")
        step = {"action": 1, "reward": 0.1, "prompt": "p", "completion": "c"}
        interval = batch * clients / rate if rate else 0.0
        due = time.perf_counter()
        for i in range(0, steps // clients, batch):
            due += interval
            start = time.perf_counter()
            if batch == 1:
                client.add_step(tid, state={"i": i}, **step)
            else:
                client.add_steps(
                    tid, [{**step, "state": {"i": i + j}} for j in range(batch)]
                )
            out.append((time.perf_counter() - start) * 1000)
            if interval:
                time.sleep(max(0.0, due - time.perf_counter()))
        client.end_trajectory(tid, "completed")

    threads = [threading.Thread(target=one, args=(t,)) for t in times]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    every = [x for t in times for x in t]
    return f"{len(every) * batch / elapsed:.0f} steps/s, {_percentiles(every)}"


def test_bench_requests_and_ingest(tmp_path: Path) -> None:
    served = serve(tmp_path / "project", tmp_path / "server.log")
    try:
        client = served.client()
        job = client.train("CartPole-v1", algo="PPO", steps=2048, settings=QUICK)
        client.wait(job, timeout=300)
        for name, call in (
            ("GET /health", client.health),
            ("GET /training/{id}", lambda: client.training(job)),
            ("GET /runs/{id}/metrics", lambda: client.metrics(job)),
        ):
            ms = []
            for _ in range(300):
                start = time.perf_counter()
                call()
                ms.append((time.perf_counter() - start) * 1000)
            print(f"\n{name}: {_percentiles(ms)}")
        for clients in (1, 4):
            print(
                f"\ningest, idle, {clients} client(s): {_ingest(served.url, clients)}"
            )
        job = client.train(
            "CartPole-v1", algo="PPO", steps=5_000_000, settings={"n_envs": 2}
        )
        while not client.training(job)["steps_per_s"]:
            time.sleep(0.2)
        print(
            f"\ntargets: {TARGET_STEPS_PER_S} steps/s, "
            f"p99 under {TARGET_P99_MS:.0f} ms while training"
        )
        for clients, batch in ((1, 1), (4, 1), (1, 10), (4, 10), (1, 50), (4, 50)):
            figures = _ingest(served.url, clients, batch, STEPS * min(batch, 5))
            print(
                f"\ningest, PPO training, {clients} client(s), "
                f"{batch} step(s) a request: {figures}"
            )
        for clients, batch in ((4, 1), (4, 10), (10, 25)):
            figures = _ingest(
                served.url, clients, batch, 10_000, rate=TARGET_STEPS_PER_S
            )
            print(
                f"\ningest, PPO training, paced at {TARGET_STEPS_PER_S} steps/s, "
                f"{clients} client(s), {batch} step(s) a request: {figures}"
            )
        print(f"\nPPO meanwhile: {client.training(job)['steps_per_s']:.0f} steps/s")
        client.stop(job)
        client.wait(job, timeout=60)
    finally:
        served.stop()


def test_bench_act(tmp_path: Path) -> None:
    """``POST /agents/{name}/act`` on an SB3 PPO policy (CartPole): one
    client, keep-alive, the policy loaded by the first request (not timed);
    then with a candidate at 50 % (two policies in the worker)."""
    served = serve(tmp_path / "project", tmp_path / "server.log")
    try:
        client = served.client()
        settings = {**QUICK, "agent": "bench"}
        for seed in (1, 2):
            job = client.train(
                "CartPole-v1",
                algo="PPO",
                steps=256,
                settings={**settings, "seed": seed},
            )
            client.wait(job, timeout=300)
        obs = [0.01, -0.02, 0.03, 0.04]
        for label, changes in (
            ("the current version only", {}),
            ("v1 + v2 at 50 %", {"pin": "v1", "candidate": "v2", "rollout": 50}),
        ):
            if changes:
                client.configure_agent("bench", **changes)
            for i in range(20):  # start the worker, load the policies
                client.act("bench", observation=obs, key=str(i))
            ms = []
            for i in range(1000):
                start = time.perf_counter()
                client.act("bench", observation=obs, key=str(i))
                ms.append((time.perf_counter() - start) * 1000)
            print(f"\nact, SB3 PPO policy, {label}: {_percentiles(ms)}")
    finally:
        served.stop()
