"""The health monitor's rules on log rows as transformers and TRL log them,
and its callback's word to the trainer (engine.llm.health). No model: the
runs that show the same on a real tiny model are in test_llm_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from engine.llm.health import (
    EARLY_FRACTION,
    EarlyStop,
    HealthMonitor,
    all_zero,
    health_callback,
)
from engine.llm.train import eval_metric, studio_metric_keys


def sft_row(step: int) -> dict[str, Any]:
    """A healthy SFT log row, as transformers 5 logs it."""
    return {
        "loss": 2.5 - 0.01 * step,
        "grad_norm": 1.3,
        "learning_rate": 5e-5 * (1 - step / 100),
        "entropy": 3.1,
        "num_tokens": 100.0 * step,
        "mean_token_accuracy": 0.2,
        "epoch": step / 50,
    }


def grpo_row(frac_zero_std: float) -> dict[str, Any]:
    """A GRPO log row (TRL 1.x keys)."""
    return {
        "loss": 0.0,
        "grad_norm": 0.0 if frac_zero_std == 1.0 else 0.4,
        "learning_rate": 5e-5,
        "reward": 0.0,
        "reward_std": 0.0,
        "frac_reward_zero_std": frac_zero_std,
        "kl": 0.0,
        "completions/mean_length": 4.0,
    }


def test_a_healthy_run_says_nothing() -> None:
    monitor = HealthMonitor(total_steps=100)
    for step in range(1, 101):
        assert monitor.observe(step, sft_row(step)) == []
    # an evaluation row and the trainer's closing row change nothing
    assert monitor.observe(100, {"eval_loss": 2.4, "eval_runtime": 0.3}) == []
    assert monitor.observe(100, {"train_loss": 2.0, "train_runtime": 9.0}) == []
    assert monitor.finish(adapter_unchanged=False) == []
    assert monitor.warnings == [] and monitor.fatal is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nan_loss_is_fatal_at_once(bad: float) -> None:
    monitor = HealthMonitor(total_steps=100)
    monitor.observe(1, sft_row(1))
    (said,) = monitor.observe(2, {**sft_row(2), "loss": bad})
    assert monitor.fatal == said and said.startswith("Training stopped at step 2")
    assert "\n" not in said and ";" in said and said.endswith(".")
    # said once, however long the trainer goes on logging
    assert monitor.observe(3, {**sft_row(3), "loss": bad}) == []
    assert monitor.warnings == [said]


def test_a_nan_gradient_is_fatal() -> None:
    monitor = HealthMonitor(total_steps=10)
    monitor.observe(1, {**sft_row(1), "grad_norm": float("nan")})
    assert monitor.fatal is not None and "gradient norm became nan" in monitor.fatal


def test_an_exploding_loss_is_fatal() -> None:
    monitor = HealthMonitor(total_steps=100)
    monitor.observe(1, {**sft_row(1), "loss": 2.0})
    monitor.observe(2, {**sft_row(2), "loss": 150.0})  # 75x: not yet
    assert monitor.fatal is None
    monitor.observe(3, {**sft_row(3), "loss": 250.0})
    assert monitor.fatal is not None and "exploded to 250" in monitor.fatal


def test_a_near_zero_first_loss_does_not_make_every_loss_explode() -> None:
    # GRPO starts at a loss of about 0: the limit is 100 x 1.0, not x 0.
    monitor = HealthMonitor(total_steps=100)
    for step, loss in enumerate([0.0, 0.02, -0.5, 3.0], start=1):
        monitor.observe(step, {**grpo_row(0.5), "loss": loss})
    assert monitor.fatal is None


@pytest.mark.parametrize("total_steps", [10, 100, 1000, 100_000])
def test_rewards_that_never_vary_are_flagged_within_the_first_tenth(
    total_steps: int,
) -> None:
    monitor = HealthMonitor(total_steps=total_steps)
    flagged = None
    for step in range(1, total_steps + 1):
        if any("scored the same" in s for s in monitor.observe(step, grpo_row(1.0))):
            flagged = step
            break
    assert flagged is not None
    assert flagged <= max(1, EARLY_FRACTION * total_steps)
    assert any("gradient norm was 0" in w for w in monitor.warnings)


def test_a_window_of_stuck_groups_is_needed_and_a_varied_one_resets_it() -> None:
    monitor = HealthMonitor(total_steps=1000)  # window: 5 logs
    rows = [1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0]
    for step, frac in enumerate(rows, start=1):
        monitor.observe(step, grpo_row(frac))
    assert monitor.warnings == []
    monitor.observe(10, grpo_row(1.0))
    assert any("steps 6-10" in w for w in monitor.warnings)


def test_the_window_counts_logs_not_steps() -> None:
    # logging every 10 steps of 1000: the first tenth holds 10 logs
    assert HealthMonitor(total_steps=1000, logging_steps=10).window == 5
    assert HealthMonitor(total_steps=1000, logging_steps=50).window == 2
    assert HealthMonitor(total_steps=-1).window == 1


def test_a_learning_rate_that_never_left_zero() -> None:
    monitor = HealthMonitor(total_steps=3)
    for step in (1, 2, 3):
        monitor.observe(step, {**sft_row(step), "learning_rate": 0.0})
    (said,) = monitor.finish(adapter_unchanged=False)
    assert "learning rate never left 0" in said
    moved = HealthMonitor(total_steps=2)
    moved.observe(1, sft_row(1))
    moved.observe(2, {**sft_row(2), "learning_rate": 0.0})  # decayed to 0
    assert moved.finish(adapter_unchanged=False) == []


def test_an_adapter_unchanged_at_the_end() -> None:
    import torch

    assert all_zero([torch.zeros(4, 2), torch.zeros(3)]) is True
    assert all_zero([torch.zeros(4, 2), torch.tensor([0.0, 1e-9])]) is False
    assert all_zero([]) is None
    monitor = HealthMonitor(total_steps=5)
    (said,) = monitor.finish(adapter_unchanged=True)
    assert said.startswith("Completed, nothing learned")
    assert HealthMonitor(total_steps=5).finish(adapter_unchanged=None) == []


def test_early_stop_counts_evaluations_without_a_better_score() -> None:
    lower = EarlyStop(patience=2, higher_is_better=False)
    assert [lower.observe(v) for v in (2.0, 1.5, 1.6, 1.4, 1.5, 1.45)] == [
        False,
        False,
        False,
        False,
        False,
        True,
    ]
    assert lower.best == 1.4
    higher = EarlyStop(patience=1, higher_is_better=True)
    assert [higher.observe(v) for v in (0.1, 0.3, 0.2)] == [False, False, True]
    never = EarlyStop(patience=0, higher_is_better=False)
    assert not any(never.observe(v) for v in (1.0, 2.0, 3.0, 4.0))


def test_each_method_validates_on_its_score() -> None:
    assert eval_metric("grpo") == ("eval_reward", True)
    assert all(eval_metric(m) == ("eval_loss", False) for m in ("sft", "dpo", "kto"))
    # the scores reach the metric stream beside the training loss; an
    # evaluation's timing does not
    row = {
        "eval_loss": 1.2,
        "eval_reward": 0.3,
        "eval_runtime": 0.5,
        "eval_num_tokens": 900.0,
        "eval_completions/mean_length": 4.0,
    }
    assert studio_metric_keys(row, "sft") == {"eval/loss": 1.2, "eval/reward": 0.3}


class _State:
    def __init__(self, step: int, max_steps: int) -> None:
        self.global_step, self.max_steps = step, max_steps


class _Args:
    logging_steps = 1
    eval_strategy = "steps"
    eval_steps = 3


def test_the_callback_stops_training_within_the_logging_interval() -> None:
    from transformers import TrainerControl

    logged: list[str] = []
    monitor = HealthMonitor(total_steps=0)
    callback = health_callback(logged.append, monitor, None, "eval_loss")
    callback.on_train_begin(_Args(), _State(0, 50), TrainerControl())
    assert monitor.total_steps == 50
    control = TrainerControl()
    callback.on_log(_Args(), _State(1, 50), control, logs=sft_row(1))
    assert not control.should_training_stop
    control.should_save = control.should_evaluate = True  # the schedule's
    callback.on_log(_Args(), _State(2, 50), control, logs={"loss": float("nan")})
    assert control.should_training_stop
    # nothing of the broken weights is saved or scored
    assert not control.should_save and not control.should_evaluate
    assert logged == [f"health: {monitor.fatal}"]
    # no "nothing learned" verdict on top of the failure
    callback.on_train_end(_Args(), _State(2, 50), TrainerControl(), model=None)
    assert len(logged) == 1


def test_the_callback_scores_the_last_step_and_stops_early() -> None:
    from transformers import TrainerControl

    logged: list[str] = []
    callback = health_callback(
        logged.append, None, EarlyStop(1, higher_is_better=False), "eval_loss"
    )
    control = TrainerControl()
    callback.on_step_end(_Args(), _State(7, 8), control)
    assert not control.should_evaluate
    callback.on_step_end(_Args(), _State(8, 8), control)  # 8 % 3: off schedule
    assert control.should_evaluate
    control = TrainerControl()
    callback.on_evaluate(_Args(), _State(3, 8), control, metrics={"eval_loss": 1.0})
    callback.on_evaluate(_Args(), _State(6, 8), control, metrics={"eval_loss": 1.1})
    assert control.should_training_stop and control.should_save
    assert callback.early_stopped == logged[0]
    assert "eval_loss has not improved on 1 for 1 evaluation." in logged[0]
