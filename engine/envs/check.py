"""Check a designed env before anyone trains on it.

:func:`check_spec` runs, in order: the schema and field checks, the static
analysis of the kind (reachability of terminal statuses from the start,
unused tools, unreachable statuses, reward range and reward cycles for
workflows; a path to a goal for grids; importing the class for python specs),
then on real instances: Gymnasium's ``check_env`` on the ``gym.make``
instance, stable-baselines3's ``check_env``, a multi-step determinism test
(same seed and actions, same trajectory, stochastic transitions included),
and for workflows a save/restore replay test. Every problem names the JSON
path of the field that causes it.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.envs.spec import EnvSpec, Problem, SpecError, parse_spec, read_spec_json

if TYPE_CHECKING:
    from engine.envs.workflow_model import WorkflowModel

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

IGNORED_WARNINGS = (
    "different from the unwrapped version",  # gym.make wraps; expected here
    "is out of date. You should consider upgrading",
)


@dataclass
class Report:
    """The result of :func:`check_spec`."""

    name: str
    kind: str | None
    env_id: str | None
    problems: list[Problem] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    """Facts found on the way: step reward range, random-policy success, ..."""

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when nothing stops the env from being used (warnings allowed)."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "env_id": self.env_id,
            "ok": self.ok,
            "problems": [p.to_dict() for p in self.problems],
            "stats": self.stats,
        }

    def format_text(self) -> str:
        head = f"{self.name}"
        if self.env_id:
            head += f" ({self.env_id}, {self.kind})"
        verdict = "OK" if self.ok else "FAILED"
        n_err, n_warn = len(self.errors), len(self.warnings)
        lines = [f"{head}: {verdict}, {n_err} error(s), {n_warn} warning(s)"]
        for p in self.problems:
            where = p.path or "(spec)"
            lines.append(f"  {p.severity:<7}  {where}: {p.message}  [{p.check}]")
        for key, value in self.stats.items():
            lines.append(f"  {key}: {value}")
        return "\n".join(lines)


def check_spec(
    spec: EnvSpec | dict[str, Any] | str | Path,
    *,
    steps: int = 200,
    seed: int = 0,
    env_checks: bool = True,
) -> Report:
    """Check a spec (object, document or file). A missing or malformed file
    raises EngineError; everything else is reported as problems.

    ``steps``: length of the determinism test in env steps. ``env_checks``:
    False skips everything that makes an env (static checks only).
    """
    if isinstance(spec, EnvSpec):
        built, problems = parse_spec(spec.to_dict(), source=spec.source)
    elif isinstance(spec, dict):
        built, problems = parse_spec(spec)
    else:
        built, problems = parse_spec(read_spec_json(spec), source=spec)
    name = (
        built.name
        if built
        else str(spec.get("name", "?"))
        if isinstance(spec, dict)
        else (spec.name if isinstance(spec, EnvSpec) else Path(spec).name)
    )
    report = Report(
        name=name,
        kind=built.kind if built else None,
        env_id=built.env_id if built else None,
        problems=list(problems),
    )
    if built is None or not report.ok:
        return report
    if built.migrated_from is not None:
        report.stats["migrated_from_format"] = built.migrated_from
    try:
        _STATIC[built.kind](built, report)
    except SpecError as exc:
        report.problems.append(Problem("error", exc.field, str(exc), "compile"))
    if report.ok and env_checks:
        _env_checks(built, report, steps=steps, seed=seed)
    return report


# ---------------------------------------------------------------- static


def _static_workflow(spec: EnvSpec, report: Report) -> None:
    """A workflow's static analysis: what can be reached from the start,
    tools never valid, task targets, and the reward range and cycles."""
    from engine.envs.workflow_model import WorkflowModel, reachable

    m = WorkflowModel(spec)
    starts = sorted({m.start_of(t) for t in m.tasks})
    seen = reachable(m, starts)
    _workflow_reachability(spec, m, starts, seen, report)
    _workflow_unused_tools(m, seen, report)
    if m.use_task_target:
        _workflow_task_targets(m, report)
    _workflow_rewards(m, report)


def _workflow_reachability(
    spec: EnvSpec,
    m: WorkflowModel,
    starts: list[int],
    seen: np.ndarray,
    report: Report,
) -> None:
    """Refuse a workflow whose start reaches no end; warn of terminal and
    other statuses never reached, and of dead ends that are not terminal."""
    add = report.problems.append
    start_names = ", ".join(f"'{m.statuses[s]}'" for s in starts)
    if not (seen & m.terminal).any() and not (seen & m.success).any():
        add(
            Problem(
                "error",
                "workflow.terminal",
                f"No terminal status can be reached from the start ({start_names}).",
                "reachability",
            )
        )
    for i, name in enumerate(spec.body["terminal"]):
        if not seen[m.status_index[name]]:
            add(
                Problem(
                    "warning",
                    f"workflow.terminal[{i}]",
                    f"The terminal status '{name}' cannot be reached from the start.",
                    "reachability",
                )
            )
    for i, name in enumerate(m.statuses):
        if not seen[i] and not m.terminal[i]:
            add(
                Problem(
                    "warning",
                    f"workflow.statuses[{i}]",
                    f"The status '{name}' cannot be reached from the start.",
                    "reachability",
                )
            )
        elif (
            seen[i] and not m.terminal[i] and not m.success[i] and not m.valid[i].any()
        ):
            add(
                Problem(
                    "warning",
                    f"workflow.statuses[{i}]",
                    f"The status '{name}' is not terminal but no tool leaves it; "
                    "episodes there only end by max_steps.",
                    "reachability",
                )
            )


def _workflow_unused_tools(m: WorkflowModel, seen: np.ndarray, report: Report) -> None:
    """Warn of tools valid nowhere, or only where no episode gets."""
    add = report.problems.append
    for a, name in enumerate(m.tool_names):
        if not m.valid[:, a].any():
            add(
                Problem(
                    "warning",
                    f"workflow.tools[{a}]",
                    f"The tool '{name}' has no transition, so it is never valid.",
                    "unused",
                )
            )
        elif not m.valid[seen, a].any():
            add(
                Problem(
                    "warning",
                    f"workflow.tools[{a}]",
                    f"The tool '{name}' is only valid in statuses that cannot be "
                    "reached.",
                    "unused",
                )
            )


def _workflow_task_targets(m: WorkflowModel, report: Report) -> None:
    """Warn of tasks that start in their target, or cannot reach it."""
    from engine.envs.workflow_model import reachable

    add = report.problems.append
    for t in m.tasks:
        if t.target is not None and t.target == m.start_of(t):
            add(
                Problem(
                    "warning",
                    "workflow.tasks",
                    f"Task {t.id} starts in its target status "
                    f"'{m.statuses[t.target]}'; it succeeds on its first step.",
                    "reachability",
                )
            )
        elif t.target is not None and not reachable(m, [m.start_of(t)])[t.target]:
            add(
                Problem(
                    "warning",
                    "workflow.tasks",
                    f"Task {t.id} targets '{m.statuses[t.target]}', which cannot "
                    f"be reached from '{m.statuses[m.start_of(t)]}'.",
                    "reachability",
                )
            )


def _workflow_rewards(m: WorkflowModel, report: Report) -> None:
    """Record the step reward range and return bounds; warn of rewards too
    large, never positive, a success worth no more than a failure, or a
    cycle that pays per lap."""
    from engine.envs.workflow_model import positive_cycle

    add = report.problems.append
    lo, hi = m.step_reward_range()
    report.stats["step_reward_range"] = [round(lo, 6), round(hi, 6)]
    report.stats["return_bounds"] = [
        round(lo * m.max_steps, 6),
        round(hi * m.max_steps, 6),
    ]
    if max(abs(lo), abs(hi)) > 1e3:
        add(
            Problem(
                "warning",
                "workflow.rewards",
                f"Step rewards reach {max(abs(lo), abs(hi)):g}; scale them to about "
                "[-10, 10] for stable training.",
                "reward_range",
            )
        )
    if hi <= 0:
        add(
            Problem(
                "warning",
                "workflow.rewards",
                "No step can earn a positive reward; the agent can only learn to "
                "end episodes quickly.",
                "reward_range",
            )
        )
    if m.status_mode == "potential" and m.success_bonus <= 0:
        add(
            Problem(
                "warning",
                "workflow.rewards.success_bonus",
                "In 'potential' mode the status weights add up to the same over "
                "any finished episode, so without a success bonus a success pays "
                "no more than a failure.",
                "reward_range",
            )
        )
    if positive_cycle(m):
        add(
            Problem(
                "warning",
                "workflow.rewards.status",
                "Some cycle of statuses pays a positive reward per lap, so an agent "
                "can farm reward instead of finishing; consider status_mode "
                "'potential' or a larger per-step cost.",
                "reward_range",
            )
        )


def _static_grid(spec: EnvSpec, report: Report) -> None:
    from engine.envs.grid import GridEnv

    env = GridEnv(spec)
    d = env.shortest_path_length()
    if d is None:
        report.problems.append(
            Problem(
                "error",
                "grid.goals",
                "No goal can be reached from grid.start (walls or traps block "
                "the way).",
                "reachability",
            )
        )
        return
    report.stats["shortest_path"] = d
    if d > env.max_steps:
        report.problems.append(
            Problem(
                "error",
                "grid.max_steps",
                f"grid.max_steps is {env.max_steps} but the nearest goal is {d} "
                "moves away.",
                "reachability",
            )
        )
    _farmable_cells(spec, env, d, report)
    rewards = [
        env.r_step + env.r_goal,
        env.r_step + env.r_trap,
        env.r_step + env.r_bump,
    ]
    rewards += [env.r_step + float(v) for v in np.unique(env.cell_reward)]
    report.stats["step_reward_range"] = [min(rewards), max(rewards)]


def _farmable_cells(spec: EnvSpec, env: Any, goal_moves: int, report: Report) -> None:
    """Warn about each repeatable positive cell reward that pays more over an
    episode of stepping on and off it than reaching the goal does."""
    from engine.envs.grid import MOVES

    reach = env._distances(env.start)
    goal = env.r_goal + goal_moves * env.r_step
    ends = env.goals | env.traps
    for i, item in enumerate(spec.body.get("cell_rewards", [])):
        cell = (int(item["cell"][0]), int(item["cell"][1]))
        if item.get("once", False) or cell not in reach or cell in ends:
            continue
        repeat = env.cell_reward[cell] - env.once_reward[cell]
        sides = [(cell[0] + dr, cell[1] + dc) for dr, dc in MOVES]
        back = [
            env.cell_reward[n] - env.once_reward[n]
            for n in sides
            if env._free(n) and n not in ends
        ]
        if repeat <= 0 or not back:
            continue
        lap = float(repeat + max(back) + 2 * env.r_step)  # on and off again
        laps = (env.max_steps - reach[cell]) // 2
        farm = laps * lap + reach[cell] * env.r_step
        if lap > 0 and farm > goal:
            report.problems.append(
                Problem(
                    "warning",
                    f"grid.cell_rewards[{i}]",
                    f"The cell {list(cell)} pays {float(repeat):g} each time it is "
                    f"entered, so stepping on and off it earns about {farm:.2g} "
                    f"in an episode against {goal:.2g} for reaching the goal; "
                    "make it pay once an episode (tick 'once' on the reward tool "
                    'and paint it again, or "once": true in the JSON) or lower it.',
                    "reward_range",
                )
            )


def _static_gymnasium(spec: EnvSpec, report: Report) -> None:
    import gymnasium as gym

    base = spec.body["id"].split(":", 1)[-1]
    if ":" in spec.body["id"]:
        from engine.envs.registry import import_installed_module

        try:
            import_installed_module(spec.body["id"].split(":", 1)[0], spec.source)
        except ImportError as exc:
            raise SpecError("gymnasium.id", f"gymnasium.id: {exc}.") from None
    try:
        gym.spec(base)
    except gym.error.Error as exc:
        raise SpecError(
            "gymnasium.id", f"gymnasium.id {base!r} is not registered ({exc})."
        ) from None


def _static_python(spec: EnvSpec, report: Report) -> None:
    # Imported in an env process of its own, never in this one.
    from engine.envs.remote import load_env_class

    load_env_class(spec.resolve(spec.body["file"]), spec.body["class"])


_STATIC = {
    "workflow": _static_workflow,
    "grid": _static_grid,
    "gymnasium": _static_gymnasium,
    "python": _static_python,
}


# ---------------------------------------------------------------- env checks


def _captured(
    fn: Any, *args: Any, **kwargs: Any
) -> tuple[list[str], BaseException | None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(*args, **kwargs)
            exc = None
        except Exception as e:  # the check's verdict, reported as a problem
            exc = e
    msgs = []
    for w in caught:
        text = _ANSI.sub("", str(w.message)).strip().removeprefix("WARN: ")
        if not any(s in text for s in IGNORED_WARNINGS) and text not in msgs:
            msgs.append(text)
    return msgs, exc


def _env_checks(spec: EnvSpec, report: Report, *, steps: int, seed: int) -> None:
    import gymnasium as gym

    from engine.envs.registry import register_spec

    where = spec.kind if spec.kind in ("python", "gymnasium") else ""
    add = report.problems.append
    try:
        env_id = register_spec(spec)
        made: list[Any] = []
        _, exc = _captured(lambda: made.append(gym.make(env_id)))
        for env in made:
            env.close()  # a python env's process ends here
        if exc is not None:
            raise exc
    except SpecError as exc:
        add(Problem("error", exc.field, str(exc), "make"))
        return
    except Exception as exc:
        # An argument the env does not take is the kwargs' fault.
        if where and isinstance(exc, TypeError) and spec.body.get("kwargs"):
            where = f"{where}.kwargs"
        add(
            Problem(
                "error", where, f"gym.make failed: {type(exc).__name__}: {exc}", "make"
            )
        )
        return

    from gymnasium.utils.env_checker import check_env as gym_check_env

    msgs, failure = _captured(_on_made, env_id, gym_check_env, skip_render_check=True)
    for m in msgs:
        add(Problem("warning", where, m, "gymnasium_check_env"))
    if failure is not None:
        add(_failed(failure, where, "gymnasium_check_env"))

    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    msgs, failure = _captured(
        _on_made, env_id, sb3_check_env, warn=True, skip_render_check=True
    )
    for m in msgs:
        add(Problem("warning", where, m.splitlines()[0], "sb3_check_env"))
    if failure is not None:
        add(_failed(failure, where, "sb3_check_env"))

    _determinism(env_id, spec, report, steps=steps, seed=seed, where=where)
    if spec.kind == "workflow":
        _replay(env_id, report, seed=seed)


def _on_made(env_id: str, check: Any, **kwargs: Any) -> None:
    """``check(env, **kwargs)`` on a fresh instance, closed whatever happens."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        check(env, **kwargs)
    finally:
        env.close()


def _failed(exc: BaseException, where: str, check: str, prefix: str = "") -> Problem:
    """The problem for a check that raised; a python env's process that
    died or misbehaved is its own sentence on ``python.file``."""
    if isinstance(exc, SpecError):
        return Problem("error", exc.field, str(exc), check)
    return Problem("error", where, f"{prefix}{type(exc).__name__}: {exc}", check)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if (
        isinstance(a, float)
        and isinstance(b, float)
        and math.isnan(a)
        and math.isnan(b)
    ):
        return True
    return bool(a == b)


def _rollout(env_id: str, seed: int, steps: int) -> list[tuple[Any, ...]]:
    """``steps`` steps with actions drawn from a generator seeded by ``seed``
    (mostly valid ones when the env has action masks); resets between
    episodes continue the env's own random stream."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return _play(env, seed, steps)
    finally:
        env.close()


def _play(env: Any, seed: int, steps: int) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed + 1)
    env.action_space.seed(seed + 2)
    obs, info = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [("reset", obs, info.get("task_id"))]
    masks = getattr(env.unwrapped, "action_masks", None)
    for _ in range(steps):
        if masks is not None and rng.random() < 0.8:
            valid = np.flatnonzero(masks())
            action = int(rng.choice(valid))
        else:
            action = env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        out.append(
            (
                "step",
                action,
                obs,
                float(reward),
                terminated,
                truncated,
                info.get("reward_breakdown"),
                info.get("is_success"),
            )
        )
        if terminated or truncated:
            obs, info = env.reset()
            out.append(("reset", obs, info.get("task_id")))
    return out


def _determinism(
    env_id: str, spec: EnvSpec, report: Report, *, steps: int, seed: int, where: str
) -> None:
    try:
        first = _rollout(env_id, seed, steps)
        second = _rollout(env_id, seed, steps)
    except Exception as exc:
        report.problems.append(_failed(exc, where, "determinism", "Stepping failed: "))
        return
    fields = (
        "kind",
        "action",
        "observation",
        "reward",
        "terminated",
        "truncated",
        "reward breakdown",
        "is_success",
    )
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if not _same(a, b):
            bad = next(
                (fields[j] if a[0] == "step" else ("observation", "task")[j - 1])
                for j in range(1, len(a))
                if not _same(a[j], b[j])
            )
            step = sum(1 for r in first[: i + 1] if r[0] == "step")
            episode = sum(1 for r in first[:i] if r[0] == "reset")
            when = f"after reset {episode}" if a[0] == "reset" else f"at step {step}"
            report.problems.append(
                Problem(
                    "error",
                    where,
                    f"The same seed and actions gave a different {bad} {when} "
                    f"(episode {episode}); the env is not deterministic (draw "
                    "random numbers from self.np_random).",
                    "determinism",
                )
            )
            return
    rewards = [r[3] for r in first if r[0] == "step"]
    if any(not math.isfinite(r) for r in rewards):
        report.problems.append(
            Problem(
                "error",
                where,
                "A step returned a reward that is NaN or infinite.",
                "reward_range",
            )
        )
        return
    episodes = [r for r in first if r[0] == "step" and (r[4] or r[5])]
    successes = [r for r in episodes if r[7]]
    report.stats["determinism_steps"] = steps
    report.stats["random_policy"] = {
        "episodes": len(episodes),
        "success_rate": round(len(successes) / len(episodes), 4) if episodes else None,
        "reward_min": round(min(rewards), 6) if rewards else None,
        "reward_max": round(max(rewards), 6) if rewards else None,
    }


def _replay(env_id: str, report: Report, *, seed: int, steps: int = 60) -> None:
    """Save the state mid-episode, continue; restore into a fresh env and
    take the same actions: the steps must be identical."""
    import json

    import gymnasium as gym

    # A designed env: its own methods (action_masks, get_state) are used.
    env: Any = gym.make(env_id).unwrapped
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
    state = json.loads(json.dumps(env.get_state()))
    actions = [int(a) for a in rng.integers(env.action_space.n, size=steps)]

    def play(e: Any) -> list[Any]:
        rec = []
        for a in actions:
            obs, r, term, trunc, info = e.step(a)
            rec.append((obs, r, term, trunc, info["reward_breakdown"]))
            if term or trunc:
                e.reset()
        return rec

    original = play(env)
    fresh: Any = gym.make(env_id).unwrapped
    fresh.reset(seed=seed + 99)
    fresh.set_state(state)
    if not _same(original, play(fresh)):
        report.problems.append(
            Problem(
                "error",
                "",
                "Restoring a saved state and repeating the actions gave "
                "different steps.",
                "replay",
            )
        )
