"""The health of a language-model training run, watched as it trains.

:class:`HealthMonitor` reads the log rows transformers and TRL log (``loss``,
``grad_norm``, ``learning_rate``, GRPO's ``frac_reward_zero_std``) and says,
one sentence each, what makes a run untrustworthy:

- a NaN or exploding loss: the run stops and ends failed with the sentence;
- GRPO groups whose answers all scored the same over a window of logs
  (``frac_reward_zero_std`` 1.0: no advantage, so no gradient), flagged
  within the first :data:`EARLY_FRACTION` of the steps;
- a gradient norm of 0 over the same window;
- a learning rate that never left 0;
- an adapter that ended as it began (every LoRA B weight still zero: PEFT
  starts B at zero, so the adapter adds nothing): "completed, nothing
  learned".

:class:`EarlyStop` decides when the validation metric stopped improving.
Both are pure logic on numbers, testable without a model;
:func:`health_callback` wires them into a ``transformers.TrainerCallback``
(imported inside it, as every heavy import in the engine is).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

EXPLODE_FACTOR = 100.0
"""A loss whose magnitude passes this many times the first logged loss's
(or 1.0, whichever is larger: GRPO's first loss is about 0) has exploded."""
EARLY_FRACTION = 0.1
"""The share of the steps within which a run that cannot learn is flagged."""
WINDOW_MAX_LOGS = 5
"""The most consecutive logs a stuck signal must last before it is flagged
(fewer when the first :data:`EARLY_FRACTION` of the steps holds fewer logs;
at least one)."""


def _number(logs: Mapping[str, Any], key: str) -> float | None:
    value = logs.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _steps(first: int, last: int) -> str:
    return f"step {last}" if first == last else f"steps {first}-{last}"


@dataclass
class HealthMonitor:
    """Watches one run's log rows; :attr:`warnings` holds every sentence
    said, :attr:`fatal` the one that stops the run (None while healthy)."""

    total_steps: int
    """Optimizer steps the run will take (its windows depend on them)."""
    logging_steps: int = 1
    warnings: list[str] = field(default_factory=list)
    fatal: str | None = None
    first_loss: float | None = None
    lr_left_zero: bool = False
    saw_lr: bool = False
    _zero_std: list[int] = field(default_factory=list)  # steps of the streak
    _zero_grad: list[int] = field(default_factory=list)
    _said: set[str] = field(default_factory=set)

    @property
    def window(self) -> int:
        """Consecutive logs a stuck signal must last to be flagged: those of
        the first :data:`EARLY_FRACTION` of the steps, 1 to
        :data:`WINDOW_MAX_LOGS`."""
        early_logs = int(
            EARLY_FRACTION * max(self.total_steps, 0) / max(self.logging_steps, 1)
        )
        return max(1, min(WINDOW_MAX_LOGS, early_logs))

    def observe(self, step: int, logs: Mapping[str, Any]) -> list[str]:
        """Reads one training log row (evaluation rows carry no ``loss`` and
        change nothing); returns the sentences it newly says."""
        said: list[str] = []
        loss = _number(logs, "loss")
        grad = _number(logs, "grad_norm")
        if self.fatal is None:
            self._check_loss(step, loss, grad, said)
        lr = _number(logs, "learning_rate")
        if lr is not None:
            self.saw_lr = True
            self.lr_left_zero = self.lr_left_zero or lr != 0.0
        zero_std = _number(logs, "frac_reward_zero_std")
        if zero_std is not None:
            self._streak(self._zero_std, step, zero_std >= 1.0)
            if len(self._zero_std) >= self.window:
                self._say(
                    "zero_std",
                    f"Every GRPO group's answers scored the same over "
                    f"{_steps(self._zero_std[0], step)} (frac_zero_std 1.0), "
                    "so the rewards give no advantage and the adapter learns "
                    "nothing; make the rewards tell answers apart, or raise "
                    "temperature or num_generations.",
                    said,
                )
        if grad is not None and math.isfinite(grad):
            self._streak(self._zero_grad, step, grad == 0.0)
            if len(self._zero_grad) >= self.window:
                self._say(
                    "zero_grad",
                    f"The gradient norm was 0 over "
                    f"{_steps(self._zero_grad[0], step)}, so no weight moved; "
                    "check that the loss depends on the adapter (rewards "
                    "that vary, rows that fit max_length).",
                    said,
                )
        return said

    def finish(self, adapter_unchanged: bool | None) -> list[str]:
        """The checks made when training ends; ``adapter_unchanged`` is None
        when there is no adapter to look at (a failed or stopped run)."""
        said: list[str] = []
        if self.saw_lr and not self.lr_left_zero:
            self._say(
                "lr_zero",
                "The learning rate never left 0, so no weight moved; raise "
                "learning_rate or the steps past warmup.",
                said,
            )
        if adapter_unchanged:
            self._say(
                "unchanged",
                "Completed, nothing learned: every LoRA B weight of the "
                "adapter is still zero, so the adapter changes nothing; see "
                "the warnings above.",
                said,
            )
        return said

    def _check_loss(
        self, step: int, loss: float | None, grad: float | None, said: list[str]
    ) -> None:
        bad = [v for v in (loss, grad) if v is not None and not math.isfinite(v)]
        if bad:
            what = (
                "loss"
                if loss is not None and not math.isfinite(loss)
                else "gradient norm"
            )
            self.fatal = (
                f"Training stopped at step {step}: the {what} became {bad[0]} "
                "(the weights are no longer numbers); lower learning_rate, or "
                "train in fp32 or bf16 rather than fp16."
            )
        elif loss is not None:
            if self.first_loss is None:
                self.first_loss = loss
            limit = EXPLODE_FACTOR * max(abs(self.first_loss), 1.0)
            if abs(loss) > limit:
                self.fatal = (
                    f"Training stopped at step {step}: the loss exploded to "
                    f"{loss:.4g}, over {EXPLODE_FACTOR:g} times its first "
                    f"value {self.first_loss:.4g}; lower learning_rate or "
                    "raise warmup_ratio."
                )
        if self.fatal is not None:
            self._say("fatal", self.fatal, said)

    @staticmethod
    def _streak(steps: list[int], step: int, stuck: bool) -> None:
        if stuck:
            steps.append(step)
        else:
            steps.clear()

    def _say(self, rule: str, sentence: str, said: list[str]) -> None:
        # Each rule speaks once a run: a stuck signal stays stuck.
        if rule not in self._said:
            self._said.add(rule)
            self.warnings.append(sentence)
            said.append(sentence)


@dataclass
class EarlyStop:
    """Stops training when the validation metric has not improved for
    ``patience`` evaluations in a row (0: never)."""

    patience: int
    higher_is_better: bool
    best: float | None = None
    since_best: int = 0

    def observe(self, value: float) -> bool:
        """Records one evaluation; True when training should stop."""
        if not math.isfinite(value):
            return False
        better = self.best is None or (
            value > self.best if self.higher_is_better else value < self.best
        )
        if better:
            self.best, self.since_best = value, 0
        else:
            self.since_best += 1
        return self.patience > 0 and self.since_best >= self.patience


def all_zero(tensors: Iterable[Any]) -> bool | None:
    """Whether every tensor is all zeros (None when there are none)."""
    seen = False
    for tensor in tensors:
        seen = True
        if bool(tensor.detach().any()):
            return False
    return True if seen else None


def lora_b_weights(model: Any) -> list[Any]:
    """The LoRA B matrices of a PEFT model (PEFT names them ``lora_B``)."""
    return [p for name, p in model.named_parameters() if "lora_B" in name]


def health_callback(
    log: Callable[[str], None],
    monitor: HealthMonitor | None,
    early: EarlyStop | None,
    eval_key: str,
) -> Any:
    """A TrainerCallback that feeds ``monitor`` the training logs (writing
    each sentence with ``log``; a fatal one stops training at once, without a
    checkpoint of the broken weights), asks for an evaluation at the last
    step when the trainer validates on a schedule, and stops on ``early``'s
    word, read from the evaluation's ``eval_key`` metric. Its
    ``early_stopped`` is the sentence saying why it stopped early (None
    when it did not)."""
    from transformers import TrainerCallback

    class HealthCallback(TrainerCallback):
        def __init__(self) -> None:
            self.monitor = monitor
            self.early_stopped: str | None = None

        def on_train_begin(
            self, args: Any, state: Any, control: Any, **kw: Any
        ) -> None:
            if monitor is not None:
                monitor.total_steps = int(state.max_steps)
                monitor.logging_steps = int(args.logging_steps)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any
        ) -> Any:
            if monitor is None or not logs:
                return control
            for sentence in monitor.observe(int(state.global_step), logs):
                log(f"health: {sentence}")
            if monitor.fatal is not None:
                control.should_training_stop = True
                control.should_save = False
                control.should_evaluate = False
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            every = int(args.eval_steps or 0) if args.eval_strategy != "no" else 0
            last = state.global_step >= state.max_steps
            if every and last and state.global_step % every:
                # The schedule may skip the last step; its score is the one
                # the run ends with.
                control.should_evaluate = True
            return control

        def on_evaluate(
            self, args: Any, state: Any, control: Any, metrics: Any = None, **kw: Any
        ) -> Any:
            value = _number(metrics or {}, eval_key)
            if early is None or value is None or not early.observe(value):
                return control
            self.early_stopped = (
                f"Stopped early at step {state.global_step}: {eval_key} has not "
                f"improved on {early.best:.4g} for {early.patience} "
                f"evaluation{'s' if early.patience != 1 else ''}."
            )
            log(self.early_stopped)
            control.should_training_stop = True
            control.should_save = True
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if monitor is None or monitor.fatal is not None or not state.global_step:
                return
            model = kw.get("model")
            unchanged = all_zero(lora_b_weights(model)) if model is not None else None
            for sentence in monitor.finish(unchanged):
                log(f"health: {sentence}")

    return HealthCallback()
