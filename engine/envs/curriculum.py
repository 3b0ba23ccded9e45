"""Difficulty of designed envs, and a curriculum schedule over it.

A designed env takes a *difficulty*: settings that make it easier or harder
without changing its spaces (a policy trained on one stage acts on the next):

* ``workflow`` (:class:`WorkflowDifficulty`): which tasks are sampled, by
  their difficulty (the fewest steps from the task's start status to its
  goal), the step limit, and transition noise (a valid tool fails and leaves
  the status as it was);
* ``grid`` (:class:`GridDifficulty`): the size of the playable area around
  the goal, the slip probability, traps on or off, the step limit.

A *curriculum* (:class:`CurriculumConfig`) is a list of stages, each a
difficulty, easiest first. :class:`Schedule` moves through them: it advances
when the success rate of the last ``window`` evaluation episodes at the
current stage reaches ``threshold``, and (with ``back_threshold``) steps back
when it falls below that, never more than one stage below the highest stage
reached. SB3 runs follow it in a callback (:mod:`engine.rl.curriculum`),
language-model rollouts between batches of episodes
(:mod:`engine.llm.rollouts`); both log the stage as ``curriculum/stage``.

Stdlib only (the settings are read by forms and validation).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError, quoted
from engine.settings import check_fields, fields_of, load, setting

STAGE_METRIC = "curriculum/stage"
EPISODE_STEPS_MAX = 10_000_000
"""The most steps an episode may be cut at (and a task's difficulty)."""
WINDOW_MAX = 100_000
"""The most evaluation episodes a curriculum's window may span."""
STAGES_MAX = 1000
"""The most stages a curriculum may have."""
RATE_METRIC = "curriculum/success_rate"


@dataclass(frozen=True)
class WorkflowDifficulty:
    """Difficulty settings of a ``workflow`` env (None: as designed)."""

    max_task_difficulty: int | None = setting(
        None, min=0, max=EPISODE_STEPS_MAX, unit="steps"
    )
    """Tasks whose goal is more than this many steps from their start status
    are sampled with ``harder_task_weight`` (None: every task alike)."""
    harder_task_weight: float = setting(0.0, min=0, max=1)
    """Sampling weight of the tasks above ``max_task_difficulty``, relative
    to 1 for the others (0: never sampled)."""
    max_steps: int | None = setting(None, min=1, max=EPISODE_STEPS_MAX, unit="steps")
    """Steps before an episode is cut (None: the spec's)."""
    transition_noise: float = setting(0.0, min=0, max=1, exclusive_max=True)
    """Probability that a valid tool fails and leaves the status unchanged."""


@dataclass(frozen=True)
class GridDifficulty:
    """Difficulty settings of a ``grid`` env (None: as designed)."""

    size: list[int] | None = setting(None, min=1, max=10_000, unit="cells")
    """``[rows, cols]`` of the playable area, placed around the goal nearest
    the start (cells outside are walls; the start moves inside, to the
    reachable cell nearest its own). None: the whole grid."""
    slip: float | None = setting(None, min=0, max=1)
    """Probability that a move goes sideways (None: the spec's)."""
    traps: bool = setting(True)
    """Keep the spec's traps (False: the trap cells are floor)."""
    max_steps: int | None = setting(None, min=1, max=EPISODE_STEPS_MAX, unit="steps")
    """Steps before an episode is cut (None: the spec's)."""


DIFFICULTY: dict[str, type] = {"workflow": WorkflowDifficulty, "grid": GridDifficulty}
"""The difficulty settings of each designed env kind that has them."""


def check_difficulty(kind: str, params: Any, path: str) -> dict[str, Any]:
    """``params`` checked against the kind's difficulty settings (unknown
    keys refused), with defaults filled; a ConfigError naming ``path.key``."""
    cls = DIFFICULTY.get(kind)
    if cls is None:
        raise ConfigError(
            path,
            f"A {kind} env has no difficulty settings; a curriculum needs a "
            "designed workflow or grid env.",
        )
    if not isinstance(params, dict):
        raise ConfigError(path, f"{path} must be an object of difficulty settings.")
    known = fields_of(cls)
    for key in params:
        if key not in known:
            raise ConfigError(
                f"{path}.{key}",
                f"{quoted(key)} is not a difficulty setting of a {kind} env; it has "
                f"{', '.join(known)}.",
            )
    out = {name: info.default for name, info in known.items()}
    out.update(check_fields(cls, params, prefix=f"{path}."))
    if kind == "grid" and out["size"] is not None and len(out["size"]) != 2:
        raise ConfigError(f"{path}.size", "size must be [rows, cols].")
    return out


@dataclass(frozen=True)
class CurriculumConfig:
    """A curriculum: stages of difficulty, easiest first, and when to move."""

    stages: list[dict[str, Any]] = setting(factory=list, form=False)
    """Difficulty settings of each stage, one object per stage with the
    settings of the env's kind; the last is usually the env as designed
    (``{}``)."""
    threshold: float = setting(0.8, min=0, max=1, label="Advance at")
    """Success rate over the window that moves to the next stage."""
    window: int = setting(20, min=1, max=WINDOW_MAX, unit="episodes")
    """Evaluation episodes at the current stage the success rate is taken
    over (a new stage starts with an empty window)."""
    back_threshold: float | None = setting(None, min=0, max=1, label="Go back below")
    """Success rate below which the schedule goes back a stage (never more
    than one stage below the highest reached); None: never back."""
    start_stage: int = setting(0, min=0, max=STAGES_MAX - 1)
    """The stage to begin with."""


def check_curriculum(value: Any, kind: str, path: str = "curriculum") -> dict[str, Any]:
    """A curriculum config checked for an env of ``kind``: defaults filled,
    every stage checked and filled; a ConfigError in one sentence naming the
    field otherwise."""
    if not isinstance(value, dict):
        raise ConfigError(path, "curriculum must be an object with a list of stages.")
    unknown = [k for k in value if k not in fields_of(CurriculumConfig)]
    if unknown:
        raise ConfigError(
            f"{path}.{unknown[0]}",
            f"{quoted(unknown[0])} is not a curriculum setting; it has "
            f"{', '.join(fields_of(CurriculumConfig))}.",
        )
    out = {name: info.default for name, info in fields_of(CurriculumConfig).items()}
    out.update(check_fields(CurriculumConfig, value, prefix=f"{path}."))
    stages = out["stages"]
    if not isinstance(stages, list) or not stages:
        raise ConfigError(
            f"{path}.stages",
            "The curriculum's stage range is empty; give at least one stage "
            "(its difficulty settings, {} for the env as designed).",
        )
    if len(stages) > STAGES_MAX:
        raise ConfigError(
            f"{path}.stages",
            f"A curriculum may have at most {STAGES_MAX} stages, not {len(stages)}.",
        )
    out["stages"] = [
        check_difficulty(kind, stage, f"{path}.stages[{i}]")
        for i, stage in enumerate(stages)
    ]
    if out["start_stage"] >= len(stages):
        raise ConfigError(
            f"{path}.start_stage",
            f"start_stage is {out['start_stage']}, but the stages are numbered 0 to "
            f"{len(stages) - 1}.",
        )
    back = out["back_threshold"]
    if back is not None and back >= out["threshold"]:
        raise ConfigError(
            f"{path}.back_threshold",
            f"back_threshold ({back:g}) must be below threshold "
            f"({out['threshold']:g}), or every stage would be left both ways.",
        )
    return out


def check_for_env(value: Any, env: Any, name: str) -> dict[str, Any]:
    """A curriculum checked for the env instance ``env`` (called ``name``):
    its kind's settings, then each stage applied to it once (a stage no
    task fits, an area with no start); ConfigError in one sentence
    otherwise."""
    inner = env.unwrapped
    spec = getattr(inner, "spec_doc", None)
    if spec is None or not hasattr(inner, "set_difficulty"):
        raise ConfigError(
            "curriculum",
            f"{name} has no difficulty settings; a curriculum needs a designed "
            "workflow or grid env.",
        )
    out = check_curriculum(value, spec.kind)
    for i, stage in enumerate(out["stages"]):
        try:
            inner.set_difficulty(stage)
        except ConfigError as exc:
            raise ConfigError(f"curriculum.stages[{i}].{exc.field}", str(exc)) from None
    inner.set_difficulty(None)
    return out


class Schedule:
    """Where a curriculum stands, fed the successes of evaluation episodes.

    ``record`` returns the new stage when it changes, else None. Its state
    (``state`` / ``restore``) is plain JSON, kept in checkpoints.
    """

    def __init__(self, config: CurriculumConfig | Mapping[str, Any]) -> None:
        if not isinstance(config, CurriculumConfig):
            # A checked curriculum as JSON (an llm.collect run keeps it so).
            config = load(CurriculumConfig, config)
        self.config = config
        self.stages: list[dict[str, Any]] = config.stages
        self.stage: int = config.start_stage
        self.highest = self.stage
        self.window: deque[bool] = deque(maxlen=config.window)
        self.last_rate: float | None = None
        """The window's success rate when last recorded into."""

    @property
    def last(self) -> bool:
        return self.stage == len(self.stages) - 1

    @property
    def difficulty(self) -> dict[str, Any]:
        return self.stages[self.stage]

    def success_rate(self) -> float | None:
        if not self.window:
            return None
        return sum(self.window) / len(self.window)

    def record(self, successes: list[bool]) -> int | None:
        """Add evaluation episodes at the current stage; the new stage if it
        changes (a change empties the window)."""
        self.window.extend(bool(s) for s in successes)
        rate = self.last_rate = self.success_rate()
        if rate is None or len(self.window) < self.config.window:
            return None
        new = self.stage
        if rate >= self.config.threshold and not self.last:
            new = self.stage + 1
        back = self.config.back_threshold
        if back is not None and rate < back and self.stage > max(0, self.highest - 1):
            new = self.stage - 1
        if new == self.stage:
            return None
        self.stage = new
        self.highest = max(self.highest, new)
        self.window.clear()
        return new

    def state(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "highest": self.highest,
            "window": [bool(s) for s in self.window],
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.stage = min(int(state.get("stage", self.stage)), len(self.stages) - 1)
        self.highest = max(self.stage, int(state.get("highest", self.stage)))
        self.window.clear()
        self.window.extend(bool(s) for s in state.get("window", []))
