"""Reward functions for GRPO, in TRL's ``reward_funcs`` signature.

Each is a callable object ``f(prompts, completions, **columns) -> list[float]``
with a ``__name__`` (TRL logs ``rewards/<name>/mean``) and a ``weight``
(passed to ``GRPOConfig.reward_weights``). Dataset columns arrive as keyword
lists: ``env``, ``env_state``, ``valid_tools``, ``expert_tool``, and for code
rewards ``tests`` (assertions appended to the program).

Code execution runs ``python -I`` confined by the operating system
(``engine.confine``: bubblewrap or unshare): its own network namespace, a
read-only file system but for a scratch folder, CPU/memory/file-size/process
limits and a wall-clock timeout; the whole process tree dies at the end.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from engine import confine
from engine.errors import ConfigError
from engine.llm.policy import format_ok, parse_tool


def completion_text(completion: Any) -> str:
    """The assistant text of a TRL completion (a string or a message list)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            str(m.get("content", "")) for m in completion if isinstance(m, dict)
        )
    return str(completion)


def _column(kwargs: dict[str, Any], name: str, n: int) -> list[Any]:
    value = kwargs.get(name)
    if value is None:
        return [None] * n
    return list(value)


@lru_cache(maxsize=16)
def _cached_env(ref: str) -> Any:
    from engine.llm.rollouts import make_env

    return make_env(ref)


def _tools_of(ref: str) -> list[str]:
    from engine.llm.policy import env_tools

    return env_tools(_cached_env(ref))


def replay(ref: str, state: dict[str, Any] | str, tool: str | None) -> dict[str, Any]:
    """Apply ``tool`` to the saved env state; reward, success, validity."""
    env = _cached_env(ref)
    u = env.unwrapped
    if isinstance(state, str):
        state = json.loads(state)
    u.set_state(state)
    tools = _tools_of(ref)
    if tool is None or tool not in tools:
        return {"reward": None, "success": False, "valid": False}
    # step the raw env: wrappers (order enforcing, checkers) hold no state
    # that set_state could restore.
    _, reward, _, _, info = u.step(tools.index(tool))
    return {
        "reward": float(reward),
        "success": bool(info.get("is_success", False)),
        "valid": bool(info.get("valid", True)),
    }


class RewardFunction:
    """Base: subclasses implement :meth:`score` for one completion."""

    name = "reward"
    needs_env = False
    """Whether it scores through the row's env and state (a dataset of
    prompts imported from a file has none: every answer would score alike)."""

    def __init__(self, weight: float = 1.0, **params: Any) -> None:
        self.weight = float(weight)
        self.params = params
        self.__name__ = self.name

    def __call__(
        self, prompts: list[Any], completions: list[Any], **kwargs: Any
    ) -> list[float]:
        n = len(completions)
        cols = {
            k: _column(kwargs, k, n)
            for k in ("env", "env_state", "valid_tools", "expert_tool", "tests")
        }
        return [
            float(self.score(completion_text(c), {k: v[i] for k, v in cols.items()}))
            for i, c in enumerate(completions)
        ]

    def score(self, text: str, row: dict[str, Any]) -> float:  # pragma: no cover
        raise NotImplementedError

    def _tools(self, row: dict[str, Any]) -> list[str]:
        if row.get("env"):
            return _tools_of(row["env"])
        return list(row.get("valid_tools") or [])


class EnvReward(RewardFunction):
    """The env's own reward for the completion's tool at the saved state;
    ``unparsed`` (default -1) when the completion names no tool."""

    name = "env_reward"
    needs_env = True

    def score(self, text: str, row: dict[str, Any]) -> float:
        if not row.get("env") or row.get("env_state") is None:
            return float(self.params.get("unparsed", -1.0))
        tool = parse_tool(text, self._tools(row))
        out = replay(row["env"], row["env_state"], tool)
        if out["reward"] is None:
            return float(self.params.get("unparsed", -1.0))
        return float(out["reward"])


class FormatReward(RewardFunction):
    """1 when the answer is only a tool (bare, ``tool: X`` or JSON), 0.5 when
    it names a tool among other words, 0 otherwise."""

    name = "format"

    def score(self, text: str, row: dict[str, Any]) -> float:
        tools = self._tools(row)
        if format_ok(text, tools):
            return 1.0
        return 0.5 if parse_tool(text, tools) is not None else 0.0


class ToolValidityReward(RewardFunction):
    """1 when the named tool is valid in the current status, else 0."""

    name = "tool_validity"

    def score(self, text: str, row: dict[str, Any]) -> float:
        tool = parse_tool(text, self._tools(row))
        if tool is None:
            return 0.0
        valid = row.get("valid_tools")
        if valid:
            return float(tool in valid)
        if row.get("env") and row.get("env_state") is not None:
            return float(replay(row["env"], row["env_state"], tool)["valid"])
        return 0.0


class TaskCompletionReward(RewardFunction):
    """1 when the tool reaches the task's goal from the saved state."""

    name = "task_completion"
    needs_env = True

    def score(self, text: str, row: dict[str, Any]) -> float:
        if not row.get("env") or row.get("env_state") is None:
            return 0.0
        tool = parse_tool(text, self._tools(row))
        return float(replay(row["env"], row["env_state"], tool)["success"])


class EfficiencyReward(RewardFunction):
    """1 for answers up to ``target_chars`` (default 32) characters, falling
    as ``target / length`` beyond."""

    name = "efficiency"

    def score(self, text: str, row: dict[str, Any]) -> float:
        target = float(self.params.get("target_chars", 32))
        n = len(text.strip())
        return 1.0 if n <= target else target / n


_CODE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str:
    """The first fenced code block, else the whole text."""
    m = _CODE_RE.search(text)
    return m.group(1) if m else text


class PythonSyntaxReward(RewardFunction):
    """1 when the (fenced or whole) code parses as Python."""

    name = "python_syntax"

    def score(self, text: str, row: dict[str, Any]) -> float:
        code = extract_code(text)
        if not code.strip():
            return 0.0
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            return 0.0
        return 1.0


def run_code(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
) -> dict[str, Any]:
    """Run ``code`` confined (``engine.confine``): no network, a read-only
    file system but for its scratch folder, CPU/memory/file/process limits,
    every process it started killed at the end.

    Returns ``ok`` (exit 0 in time), ``returncode``, ``timed_out``,
    ``stdout``, ``stderr`` (each cut to 2,000 characters) and ``confinement``
    (the method, None where the user allowed unconfined runs). Raises
    ``ConfinementUnavailable`` (one sentence) where nothing confines.
    """
    result = confine.run(
        [sys.executable, "-I", "-c", code],
        what="The code_execution reward",
        timeout_s=timeout_s,
        limits=confine.Limits(cpu_s=max(1, math.ceil(timeout_s)), memory_mb=memory_mb),
    )
    return {
        "ok": result.ok,
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "confinement": result.method,
    }


class CodeExecutionReward(RewardFunction):
    """1 when the code (plus the row's ``tests``) runs to exit 0 within
    ``timeout_s`` (default 5 s) and ``memory_mb`` (default 512 MB), else 0."""

    name = "code_execution"
    TIMEOUT_S = (0.1, 60.0)
    MEMORY_MB = (64, 8192)

    def __init__(self, weight: float = 1.0, **params: Any) -> None:
        super().__init__(weight, **params)
        self.timeout_s = self._number("timeout_s", 5.0, self.TIMEOUT_S)
        self.memory_mb = int(self._number("memory_mb", 512, self.MEMORY_MB))
        # Refuse at set-up, not at the first completion minutes into training.
        confine.require("The code_execution reward")

    def _number(self, key: str, default: float, bounds: tuple[float, float]) -> float:
        value = self.params.get(key, default)
        low, high = bounds
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise ConfigError(
                f"code_execution.{key}",
                f"{key} must be a number from {low:g} to {high:g}, not {value!r}.",
            )
        return float(value)

    def score(self, text: str, row: dict[str, Any]) -> float:
        code = extract_code(text)
        if not code.strip():
            return 0.0
        tests = row.get("tests") or ""
        result = run_code(
            code + "\n" + tests, timeout_s=self.timeout_s, memory_mb=self.memory_mb
        )
        return 1.0 if result["ok"] else 0.0


class JudgeReward(RewardFunction):
    """An LLM judge's relative score in [0, 1] of each completion among the
    others sampled for the same prompt, against the user's rubric
    (:mod:`engine.llm.judge`; settings: :class:`~engine.llm.judge.JudgeConfig`)."""

    name = "judge"

    def __init__(self, weight: float = 1.0, **params: Any) -> None:
        from engine.llm.judge import Judge, check_config

        super().__init__(weight, **params)
        self.judge = Judge(check_config(params))

    def __call__(
        self, prompts: list[Any], completions: list[Any], **kwargs: Any
    ) -> list[float]:
        from engine.llm.judge import message_text

        texts = [completion_text(c) for c in completions]
        groups: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(message_text(prompt), []).append(i)
        out = [0.0] * len(texts)
        for prompt, rows in groups.items():
            scores = self.judge.score_group(prompt, [texts[i] for i in rows])
            for i, score in zip(rows, scores, strict=True):
                out[i] = score
        return out


class LearnedReward(RewardFunction):
    """p(good) in [0, 1] of the completion under a reward model trained on
    manual labels (:mod:`engine.llm.reward_model`; setting: ``model``, its
    folder)."""

    name = "learned"

    def __init__(self, weight: float = 1.0, **params: Any) -> None:
        from engine.llm.reward_model import load_scorer

        super().__init__(weight, **params)
        model = params.get("model")
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                "model", "The learned reward needs model: a reward model folder."
            )
        self.scorer = load_scorer(model)  # loads weights on first use

    def __call__(
        self, prompts: list[Any], completions: list[Any], **kwargs: Any
    ) -> list[float]:
        from engine.llm.reward_model import TextScorer, step_text

        if not isinstance(self.scorer, TextScorer):
            raise ConfigError(
                "model", "A control reward model cannot score text; train a text one."
            )
        texts = [
            step_text(
                {"messages": p if isinstance(p, list) else [
                    {"role": "user", "content": str(p)}]},
                completion_text(c),
            )
            for p, c in zip(prompts, completions, strict=True)
        ]  # fmt: skip
        return self.scorer.probabilities(texts)


REWARDS: dict[str, type[RewardFunction]] = {
    cls.name: cls
    for cls in (
        EnvReward,
        FormatReward,
        ToolValidityReward,
        TaskCompletionReward,
        EfficiencyReward,
        PythonSyntaxReward,
        CodeExecutionReward,
        JudgeReward,
        LearnedReward,
    )
}

DEFAULT_REWARDS: list[dict[str, Any]] = [
    {"name": "env_reward", "weight": 1.0},
    {"name": "format", "weight": 0.2},
]


def build_rewards(
    specs: list[dict[str, Any]] | None, field_name: str = "rewards"
) -> list[RewardFunction]:
    """Reward objects from ``[{"name": ..., "weight": ..., **params}]``."""
    specs = DEFAULT_REWARDS if specs is None else specs
    if not isinstance(specs, list) or not specs:
        raise ConfigError(field_name, "rewards must be a non-empty list.")
    out = []
    for i, spec in enumerate(specs):
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, dict) or spec.get("name") not in REWARDS:
            known = ", ".join(REWARDS)
            got = spec.get("name") if isinstance(spec, dict) else spec
            raise ConfigError(
                f"{field_name}[{i}]", f"Unknown reward {got!r}; known: {known}."
            )
        params = {k: v for k, v in spec.items() if k not in ("name", "weight")}
        weight = spec.get("weight", 1.0)
        if not isinstance(weight, int | float):
            raise ConfigError(f"{field_name}[{i}].weight", "weight must be a number.")
        out.append(REWARDS[spec["name"]](weight=float(weight), **params))
    return out


def combined(rewards: list[RewardFunction]) -> Callable[..., list[float]]:
    """One weighted-sum reward function (for callers outside GRPO)."""

    def total(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        acc = [0.0] * len(completions)
        for r in rewards:
            for i, v in enumerate(r(prompts, completions, **kwargs)):
                acc[i] += r.weight * v
        return acc

    total.__name__ = "combined"
    return total
