"""Benchmark: the compiled workflow env against a hand-written gymnasium class.

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_envs.py -s -o addopts=""``

* single: ``WorkflowEnv`` compiled from ``jira_issue_resolution.env.json``
  against ``HandWrittenIssueEnv`` below, a straightforward gymnasium.Env with
  the same statuses, tools, transitions, rewards and task sampling (checked:
  both give identical trajectories for the same seed and actions). Target:
  ratio >= 1.0.
* batch: ``WorkflowBatch`` (numpy, N envs per call) against the compiled
  single env in a Python loop, per env-step. Target: ratio >= 10.

Both sides run the same pre-drawn actions, interleaved, best of several rounds
(these machines are noisy: compare the ratios, not the absolute numbers).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from engine.envs import load_spec, workflow_batch
from engine.envs.workflow_env import WorkflowEnv

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "resources/examples/envs/jira_issue_resolution.env.json"
DATA = ROOT / "resources/examples/data/jira_mock_data.json"

pytestmark = pytest.mark.bench


class HandWrittenIssueEnv(gym.Env):
    """The Jira issue-resolution workflow written by hand, the usual way."""

    STATUSES = ["To Do", "In Progress", "Blocked", "In Review", "Done", "Won't Do"]
    TOOLS = [
        "start_progress",
        "flag_blocked",
        "unblock",
        "submit_for_review",
        "merge",
        "request_changes",
        "close_wont_do",
        "add_comment",
    ]
    TRANSITIONS = {
        ("To Do", "start_progress"): [("In Progress", 1.0, 0.0)],
        ("To Do", "close_wont_do"): [("Won't Do", 1.0, 0.0)],
        ("In Progress", "flag_blocked"): [("Blocked", 1.0, 0.0)],
        ("In Progress", "submit_for_review"): [("In Review", 1.0, 0.0)],
        ("Blocked", "unblock"): [("In Progress", 0.8, 0.0), ("Blocked", 0.2, 0.0)],
        ("Blocked", "close_wont_do"): [("Won't Do", 1.0, 0.0)],
        ("In Review", "merge"): [("Done", 0.75, 0.0), ("In Progress", 0.25, 0.0)],
        ("In Review", "request_changes"): [("In Progress", 1.0, 0.0)],
    }
    WEIGHTS = {
        "To Do": 0.0,
        "In Progress": 0.1,
        "Blocked": -0.1,
        "In Review": 0.3,
        "Done": 1.0,
        "Won't Do": -0.5,
    }
    TERMINAL = {"Done", "Won't Do"}
    SUCCESS = {"Done"}
    PER_STEP, INVALID, BONUS, COMMENT = -0.02, -0.1, 1.0, -0.01
    MAX_STEPS = 20

    def __init__(self, issues: list[dict[str, Any]]) -> None:
        self.issues = issues
        n = 4 + len(self.TOOLS) + len(self.STATUSES)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        self.action_space = gym.spaces.Discrete(len(self.TOOLS))
        for s in self.STATUSES:
            if s not in self.TERMINAL:
                self.TRANSITIONS.setdefault(
                    (s, "add_comment"), [(s, 1.0, self.COMMENT)]
                )

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[0] = self.steps / self.MAX_STEPS
        obs[1] = self.done
        if self.last_tool is not None:
            obs[2 + self.last_tool] = 1.0
        obs[2 + len(self.TOOLS)] = self.valid
        obs[3 + len(self.TOOLS)] = self.resolved
        obs[4 + len(self.TOOLS) + self.STATUSES.index(self.status)] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = self.issues[int(self.np_random.integers(len(self.issues)))]
        status = self.task.get("status")
        self.status = status if status in self.STATUSES else "To Do"
        self.steps, self.last_tool = 0, None
        self.valid, self.done, self.resolved = True, False, False
        return self._obs(), {"task_id": self.task["id"], "status": self.status}

    def step(self, action):
        tool = self.TOOLS[int(action)]
        breakdown = {
            "step": self.PER_STEP,
            "invalid_tool": 0.0,
            "transition": 0.0,
            "status": 0.0,
            "success": 0.0,
        }
        outcomes = self.TRANSITIONS.get((self.status, tool))
        if outcomes is None:
            self.valid = False
            breakdown["invalid_tool"] = self.INVALID
        else:
            self.valid = True
            nxt, _, reward = outcomes[-1]
            if len(outcomes) > 1:
                u, cum = self.np_random.random(), 0.0
                for nxt, p, reward in outcomes:  # noqa: B007
                    cum += p
                    if u < cum:
                        break
            breakdown["transition"] = reward
            if nxt != self.status:
                breakdown["status"] = self.WEIGHTS[nxt] - self.WEIGHTS[self.status]
            self.status = nxt
        self.resolved = self.status in self.SUCCESS
        if self.resolved:
            breakdown["success"] = self.BONUS
        self.steps += 1
        self.last_tool = int(action)
        terminated = self.status in self.TERMINAL
        truncated = not terminated and self.steps >= self.MAX_STEPS
        self.done = terminated or truncated
        info = {
            "reward_breakdown": breakdown,
            "is_success": self.resolved,
            "valid": self.valid,
            "status": self.status,
            "tool": tool,
            "task_id": self.task["id"],
        }
        return self._obs(), sum(breakdown.values()), terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return np.array([(self.status, t) in self.TRANSITIONS for t in self.TOOLS])


def _loop(env: gym.Env, actions: np.ndarray) -> float:
    """Seconds to step through ``actions``, resetting when an episode ends."""
    env.reset(seed=0)
    step, reset = env.step, env.reset
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = step(a)
        if term or trunc:
            reset()
    return time.perf_counter() - t0


def test_same_trajectories() -> None:
    issues = json.loads(DATA.read_text())["issues"]
    compiled, hand = WorkflowEnv(load_spec(SPEC)), HandWrittenIssueEnv(issues)
    actions = np.random.default_rng(0).integers(8, size=5000).tolist()
    for env in (compiled, hand):
        env.reset(seed=3)
    for a in actions:
        c, h = compiled.step(a), hand.step(a)
        assert np.array_equal(c[0], h[0]) and c[2:4] == h[2:4]
        assert c[1] == pytest.approx(h[1]) and c[4]["status"] == h[4]["status"]
        assert c[4]["reward_breakdown"] == pytest.approx(h[4]["reward_breakdown"])
        if c[2] or c[3]:
            assert compiled.reset()[0].tolist() == hand.reset()[0].tolist()


def test_bench_single_env() -> None:
    issues = json.loads(DATA.read_text())["issues"]
    compiled, hand = WorkflowEnv(load_spec(SPEC)), HandWrittenIssueEnv(issues)
    actions = np.random.default_rng(0).integers(8, size=100_000).tolist()
    best_c = best_h = float("inf")
    for _ in range(5):
        best_c = min(best_c, _loop(compiled, actions))
        best_h = min(best_h, _loop(hand, actions))
    c_rate, h_rate = len(actions) / best_c, len(actions) / best_h
    print(
        f"\nBENCH envs workflow single: compiled {c_rate:,.0f} steps/s, "
        f"hand-written {h_rate:,.0f} steps/s, ratio {c_rate / h_rate:.2f}"
    )
    assert c_rate / h_rate >= 1.0


def test_bench_batch() -> None:
    spec = load_spec(SPEC)
    single = WorkflowEnv(spec)
    actions = np.random.default_rng(0).integers(8, size=50_000).tolist()
    n_envs, n_steps = 1024, 200
    batch = workflow_batch(spec, n_envs, seed=0)
    batch_actions = np.random.default_rng(1).integers(8, size=(n_steps, n_envs))
    best_s = best_b = float("inf")
    for _ in range(3):
        best_s = min(best_s, _loop(single, actions))
        batch.reset()
        t0 = time.perf_counter()
        for row in batch_actions:
            batch.step(row)
        best_b = min(best_b, time.perf_counter() - t0)
    s_rate = len(actions) / best_s
    b_rate = n_envs * n_steps / best_b
    print(
        f"\nBENCH envs workflow batch: {n_envs} envs {b_rate:,.0f} env-steps/s, "
        f"single-env loop {s_rate:,.0f} steps/s, ratio {b_rate / s_rate:.1f}"
    )
    assert b_rate / s_rate >= 10
