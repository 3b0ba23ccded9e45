"""A curriculum for SB3 runs: an SB3 callback moving a designed env through
stages of difficulty (:mod:`engine.envs.curriculum`).

The trainer's evaluation hands each evaluation's successes to
:meth:`CurriculumCallback.on_eval` (evaluation happens at the current
stage); when the schedule moves, every training and evaluation env copy
plays the new stage from its next episode (``env_method("set_difficulty")``).
The stage is logged as ``curriculum/stage`` at every rollout's end and with
every evaluation (with ``curriculum/success_rate``), and saved in
checkpoints, so a resumed run continues where it stood.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.envs.curriculum import RATE_METRIC, STAGE_METRIC, Schedule, check_for_env


def check_for_env_id(
    value: Any, env_id: str, env_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The ``curriculum`` setting of an ``rl.train`` run on ``env_id``
    (:func:`engine.envs.curriculum.check_for_env` on one instance)."""
    import gymnasium as gym

    env = gym.make(env_id, **env_kwargs)
    try:
        return check_for_env(value, env, env_id)
    finally:
        env.close()


_classes: dict[str, type] = {}


def curriculum_callback_class() -> type:
    """:class:`CurriculumCallback` (SB3 imported on first use)."""
    if "callback" not in _classes:
        from stable_baselines3.common.callbacks import BaseCallback

        class CurriculumCallback(BaseCallback):
            """Moves the run's envs through the curriculum's stages."""

            def __init__(
                self,
                schedule: Schedule,
                envs: list[Any],
                log: Callable[[str], None],
            ) -> None:
                super().__init__(verbose=0)
                self.schedule = schedule
                self.envs = envs
                self.log = log

            def apply(self) -> None:
                """Every env copy plays the schedule's stage from now on."""
                for env in self.envs:
                    env.env_method("set_difficulty", self.schedule.difficulty)

            def on_eval(self, successes: list[bool], step: int) -> dict[str, float]:
                """Feed the successes of the evaluation at ``step``; the metrics
                to log with it."""
                before = self.schedule.stage
                new = self.schedule.record(successes)
                rate = self.schedule.last_rate
                if new is not None:
                    self.apply()
                    way = "advanced" if new > before else "went back"
                    self.log(
                        f"curriculum {way} to stage {new} of "
                        f"{len(self.schedule.stages) - 1} at step {step}"
                    )
                out = {STAGE_METRIC: float(self.schedule.stage)}
                if rate is not None:
                    out[RATE_METRIC] = float(rate)
                return out

            def _on_rollout_end(self) -> None:
                self.logger.record(STAGE_METRIC, float(self.schedule.stage))

            def _on_step(self) -> bool:
                return True

        _classes["callback"] = CurriculumCallback
    return _classes["callback"]
