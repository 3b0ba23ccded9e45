"""The compiled form of a ``workflow`` spec: numpy tables, no gymnasium.

:class:`WorkflowModel` turns statuses, tools and transitions into tables
indexed ``[status, tool, outcome]`` (next status, cumulative probability,
reward without the success bonus), which both the single gymnasium env
(:mod:`engine.envs.workflow_env`) and the vectorized :class:`WorkflowBatch`
step from. Rewards, broken down by rule:

* ``step`` — ``rewards.per_step``, every step;
* ``invalid_tool`` — a tool with no transition from the current status
  (the status does not change);
* ``transition`` — the transition's own ``reward``;
* ``status`` — the weight of the status entered (``status_mode`` "enter",
  default) or potential-based shaping (``status_mode`` "potential"):
  ``phi(s') - phi(s)`` with ``phi`` the status weight, and ``phi = 0`` at the
  status an episode terminates at (a terminal status, or a task's target
  reached). Over an episode that ends the shaping sums to ``-phi(start)``
  whatever the path, so it guides without moving the optimum: the shortest
  successful path earns the most, and no detour (a lap, or a terminal
  status that is not the task's target) pays;
* ``success`` — ``rewards.success_bonus`` when a success status (or the
  task's target status) is reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engine import untrusted
from engine.contract import WILDCARD
from engine.envs.spec_types import EnvSpec, Problem, SpecError, path_exists
from engine.errors import ConfigError

REWARD_RULES = ("step", "invalid_tool", "transition", "status", "success")
PROB_TOLERANCE = 1e-6
DEFAULT_MAX_STEPS = 50
UNREACHABLE = 10**6
"""The difficulty of a task whose goal no transition leads to."""


@dataclass(frozen=True)
class Task:
    """One task sampled at reset (an issue from the mock data)."""

    id: str
    summary: str = ""
    status: int | None = None
    """Start status index, or None to use the spec's start."""
    target: int | None = None
    """Target status index, or None to use the spec's success statuses."""
    data: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class Outcome:
    probability: float
    to: int
    reward: float
    """Transition reward (the ``transition`` rule)."""
    index: int
    """Index of the transition in the spec (-1 for a wildcard expansion)."""


# ---------------------------------------------------------------- mock data


@lru_cache(maxsize=32)
def _read_json_cached(path: str, mtime_ns: int, size: int) -> Any:
    return untrusted.load_file(path, f"The mock data file {path}", MOCK_DATA_BYTES)


MOCK_DATA_BYTES = 64 * 1024 * 1024
"""Largest mock data file read."""


def read_mock_data(path: Path) -> dict[str, Any]:
    """Read an RL Hub Jira mock data file (cached until the file changes)."""
    if not path_exists(path, file=True):
        raise SpecError(
            "workflow.tasks.data", f"The mock data file {path} does not exist."
        )
    try:
        st = path.stat()
        data = _read_json_cached(str(path), st.st_mtime_ns, st.st_size)
    except OSError as exc:
        raise SpecError(
            "workflow.tasks.data", f"The mock data file {path} cannot be read ({exc})."
        ) from None
    except untrusted.UntrustedDataError as exc:
        raise SpecError("workflow.tasks.data", str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("issues"), list):
        raise SpecError(
            "workflow.tasks.data",
            f"The mock data file {path} needs an 'issues' list (RL Hub Jira format).",
        )
    return data


def raw_tasks(spec: EnvSpec) -> tuple[list[dict[str, Any]], str]:
    """The task dicts of a spec and the JSON path they come from."""
    tasks = spec.body.get("tasks", {})
    items: list[dict[str, Any]] = list(tasks.get("items", []))
    if "data" in tasks:
        data = read_mock_data(spec.resolve(tasks["data"]))
        items += [i for i in data["issues"] if isinstance(i, dict)]
        return items, "workflow.tasks.data"
    return items, "workflow.tasks.items"


# ---------------------------------------------------------------- the model


class WorkflowModel:
    """A workflow spec compiled to tables. Raises SpecError on a bad spec."""

    def __init__(self, spec: EnvSpec, difficulty: dict[str, Any] | None = None) -> None:
        """``difficulty``: :class:`engine.envs.curriculum.WorkflowDifficulty`
        settings (checked by the caller); None: the spec as designed."""
        problems = [p for p in workflow_problems(spec) if p.severity == "error"]
        if problems:
            raise SpecError(problems[0].path, problems[0].message)
        body = spec.body
        self.spec = spec
        self.statuses: list[str] = list(body["statuses"])
        self.tools: list[dict[str, Any]] = [dict(t) for t in body["tools"]]
        self.tool_names: list[str] = [t["name"] for t in self.tools]
        idx = {s: i for i, s in enumerate(self.statuses)}
        self.status_index = idx
        self.tool_index = {t: i for i, t in enumerate(self.tool_names)}
        self.n_statuses = S = len(self.statuses)
        self.n_tools = A = len(self.tools)
        self.start = idx[body["start"]]
        self.max_steps = int(body.get("max_steps", DEFAULT_MAX_STEPS))
        rewards = body.get("rewards", {})
        self.per_step = float(rewards.get("per_step", 0.0))
        self.invalid_penalty = float(rewards.get("invalid_tool", 0.0))
        self.success_bonus = float(rewards.get("success_bonus", 0.0))
        self.status_mode = rewards.get("status_mode", "enter")
        self.status_weights = np.zeros(S)
        for name, w in rewards.get("status", {}).items():
            self.status_weights[idx[name]] = float(w)
        self.terminal = np.zeros(S, dtype=bool)
        for name in body["terminal"]:
            self.terminal[idx[name]] = True
        self.success = np.zeros(S, dtype=bool)
        if "success" in body:
            for name in body["success"]:
                self.success[idx[name]] = True
        else:
            self.success = self.terminal & (self.status_weights > 0)
        self.outcomes: list[list[list[Outcome]]] = expand_transitions(spec)[0]
        self.end_potential = np.zeros(S)
        """Potential dropped when a success ends an episode at a non-terminal
        status (a task's target): its weight in "potential" mode, else 0."""
        if self.status_mode == "potential":
            self.end_potential = np.where(self.terminal, 0.0, self.status_weights)

        tasks_cfg = body.get("tasks", {})
        self.use_task_status = bool(tasks_cfg.get("use_task_status", False))
        self.use_task_target = bool(tasks_cfg.get("use_task_target", False))
        self.tasks = self._load_tasks(spec)
        self.task_difficulty = self._task_difficulty()
        self.task_p: np.ndarray | None = None
        """Task sampling probabilities; None: uniform."""
        if difficulty:
            self._apply_difficulty(difficulty)

        # tables [S, A, K]
        K = max(1, max(len(o) for row in self.outcomes for o in row))
        self.max_outcomes = K
        self.valid = np.zeros((S, A), dtype=bool)
        self.next_table = np.zeros((S, A, K), dtype=np.int64)
        self.cum_table = np.ones((S, A, K), dtype=np.float64)
        self.reward_table = np.zeros((S, A, K), dtype=np.float64)
        self.breakdown_table = np.zeros((S, A, K, len(REWARD_RULES)), dtype=np.float64)
        for s in range(S):
            for a in range(A):
                outs = self.outcomes[s][a]
                self.valid[s, a] = bool(outs)
                if not outs:
                    self.next_table[s, a, :] = s
                    bd = self._breakdown(s, s, valid=False, transition_reward=0.0)
                    self.breakdown_table[s, a, :, :] = bd
                    continue
                cum = 0.0
                for k in range(K):
                    o = outs[min(k, len(outs) - 1)]
                    if k < len(outs):
                        cum += o.probability
                    self.next_table[s, a, k] = o.to
                    self.cum_table[s, a, k] = cum if k < len(outs) - 1 else 2.0
                    self.breakdown_table[s, a, k] = self._breakdown(
                        s, o.to, valid=True, transition_reward=o.reward
                    )
        self.reward_table = self.breakdown_table.sum(axis=-1)

        # observation layout
        self.obs_tool = 2
        self.obs_valid = 2 + A
        self.obs_resolved = 3 + A
        self.obs_status = 4 + A
        self.obs_target = 4 + A + S
        self.obs_size = 4 + A + S + (S if self.use_task_target else 0)

    def _breakdown(
        self, s: int, to: int, *, valid: bool, transition_reward: float
    ) -> np.ndarray:
        """Reward by rule for one outcome, without the success bonus."""
        bd = np.zeros(len(REWARD_RULES))
        bd[0] = self.per_step
        if not valid:
            bd[1] = self.invalid_penalty
            return bd
        bd[2] = transition_reward
        if to != s:
            w = self.status_weights
            if self.status_mode == "potential":
                # a terminal status has potential 0: the episode ends there
                bd[3] = (0.0 if self.terminal[to] else w[to]) - w[s]
            else:
                bd[3] = w[to]
        return bd

    def _load_tasks(self, spec: EnvSpec) -> list[Task]:
        items, _ = raw_tasks(spec)
        tasks = []
        for i, item in enumerate(items):
            status = self.status_index.get(str(item.get("status")))
            target = self.status_index.get(str(item.get("target_status")))
            tasks.append(
                Task(
                    id=str(item.get("id", item.get("key", f"task-{i}"))),
                    summary=str(item.get("summary", "")),
                    status=status if self.use_task_status else None,
                    target=target if self.use_task_target else None,
                    data=item,
                )
            )
        return tasks or [Task(id="default")]

    def _task_difficulty(self) -> list[int]:
        """Each task's difficulty: the fewest steps from its start status to
        its goal (its target, else a success status) over transitions that
        can happen; ``UNREACHABLE`` when none leads there."""
        S = self.n_statuses
        nxt = [
            sorted({o.to for outs in self.outcomes[s] for o in outs} - {s})
            for s in range(S)
        ]
        out = []
        for task in self.tasks:
            goal = (
                np.eye(S, dtype=bool)[task.target]
                if task.target is not None
                else self.success
            )
            start = self.start_of(task)
            dist = {start: 0}
            frontier = [start]
            found = UNREACHABLE if not goal[start] else 0
            while frontier and found == UNREACHABLE:
                following = []
                for s in frontier:
                    for t in nxt[s]:
                        if t not in dist:
                            dist[t] = dist[s] + 1
                            if goal[t]:
                                found = dist[t]
                            following.append(t)
                frontier = following
            out.append(found)
        return out

    def _apply_difficulty(self, d: dict[str, Any]) -> None:
        if d.get("max_steps") is not None:
            self.max_steps = int(d["max_steps"])
        noise = float(d.get("transition_noise") or 0.0)
        if noise > 0:
            # A failed tool is one more outcome: the status stays.
            for s in range(self.n_statuses):
                for a in range(self.n_tools):
                    outs = self.outcomes[s][a]
                    if outs:
                        for o in outs:
                            o.probability *= 1.0 - noise
                        outs.append(Outcome(noise, s, 0.0, -1))
        limit = d.get("max_task_difficulty")
        if limit is not None:
            harder = float(d.get("harder_task_weight") or 0.0)
            w = np.array([1.0 if k <= limit else harder for k in self.task_difficulty])
            if not w.any():
                easiest = min(self.task_difficulty)
                raise ConfigError(
                    "max_task_difficulty",
                    f"No task of {self.spec.name} is within max_task_difficulty "
                    f"{limit}: the easiest takes {easiest} steps.",
                )
            self.task_p = w / w.sum()

    def sample_tasks(self, rng: np.random.Generator, n: int | None = None) -> Any:
        """Task indices (one, or ``n``) drawn by ``task_p``; uniform draws
        use ``integers`` as they always did, so seeded runs replay."""
        k = len(self.tasks)
        if self.task_p is None:
            return rng.integers(k, size=n) if n is not None else int(rng.integers(k))
        if n is None:
            return int(rng.choice(k, p=self.task_p))
        return rng.choice(k, size=n, p=self.task_p)

    # -- helpers shared by the env and the batch

    def start_of(self, task: Task) -> int:
        return self.start if task.status is None else task.status

    def observation_labels(self) -> list[str]:
        """A name per observation entry, for the designer's trace table."""
        labels = ["step_fraction", "done"]
        labels += [f"last_tool={t}" for t in self.tool_names]
        labels += ["valid", "resolved"]
        labels += [f"status={s}" for s in self.statuses]
        if self.use_task_target:
            labels += [f"target={s}" for s in self.statuses]
        return labels

    def step_reward_range(self) -> tuple[float, float]:
        """Smallest and largest reward of one step (success bonus included)."""
        r = self.reward_table
        lo, hi = float(r.min()), float(r.max())
        if self.success.any() or self.use_task_target:
            lo = min(lo, lo + self.success_bonus - float(self.end_potential.max()))
            hi = max(hi, hi + self.success_bonus)
        return lo, hi


# ---------------------------------------------------------------- transitions


def expand_transitions(
    spec: EnvSpec,
) -> tuple[list[list[list[Outcome]]], list[Problem]]:
    """Outcomes per [status][tool] with wildcards expanded and missing
    probabilities filled in, plus problems with the probabilities.

    Transitions from a terminal status are ignored (the episode has ended).
    Assumes names were checked (unknown names are skipped).
    """
    body = spec.body
    statuses = list(body["statuses"])
    idx = {s: i for i, s in enumerate(statuses)}
    tools = {t["name"]: i for i, t in enumerate(body["tools"])}
    terminal = set(body.get("terminal", []))
    S, A = len(statuses), len(tools)
    problems: list[Problem] = []
    explicit: dict[tuple[int, int], list[tuple[int, dict[str, Any]]]] = {}
    wild: dict[tuple[int, int], list[tuple[int, dict[str, Any]]]] = {}
    for i, t in enumerate(body["transitions"]):
        if t["tool"] not in tools:
            continue
        a = tools[t["tool"]]
        if t["from"] == WILDCARD:
            sources = [s for s in range(S) if statuses[s] not in terminal]
            target = wild
        elif t["from"] in idx:
            sources = [idx[t["from"]]]
            target = explicit
        else:
            continue
        if t["to"] != WILDCARD and t["to"] not in idx:
            continue
        for s in sources:
            target.setdefault((s, a), []).append((i, t))
    outcomes: list[list[list[Outcome]]] = [[[] for _ in range(A)] for _ in range(S)]
    for (s, a), entries in list(wild.items()) + list(explicit.items()):
        if statuses[s] in terminal:
            continue
        group = explicit.get((s, a)) or entries
        if group is not entries:  # an explicit transition overrides a wildcard
            continue
        given = [t.get("probability") for _, t in group]
        total = sum(p for p in given if p is not None)
        missing = sum(1 for p in given if p is None)
        last_i = group[-1][0]
        where = f"workflow.transitions[{last_i}].probability"
        label = f"'{statuses[s]}' with tool '{group[0][1]['tool']}'"
        if total > 1 + PROB_TOLERANCE:
            problems.append(
                Problem(
                    "error",
                    where,
                    f"The probabilities of the transitions from {label} sum to "
                    f"{total:g}, more than 1.",
                )
            )
            continue
        if missing == 0 and total < 1 - PROB_TOLERANCE:
            problems.append(
                Problem(
                    "error",
                    where,
                    f"The probabilities of the transitions from {label} sum to "
                    f"{total:g}, not 1.",
                )
            )
            continue
        share = (1.0 - total) / missing if missing else 0.0
        row = []
        for i, t in group:
            p = t.get("probability")
            p = share if p is None else float(p)
            if p <= 0:
                continue
            to = s if t["to"] == WILDCARD else idx[t["to"]]
            row.append(Outcome(p, to, float(t.get("reward", 0.0)), i))
        # renormalize away float dust so cumulative sums end at exactly 1
        z = sum(o.probability for o in row)
        for o in row:
            o.probability /= z
        outcomes[s][a] = row
    return outcomes, problems


def workflow_problems(spec: EnvSpec) -> list[Problem]:
    """Errors and warnings in a workflow body that the schema cannot see."""
    body = spec.body
    out: list[Problem] = []

    def err(path: str, msg: str, severity: str = "error") -> None:
        out.append(Problem(severity, path, msg))  # type: ignore[arg-type]

    statuses = body["statuses"]
    seen: set[str] = set()
    for i, s in enumerate(statuses):
        if s in seen:
            err(f"workflow.statuses[{i}]", f"The status '{s}' is listed twice.")
        seen.add(s)
    tool_names: set[str] = set()
    for i, t in enumerate(body["tools"]):
        if t["name"] in tool_names:
            err(f"workflow.tools[{i}].name", f"The tool '{t['name']}' is listed twice.")
        tool_names.add(t["name"])
    if body["start"] not in seen:
        err("workflow.start", f"workflow.start '{body['start']}' is not a status.")
    for key in ("terminal", "success"):
        for i, s in enumerate(body.get(key, [])):
            if s not in seen:
                err(
                    f"workflow.{key}[{i}]",
                    f"workflow.{key}[{i}] '{s}' is not a status.",
                )
    if not body["terminal"]:
        err("workflow.terminal", "workflow.terminal needs at least one status.")
    for name in body.get("rewards", {}).get("status", {}):
        if name not in seen:
            err(
                f"workflow.rewards.status.{name}",
                f"workflow.rewards.status names '{name}', which is not a status.",
            )
    for i, t in enumerate(body["transitions"]):
        base = f"workflow.transitions[{i}]"
        for key, known, what in (
            ("from", seen, "status"),
            ("to", seen, "status"),
            ("tool", tool_names, "tool"),
        ):
            v = t[key]
            if key != "tool" and v == WILDCARD:
                continue
            if v not in known:
                err(
                    f"{base}.{key}", f"{base}.{key} names '{v}', which is not a {what}."
                )
        if t["from"] in body["terminal"]:
            err(
                f"{base}.from",
                f"{base} leaves the terminal status '{t['from']}' and is never used.",
                "warning",
            )
    if out and any(p.severity == "error" for p in out):
        return out
    out.extend(expand_transitions(spec)[1])
    tasks = body.get("tasks", {})
    try:
        items, where = raw_tasks(spec)
    except SpecError as exc:
        err(exc.field, str(exc))
        return out
    if (
        "data" not in tasks
        and "items" not in tasks
        and (tasks.get("use_task_status") or tasks.get("use_task_target"))
    ):
        err("workflow.tasks", "workflow.tasks uses task statuses but lists no tasks.")
    for key, flag in (
        ("status", "use_task_status"),
        ("target_status", "use_task_target"),
    ):
        if not tasks.get(flag):
            continue
        for i, item in enumerate(items):
            v = item.get(key)
            if v not in seen:
                fallback = "the start" if key == "status" else "the success statuses"
                err(
                    where,
                    f"Task {item.get('id', i)} has {key} {v!r}, which is not a "
                    f"status; {fallback} will be used.",
                    "warning",
                )
    return out


# ---------------------------------------------------------------- analysis


def reachable(model: WorkflowModel, starts: list[int]) -> np.ndarray:
    """Statuses reachable from ``starts`` through transitions with p > 0."""
    seen = np.zeros(model.n_statuses, dtype=bool)
    stack = list(starts)
    seen[starts] = True
    while stack:
        s = stack.pop()
        for row in model.outcomes[s]:
            for o in row:
                if not seen[o.to]:
                    seen[o.to] = True
                    stack.append(o.to)
    return seen


def positive_cycle(model: WorkflowModel) -> bool:
    """True when some cycle through non-terminal statuses pays a positive reward
    per lap, so an agent can collect reward forever instead of finishing."""
    S = model.n_statuses
    best = np.zeros(S)  # longest path from a virtual source to every status
    edges = [
        (s, o.to, _edge_reward(model, s, a, k))
        for s in range(S)
        if not model.terminal[s]
        for a in range(model.n_tools)
        for k, o in enumerate(model.outcomes[s][a])
        if not model.terminal[o.to] and not model.success[o.to]
    ]
    for _ in range(S):
        changed = False
        for s, t, r in edges:
            if best[s] + r > best[t] + 1e-12:
                best[t] = best[s] + r
                changed = True
        if not changed:
            return False
    return True


def _edge_reward(model: WorkflowModel, s: int, a: int, k: int) -> float:
    return float(model.reward_table[s, a, k])


# ---------------------------------------------------------------- batch


class WorkflowBatch:
    """``num_envs`` copies of a workflow env stepped together with numpy.

    Episodes reset automatically when they end (like SB3's VecEnv): the
    returned observation is then the first of the next episode and the last
    one is in ``info["final_observation"]`` (rows where ``done``).
    """

    def __init__(self, model: WorkflowModel, num_envs: int, seed: int | None = None):
        if num_envs < 1:
            raise ValueError("num_envs must be at least 1")
        self.model = m = model
        self.num_envs = n = num_envs
        self.rng = np.random.default_rng(seed)
        self.status = np.zeros(n, dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)
        self.last_tool = np.full(n, -1, dtype=np.int64)
        self.valid_flag = np.ones(n, dtype=bool)
        self.target = np.full(n, -1, dtype=np.int64)
        self._rows = np.arange(n)
        self.set_model(m)

    def set_model(self, m: WorkflowModel) -> None:
        """Step from ``m`` from now on (the same spec at another difficulty:
        the running episodes go on)."""
        self.model = m
        self._task_start = np.array([m.start_of(t) for t in m.tasks], dtype=np.int64)
        self._task_target = np.array(
            [-1 if t.target is None else t.target for t in m.tasks], dtype=np.int64
        )
        self._success_ext = np.append(m.success, False)  # index -1 -> False
        self._stochastic = m.max_outcomes > 1

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._reset_rows(self._rows)
        return self._obs()

    def _reset_rows(self, rows: np.ndarray) -> None:
        k = self.model.sample_tasks(self.rng, len(rows))
        self.status[rows] = self._task_start[k]
        self.target[rows] = self._task_target[k]
        self.steps[rows] = 0
        self.last_tool[rows] = -1
        self.valid_flag[rows] = True

    def action_masks(self) -> np.ndarray:
        """Valid tools per env, shape (num_envs, n_tools)."""
        mask = self.model.valid[self.status]
        empty = ~mask.any(axis=1)
        mask[empty] = True
        return mask

    def _success(self, status: np.ndarray) -> np.ndarray:
        reached: np.ndarray = self.model.success[status]
        if self.model.use_task_target:
            has = self.target >= 0
            return np.where(has, status == self.target, reached)
        return reached

    def _obs(
        self,
        done: np.ndarray | None = None,
        resolved: np.ndarray | None = None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """Observations of ``rows`` (default all); flags default to 0."""
        m = self.model
        rows = self._rows if rows is None else rows
        n = len(rows)
        local = np.arange(n)
        status, last_tool = self.status[rows], self.last_tool[rows]
        obs = np.zeros((n, m.obs_size), dtype=np.float32)
        obs[:, 0] = self.steps[rows] * (1.0 / m.max_steps)
        if done is not None:
            obs[:, 1] = done
        has_tool = last_tool >= 0
        obs[local[has_tool], m.obs_tool + last_tool[has_tool]] = 1.0
        obs[:, m.obs_valid] = self.valid_flag[rows]
        if resolved is not None:
            obs[:, m.obs_resolved] = resolved
        obs[local, m.obs_status + status] = 1.0
        if m.use_task_target:
            target = self.target[rows]
            has_t = target >= 0
            obs[local[has_t], m.obs_target + target[has_t]] = 1.0
        return obs

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        m = self.model
        a = np.asarray(actions, dtype=np.int64)
        s = self.status
        if self._stochastic:
            u = self.rng.random(self.num_envs)
            k = (u[:, None] >= m.cum_table[s, a]).sum(axis=1)
        else:
            k = np.zeros(self.num_envs, dtype=np.int64)
        nxt = m.next_table[s, a, k]
        reward = m.reward_table[s, a, k]
        success = self._success(nxt)
        if m.success_bonus:
            reward = reward + success * m.success_bonus
        if m.status_mode == "potential":
            reward = reward - success * m.end_potential[nxt]
        self.valid_flag = m.valid[s, a]
        self.status = nxt
        self.last_tool = a.copy()
        self.steps += 1
        terminated = m.terminal[nxt] | success
        truncated = ~terminated & (self.steps >= m.max_steps)
        done = terminated | truncated
        info: dict[str, Any] = {"is_success": success, "valid": self.valid_flag.copy()}
        if done.any():
            # success always ends the episode, so after the resets below no
            # row has the done or resolved flag set: one pass builds them all
            rows = self._rows[done]
            info["final_observation"] = self._obs(done[rows], success[rows], rows)
            self._reset_rows(rows)
            obs = self._obs()
        else:
            obs = self._obs(done, success)
        return obs, reward, terminated, truncated, info
