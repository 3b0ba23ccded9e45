"""The workflow compiler against a plain interpreter of the spec, on random specs."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.envs.spec import parse_spec
from engine.envs.workflow_env import WorkflowEnv
from engine.envs.workflow_model import WorkflowBatch, WorkflowModel


@st.composite
def workflow_docs(draw: Any) -> dict[str, Any]:
    n_s = draw(st.integers(2, 5))
    n_t = draw(st.integers(1, 4))
    statuses = [f"s{i}" for i in range(n_s)]
    tools = [f"t{i}" for i in range(n_t)]
    terminal = draw(st.lists(st.sampled_from(statuses[1:]), min_size=1, unique=True))
    transitions = []
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from([*statuses, "*"]), st.sampled_from(tools)),
            min_size=1,
            max_size=8,
            unique=True,
        )
    )
    for src, tool in pairs:
        k = draw(st.integers(1, 3))
        weights = draw(st.lists(st.integers(1, 9), min_size=k, max_size=k))
        omit_last = draw(st.booleans())
        for j, w in enumerate(weights):
            t = {
                "from": src,
                "tool": tool,
                "to": draw(st.sampled_from([*statuses, "*"])),
                "reward": draw(st.sampled_from([0.0, 0.5, -0.25])),
            }
            if not (omit_last and j == k - 1):
                t["probability"] = w / sum(weights)
            transitions.append(t)
    rewards = {
        "per_step": draw(st.sampled_from([0.0, -0.01])),
        "invalid_tool": draw(st.sampled_from([0.0, -0.1])),
        "success_bonus": draw(st.sampled_from([0.0, 1.0])),
        "status": {s: draw(st.sampled_from([-0.5, 0.0, 0.3, 1.0])) for s in statuses},
        "status_mode": draw(st.sampled_from(["enter", "potential"])),
    }
    return {
        "format": 1,
        "name": "prop",
        "kind": "workflow",
        "workflow": {
            "statuses": statuses,
            "tools": [{"name": t} for t in tools],
            "transitions": transitions,
            "start": "s0",
            "terminal": terminal,
            "max_steps": draw(st.integers(1, 12)),
            "rewards": rewards,
        },
    }


class Reference:
    """The spec read literally, one dict lookup at a time."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.w = w = doc["workflow"]
        self.terminal = set(w["terminal"])
        weights = w["rewards"]["status"]
        self.success = {s for s in self.terminal if weights.get(s, 0) > 0}

    def outcomes(self, s: str, tool: str) -> list[tuple[float, str, float]]:
        if s in self.terminal:
            return []
        group = [
            t for t in self.w["transitions"] if t["from"] == s and t["tool"] == tool
        ]
        if not group:
            group = [
                t
                for t in self.w["transitions"]
                if t["from"] == "*" and t["tool"] == tool
            ]
        given_p = [t.get("probability") for t in group]
        known = sum(p for p in given_p if p is not None)
        missing = given_p.count(None)
        out = []
        for t, p in zip(group, given_p, strict=True):
            p = (1 - known) / missing if p is None else p
            if p > 0:
                out.append((p, s if t["to"] == "*" else t["to"], t.get("reward", 0.0)))
        z = sum(p for p, _, _ in out)
        return [(p / z, to, r) for p, to, r in out]

    def run(self, seed: int, actions: list[int]) -> list[tuple[Any, ...]]:
        rng = np.random.default_rng(seed)
        w, r = self.w, self.w["rewards"]
        weights = r["status"]
        s, steps, rec = w["start"], 0, []
        for a in actions:
            tool = w["tools"][a]["name"]
            outs = self.outcomes(s, tool)
            reward = r["per_step"]
            if not outs:
                nxt = s
                reward += r["invalid_tool"]
            else:
                p, nxt, tr = outs[-1]
                if len(outs) > 1:
                    u, cum = rng.random(), 0.0
                    for i, (p, to, t_r) in enumerate(outs):
                        cum += p
                        if u < cum or i == len(outs) - 1:
                            nxt, tr = to, t_r
                            break
                reward += tr
                if nxt != s:
                    # potential: weight 0 at a terminal status (episode end)
                    reward += (
                        (0.0 if nxt in self.terminal else weights[nxt]) - weights[s]
                        if r["status_mode"] == "potential"
                        else weights[nxt]
                    )
            success = nxt in self.success
            reward += r["success_bonus"] if success else 0.0
            steps += 1
            term = nxt in self.terminal or success
            trunc = not term and steps >= w["max_steps"]
            rec.append((nxt, round(reward, 9), term, trunc, bool(outs), success))
            s = nxt
            if term or trunc:
                s, steps = w["start"], 0
        return rec


def _valid_doc(doc: dict[str, Any]) -> bool:
    spec, problems = parse_spec(doc)
    return spec is not None and not any(p.severity == "error" for p in problems)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(doc=workflow_docs(), seed=st.integers(0, 2**16), data=st.data())
def test_compiled_env_matches_the_reference(doc: dict, seed: int, data: Any) -> None:
    assert _valid_doc(doc)  # the generator only makes well-formed specs
    n_tools = len(doc["workflow"]["tools"])
    actions = data.draw(st.lists(st.integers(0, n_tools - 1), min_size=1, max_size=40))
    env = WorkflowEnv(doc)
    env.reset(seed=seed)
    got = []
    for a in actions:
        _, reward, term, trunc, info = env.step(a)
        got.append(
            (
                info["status"],
                round(reward, 9),
                term,
                trunc,
                info["valid"],
                info["is_success"],
            )
        )
        if term or trunc:
            env.reset()
    # the env's reset(seed) seeds np_random the way default_rng(seed) does
    assert got == Reference(doc).run(seed, actions)

    # one batch row follows the same tables
    model = WorkflowModel(env.spec_doc)
    batch = WorkflowBatch(model, 3, seed=seed)
    batch.reset()
    for a in actions:
        _, reward, term, trunc, info = batch.step(np.full(3, a))
        assert np.all(np.isfinite(reward))
        assert np.all(term | trunc | (batch.steps > 0))
