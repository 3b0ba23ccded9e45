"""LivePlotPanel and RunProgressBar, driven through their public API and signals."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import csv
from pathlib import Path

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from studio.state.metric_store import MetricStore
from studio.training.metric_vocabulary import TRAINING_METRICS, group_of
from widgets.live_plot import (
    OTHER_GROUP,
    LivePlotPanel,
    ema_smooth,
    group_for_key,
    metric_name,
)
from widgets.plot_group import SERIES_COLORS
from widgets.run_progress import RunProgressBar, format_eta, format_progress

PPO_KEYS = [
    "rollout/ep_rew_mean",
    "rollout/ep_len_mean",
    "eval/mean_reward",
    "train/value_loss",
    "train/policy_gradient_loss",
    "train/entropy_loss",
    "train/approx_kl",
    "train/learning_rate",
    "time/fps",
    "time/iterations",
]


def fill(
    store: MetricStore, run_id: str, keys: list[str], n: int, seed: int = 0
) -> None:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1, dtype=float) * 100
    for key in keys:
        store.append_arrays(
            run_id, key, steps, steps / 50.0, rng.normal(size=n).cumsum()
        )


@pytest.fixture
def store() -> MetricStore:
    return MetricStore()


@pytest.fixture
def panel(qtbot, store: MetricStore) -> LivePlotPanel:
    widget = LivePlotPanel(vocabulary=TRAINING_METRICS, columns=2)
    qtbot.addWidget(widget)
    widget.set_source(store.series)
    store.add_keys_listener(widget.add_keys)
    store.add_append_listener(widget.mark_dirty)
    widget.resize(1000, 800)
    widget.show()
    return widget


def test_group_rules_are_data_with_exact_keys_beating_globs() -> None:
    assert group_of("rollout/ep_rew_mean") == "Rewards"
    assert group_of("eval/mean_reward") == "Rewards"
    assert group_of("train/value_loss") == "Losses"
    assert group_of("train/entropy_loss") == "Policy"  # exact beats train/*loss*
    assert group_of("rollout/exploration_rate") == "Exploration"
    assert group_of("custom/thing") == OTHER_GROUP
    assert group_of("time/iterations") is None
    assert group_for_key("x/y", rules=[("Mine", ("x/*",))], ignored=()) == "Mine"
    assert [t for t, _ in TRAINING_METRICS.groups][:4] == [
        "Rewards",
        "Reward std",
        "Episode length",
        "Losses",
    ]
    # Every group has its y axis title.
    assert {t for t, _ in TRAINING_METRICS.groups} == set(TRAINING_METRICS.axes)


# The keys TRL's GRPOTrainer logs (trl/trainer/grpo_trainer.py, transformers'
# Trainer for loss / grad_norm / learning_rate / epoch) with two reward
# functions, as the flow's llm.train node "train" records them.
GRPO_LOGS = {
    "loss": 0.01,
    "grad_norm": 0.5,
    "learning_rate": 1e-5,
    "num_tokens": 1000.0,
    "completions/mean_length": 40.0,
    "completions/min_length": 12.0,
    "completions/max_length": 64.0,
    "completions/clipped_ratio": 0.25,
    "completions/mean_terminated_length": 30.0,
    "completions/min_terminated_length": 12.0,
    "completions/max_terminated_length": 60.0,
    "rewards/env_reward/mean": 0.5,
    "rewards/env_reward/std": 0.2,
    "rewards/format/mean": 1.0,
    "rewards/format/std": 0.0,
    "reward": 1.5,
    "reward_std": 0.3,
    "frac_reward_zero_std": 0.5,
    "kl": 0.002,
    "entropy": 1.2,
    "clip_ratio/low_mean": 0.0,
    "clip_ratio/low_min": 0.0,
    "clip_ratio/high_mean": 0.0,
    "clip_ratio/high_max": 0.0,
    "clip_ratio/region_mean": 0.0,
    "epoch": 0.5,
}


def flow_grpo_keys() -> list[str]:
    """The flow run's keys: the engine's own TRL renaming, then the node
    prefix (engine.nodes.base.NodeContext.metrics)."""
    from engine.llm.train import studio_metric_keys

    keys = [f"train/{k}" for k in studio_metric_keys(GRPO_LOGS, "grpo")]
    keys += ["train/train/tokens_per_s"]  # the callback's own
    keys += [f"collect/rollout/{k}" for k in ("ep_rew", "ep_len", "success")]
    keys += ["collect/rollout/unparsed_rate", "collect/rollout/invalid_rate"]
    return keys


def test_a_flow_runs_grpo_metrics_land_in_named_groups() -> None:
    groups = {k: group_of(k) for k in flow_grpo_keys()}
    assert {k: g for k, g in groups.items() if g == OTHER_GROUP} == {}
    expect = {
        "train/reward/mean": "Rewards",
        "train/reward/env_reward_mean": "Rewards",
        "train/reward/format_mean": "Rewards",
        "train/reward/std": "Reward std",
        "train/reward/env_reward_std": "Reward std",
        "train/train/kl": "KL",
        "train/train/loss": "Losses",
        "train/completion/mean_length": "Completion length",
        "train/completion/max_terminated_length": "Completion length",
        "train/completion/clipped_ratio": "Clip ratio",
        "train/grpo/clip_ratio_low_mean": "Clip ratio",
        "train/train/learning_rate": "Learning rate",
        "train/train/grad_norm": "Gradient norm",
        "train/train/entropy": "Policy",
        "train/train/tokens_per_s": "Generation speed",
        "train/train/epoch": None,  # bookkeeping
        "train/train/num_tokens": None,
        # a collection's episodes: charts of their own, x in episodes
        "collect/rollout/ep_rew": "Return by episode",
        "collect/rollout/ep_len": "Length by episode",
        "collect/rollout/invalid_rate": "Rates by episode",
        "collect/rollout/success": "Rates by episode",
    }
    assert {k: groups[k] for k in expect} == expect
    assert metric_name("train/reward/mean") == "reward/mean"
    assert metric_name("rollout/ep_rew_mean") == "rollout/ep_rew_mean"


def test_charts_have_axis_titles_with_units(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    keys = ["train/reward/mean", "train/train/kl", "train/completion/mean_length"]
    with qtbot.waitSignal(panel.visible_groups_changed, timeout=2000) as sig:
        fill(store, "flow-1", keys, 20)
    assert sig.args[0] == ["Rewards", "KL", "Completion length"]

    def titles(title: str) -> tuple[str, str]:
        item = panel.group_widget(title).plot.getPlotItem()
        return item.getAxis("left").labelText, item.getAxis("bottom").labelText

    assert titles("KL") == ("KL (nats)", "steps")
    assert titles("Completion length") == ("tokens", "steps")
    panel.set_x_axis("time")
    assert titles("Rewards") == ("return", "wall time (s)")


def test_episodes_and_counts_get_axes_of_their_own(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """A collection's episodes are not training steps, and a stage or an
    episode's length is never 2.5 (issue 29, item 2)."""
    keys = ["collect/rollout/ep_len", "train/reward/mean", "curriculum/stage"]
    fill(store, "flow-1", keys, 4)
    qtbot.waitUntil(lambda: len(panel.group_titles()) == 3, timeout=5000)
    item = panel.group_widget("Length by episode").plot.getPlotItem()
    assert (item.getAxis("left").labelText, item.getAxis("bottom").labelText) == (
        "steps",
        "episodes",
    )
    rewards = panel.group_widget("Rewards").plot.getPlotItem()
    assert rewards.getAxis("bottom").labelText == "steps"
    for title, integer in (("Length by episode", True), ("Curriculum stage", True),
                           ("Rewards", False)):  # fmt: skip
        axis = panel.group_widget(title).plot.getPlotItem().getAxis("left")
        ticks = [v for _, values in axis.tickValues(0.0, 1.0, 300.0) for v in values]
        assert ticks and all(float(v).is_integer() for v in ticks) is integer
    panel.set_x_axis("time")
    assert item.getAxis("bottom").labelText == "wall time (s)"


def test_a_sweeps_trial_axis_counts_whole_trials(qtbot) -> None:
    import numpy as np

    from widgets.history_plot import HistoryPlot

    plot = HistoryPlot()
    qtbot.addWidget(plot)
    x = np.arange(1.0, 4.0)
    plot.set_history(x, np.array([3.0, 1.0, 2.0]), np.array([3.0, 1.0, 1.0]))
    axis = plot.plot.getPlotItem().getAxis("bottom")
    ticks = [v for _, values in axis.tickValues(1.0, 3.0, 300.0) for v in values]
    assert ticks == [1.0, 2.0, 3.0]
    assert axis.tickStrings(ticks, 1.0, 1.0) == ["1", "2", "3"]


def test_panel_shows_groups_for_the_keys_given_and_hides_empty_ones(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    assert panel.group_titles() == []
    shown: list[list[str]] = []
    panel.visible_groups_changed.connect(shown.append)
    fill(store, "run-a", ["rollout/ep_rew_mean", "train/value_loss", "my/custom"], 50)
    # Curves are built a few per redraw tick (within its time budget), so on
    # a busy machine the groups may show over more than one tick.
    qtbot.waitUntil(
        lambda: bool(shown) and shown[-1] == ["Rewards", "Losses", OTHER_GROUP],
        timeout=5000,
    )
    for title in ("Rewards", "Losses", OTHER_GROUP):
        assert panel.group_widget(title).isVisible()
    # Keys declared without data do not show a group.
    panel.add_keys("run-a", ["time/fps"])
    panel.redraw_all()
    assert "Throughput" not in panel.group_titles()
    assert not panel.group_widget("Throughput").isVisible()
    # Ignored bookkeeping keys never make a curve.
    fill(store, "run-a", ["time/iterations"], 5)
    panel.redraw_all()
    assert all(k != "time/iterations" for _, k in panel.curve_keys(OTHER_GROUP))


def test_two_runs_overlay_with_distinct_colors_and_a_legend(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "run-a", ["rollout/ep_rew_mean", "eval/mean_reward"], 40, seed=1)
    fill(store, "run-b", ["rollout/ep_rew_mean", "eval/mean_reward"], 30, seed=2)
    panel.set_run_label("run-b", "PPO tuned")
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert panel.curve_keys("Rewards") == [
        ("run-a", "rollout/ep_rew_mean"),
        ("run-a", "eval/mean_reward"),
        ("run-b", "rollout/ep_rew_mean"),
        ("run-b", "eval/mean_reward"),
    ]
    assert panel.run_color("run-a") != panel.run_color("run-b")
    x, y = panel.curve_data("run-b", "rollout/ep_rew_mean")
    assert len(x) == 30 and np.array_equal(
        y, store.series("run-b", "rollout/ep_rew_mean")[2]
    )
    legend = panel.legend_text("Rewards")
    assert "run-a" in legend and "PPO tuned" in legend
    assert "rollout/ep_rew_mean" in legend and "eval/mean_reward" in legend
    panel.remove_run("run-a")
    assert panel.curve_keys("Rewards") == [
        ("run-b", "rollout/ep_rew_mean"),
        ("run-b", "eval/mean_reward"),
    ]
    assert "run-a" not in panel.legend_text("Rewards")


def test_a_run_shown_again_reuses_its_curves_with_fresh_data(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """Going back and forth between runs hides and re-shows their curves
    (building a plot item per metric stalled the GUI); what is drawn is the
    data as it is when the run comes back, and a hidden curve is nowhere."""
    keys = ["rollout/ep_rew_mean", "eval/mean_reward"]
    fill(store, "run-a", keys, 40, seed=1)
    fill(store, "run-b", keys, 30, seed=2)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    plot = panel.plot_widget("Rewards").getPlotItem()
    items_before = set(plot.listDataItems())
    panel.remove_run("run-a")
    shown = [i for i in plot.listDataItems() if i.isVisible()]
    assert len(shown) == 2 and "run-a" not in panel.legend_text("Rewards")
    # The run grows (40 -> 100 rows) while hidden, then comes back.
    fill(store, "run-a", keys, 60, seed=3)
    panel.add_run("run-a", "again")
    panel.add_keys("run-a", keys)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert set(plot.listDataItems()) == items_before  # no new items
    assert all(i.isVisible() for i in plot.listDataItems())
    x, y = panel.curve_data("run-a", "eval/mean_reward")
    assert len(x) == 100 and np.array_equal(
        y, store.series("run-a", "eval/mean_reward")[2]
    )
    assert "again" in panel.legend_text("Rewards")
    # Only the last PARKED_RUNS removed runs keep hidden items.
    for i in range(panel.PARKED_RUNS + 2):
        fill(store, f"r{i}", keys[:1], 5)
        panel.add_keys(f"r{i}", keys[:1])
        # (a run removed before its curve was built parks nothing)
        qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
        panel.remove_run(f"r{i}")
    hidden = [i for i in plot.listDataItems() if not i.isVisible()]
    assert len(hidden) == panel.PARKED_RUNS


def test_new_curves_are_built_over_redraw_ticks_within_their_budget(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """Selecting runs declares all their keys at once; their plot items (3 to
    10 ms each) are built on the redraw ticks, within the tick's budget, so
    no single slice of the GUI thread builds them all (issue 16's stall)."""
    keys = ["rollout/ep_rew_mean", "eval/mean_reward", "train/value_loss"]
    for i in range(3):
        fill(store, f"run-{i}", keys, 20, seed=i)
    assert panel.pending_redraws() == 9
    assert panel.group_titles(visible_only=False) == []  # nothing built yet

    def built() -> int:
        return sum(
            len(panel.curve_keys(t)) for t in panel.group_titles(visible_only=False)
        )

    panel.redraw_budget_s = 0.0  # a spent budget: one build per tick
    panel.redraw_dirty()
    assert built() == 1 and panel.pending_redraws() == 9  # 8 to build, 1 to draw
    panel.redraw_budget_s = 0.020
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=5000)
    assert built() == 9
    assert panel.group_titles() == ["Rewards", "Losses"]
    # A run removed before its curves were built leaves nothing behind.
    fill(store, "run-late", keys, 5)
    panel.remove_run("run-late")
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=5000)
    assert built() == 9


def test_legend_names_a_curve_whose_first_points_come_later(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """Evaluations start after training curves; the legend then names both."""
    panel.add_run("run-a", "PPO live")
    fill(store, "run-a", ["rollout/ep_len_mean"], 20)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert panel.legend_text("Episode length").endswith("PPO live")
    fill(store, "run-a", ["eval/mean_ep_length"], 3)
    qtbot.waitUntil(
        lambda: "eval/mean_ep_length" in panel.legend_text("Episode length"),
        timeout=2000,
    )
    legend = panel.legend_text("Episode length")
    assert "rollout/ep_len_mean" in legend and "PPO live" not in legend


def test_series_follow_the_group_rules_not_arrival_order(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """An evaluation logged before the first training rollout still gets the
    second colour (and, beside another run, the dashed line), and the
    training curve the first."""
    fill(store, "run-a", ["eval/mean_reward"], 2)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    fill(store, "run-a", ["rollout/ep_rew_mean"], 20)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert panel.curve_keys("Rewards") == [
        ("run-a", "rollout/ep_rew_mean"),
        ("run-a", "eval/mean_reward"),
    ]
    pens = pens_by_length(panel, "Rewards")
    # One run: a colour per series, all solid.
    assert pens[20] == (SERIES_COLORS[0], QtCore.Qt.PenStyle.SolidLine)
    assert pens[2] == (SERIES_COLORS[1], QtCore.Qt.PenStyle.SolidLine)
    legend = panel.legend_text("Rewards")
    assert legend.index("rollout/ep_rew_mean") < legend.index("eval/mean_reward")
    # A second run: a colour per run, a line style per series.
    panel.add_run("run-b", "B")
    fill(store, "run-b", ["rollout/ep_rew_mean"], 30)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    pens = pens_by_length(panel, "Rewards")
    run_a = QtGui.QColor(panel.run_color("run-a")).name()
    assert pens[20] == (run_a, QtCore.Qt.PenStyle.SolidLine)
    assert pens[2][0] == run_a and pens[2][1] != QtCore.Qt.PenStyle.SolidLine
    assert pens[30] == (QtGui.QColor(panel.run_color("run-b")).name(), pens[20][1])
    # Back to one run: its series take their colours again.
    panel.remove_run("run-b")
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert pens_by_length(panel, "Rewards")[2][0] == SERIES_COLORS[1]


def pens_by_length(
    panel: LivePlotPanel, title: str
) -> dict[int, tuple[str, QtCore.Qt.PenStyle]]:
    """The pens (colour, line style) of a plot's shown curves, told apart
    by how many points each has."""
    return {
        len(item.getData()[0]): (
            item.opts["pen"].color().name(),
            item.opts["pen"].style(),
        )
        for item in panel.plot_widget(title).getPlotItem().listDataItems()
        if item.isVisible()
    }


def test_every_charts_series_have_distinct_pens(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """Issue 29: no two series of a chart share a colour (one run) or a
    colour and a line style (several runs)."""
    keys = ["train/policy_loss", "train/value_loss", "train/entropy_loss"]
    keys += ["rollout/ep_rew_mean", "eval/mean_reward"]
    fill(store, "a", keys, 10)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    for title in panel.group_titles():
        pens = [
            (item.opts["pen"].color().name(), item.opts["pen"].style())
            for item in panel.plot_widget(title).getPlotItem().listDataItems()
            if item.isVisible()
        ]
        assert len({color for color, _ in pens}) == len(pens), (title, pens)
    panel.add_run("b", "B")
    fill(store, "b", keys, 12)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    for title in panel.group_titles():
        pens = [
            (item.opts["pen"].color().name(), item.opts["pen"].style())
            for item in panel.plot_widget(title).getPlotItem().listDataItems()
            if item.isVisible()
        ]
        assert len(set(pens)) == len(pens), (title, pens)


def test_smoothing_changes_curve_data_like_tensorboard(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "r", ["rollout/ep_rew_mean"], 500)
    panel.redraw_all()
    raw = store.series("r", "rollout/ep_rew_mean")[2]
    assert np.array_equal(panel.curve_data("r", "rollout/ep_rew_mean")[1], raw)
    with qtbot.waitSignal(panel.smoothing_changed, timeout=1000) as sig:
        panel._toolbar.smooth_slider.setValue(90)  # as a user drag ends
    assert sig.args == [0.9]
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    y = panel.curve_data("r", "rollout/ep_rew_mean")[1]
    last, out = 0.0, []
    for i, v in enumerate(raw):  # TensorBoard's loop
        last = last * 0.9 + 0.1 * v
        out.append(last / (1 - 0.9 ** (i + 1)))
    np.testing.assert_allclose(y, out, rtol=1e-10, atol=1e-10)
    assert np.std(np.diff(y)) < np.std(np.diff(raw))
    # Appending continues the EMA incrementally with the same result.
    more = np.array([5.0, -3.0, 8.0])
    store.append_arrays(
        "r", "rollout/ep_rew_mean", np.array([1e6, 2e6, 3e6]), np.zeros(3), more
    )
    panel.redraw_all()
    full = ema_smooth(np.concatenate([raw, more]), 0.9)[0]
    np.testing.assert_allclose(panel.curve_data("r", "rollout/ep_rew_mean")[1], full)


def test_x_axis_switch_to_wall_time(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "r", ["time/fps"], 20)
    panel.redraw_all()
    assert panel.curve_data("r", "time/fps")[0][-1] == 2000.0
    with qtbot.waitSignal(panel.x_axis_changed, timeout=1000) as sig:
        panel._toolbar.x_combo.setCurrentIndex(1)
    assert sig.args == ["time"] and panel.x_axis() == "time"
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert panel.curve_data("r", "time/fps")[0][-1] == 40.0
    with pytest.raises(ValueError, match="x axis must be"):
        panel.set_x_axis("epochs")


def test_hover_label_shows_nearest_point_per_curve(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    steps = np.array([100.0, 200.0, 300.0])
    store.append_arrays(
        "a", "rollout/ep_rew_mean", steps, steps / 10, np.array([1.0, 2.0, 3.0])
    )
    store.append_arrays(
        "b", "rollout/ep_rew_mean", steps, steps / 10, np.array([10.0, 20.0, 30.0])
    )
    panel.redraw_all()
    qtbot.waitUntil(lambda: panel.group_widget("Rewards").isVisible(), timeout=2000)
    text = panel.hover_text("Rewards", 190.0)
    assert "step 190" in text
    assert "a 2 @ 200" in text and "b 20 @ 200" in text
    # Through the scene: a mouse move over the plot updates the readout.
    group = panel.group_widget("Rewards")
    qtbot.waitUntil(lambda: group.view.viewRange()[0][1] >= 300, timeout=2000)
    y_mid = sum(group.view.viewRange()[1]) / 2
    scene_pos = group.view.mapViewToScene(QtCore.QPointF(290.0, y_mid))
    group.plot.scene().sigMouseMoved.emit(scene_pos)
    assert "a 3 @ 300" in panel.legend_text("Rewards")
    assert group.crosshair.isVisible()
    group.plot.scene().sigMouseMoved.emit(QtCore.QPointF(-1000.0, -1000.0))
    assert not group.crosshair.isVisible()
    assert "@" not in panel.legend_text("Rewards")


def test_csv_export_writes_the_visible_curves(
    qtbot, panel: LivePlotPanel, store: MetricStore, tmp_path: Path
) -> None:
    fill(store, "a", ["rollout/ep_rew_mean", "train/value_loss"], 10)
    fill(store, "b", ["rollout/ep_rew_mean"], 5)
    panel.set_smoothing(0.5)
    with qtbot.waitSignal(panel.export_requested, timeout=1000) as sig:
        qtbot.mouseClick(panel._toolbar.csv_button, QtCore.Qt.MouseButton.LeftButton)
    assert sig.args == ["csv"]
    path = tmp_path / "metrics.csv"
    assert panel.export_csv(path) == 25
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["run", "key", "step", "time", "value", "smoothed"]
    body = rows[1:]
    assert len(body) == 25
    a_rew = [r for r in body if r[0] == "a" and r[1] == "rollout/ep_rew_mean"]
    steps, times, values = store.series("a", "rollout/ep_rew_mean")
    assert [float(r[2]) for r in a_rew] == steps.tolist()
    assert [float(r[3]) for r in a_rew] == times.tolist()
    assert [float(r[4]) for r in a_rew] == values.tolist()
    np.testing.assert_allclose([float(r[5]) for r in a_rew], ema_smooth(values, 0.5)[0])
    assert {(r[0], r[1]) for r in body} == {
        ("a", "rollout/ep_rew_mean"),
        ("a", "train/value_loss"),
        ("b", "rollout/ep_rew_mean"),
    }


def test_png_export_is_a_real_non_blank_image(
    qtbot, panel: LivePlotPanel, store: MetricStore, tmp_path: Path
) -> None:
    fill(store, "a", ["rollout/ep_rew_mean", "train/value_loss"], 200)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    path = panel.export_png(tmp_path / "plots.png")
    image = QtGui.QImage(str(path))
    assert image.width() > 300 and image.height() > 150
    colors = {
        image.pixel(x, y)
        for x in range(0, image.width(), 7)
        for y in range(0, image.height(), 7)
    }
    assert len(colors) > 10
    # The curve's color is drawn somewhere in the Rewards plot.
    one = QtGui.QImage(str(panel.export_png(tmp_path / "rewards.png", group="Rewards")))
    run_rgb = QtGui.QColor(SERIES_COLORS[0]).rgb() & 0xFFFFFF
    found = any(
        (one.pixel(x, y) & 0xFFFFFF) == run_rgb
        for x in range(0, one.width(), 2)
        for y in range(0, one.height(), 2)
    )
    assert found


def test_set_curve_pushes_data_without_a_source(qtbot) -> None:
    panel = LivePlotPanel(vocabulary=TRAINING_METRICS, theme="light")
    qtbot.addWidget(panel)
    panel.set_curve("r", "eval/mean_reward", np.arange(5.0), np.arange(5.0) * 2)
    panel.redraw_all()
    assert panel.group_titles() == ["Rewards"]
    assert panel.curve_data("r", "eval/mean_reward")[1].tolist() == [0, 2, 4, 6, 8]
    panel.set_curve("r", "eval/mean_reward", np.arange(3.0), np.ones(3))  # replaces
    panel.redraw_all()
    assert panel.curve_data("r", "eval/mean_reward")[1].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="same length"):
        panel.set_curve("r", "x", np.arange(3.0), np.arange(4.0))
    with pytest.raises(ValueError, match="theme must be one of"):
        LivePlotPanel(theme="neon")


def test_large_series_is_decimated_to_about_two_points_per_pixel(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    n = 200_000
    fill(store, "r", ["time/fps"], n)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=3000)
    group = panel.group_widget("Throughput")
    x, y = panel.curve_data("r", "time/fps")
    assert len(x) < 4 * group.view.width() + 64
    values = store.series("r", "time/fps")[2]
    assert y.max() == values.max() and y.min() == values.min()  # peaks kept
    # Zooming in shows the raw points of the visible range.
    panel.set_x_range(50_000, 51_000, title="Throughput")
    qtbot.waitUntil(
        lambda: len(panel.curve_data("r", "time/fps")[0]) < 30, timeout=2000
    )
    x, y = panel.curve_data("r", "time/fps")
    assert x[0] <= 50_000 and x[-1] >= 51_000
    assert np.array_equal(y, values[498:511])


def test_dense_curve_is_a_column_envelope_kept_up_to_date_per_tick(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """A dense curve is drawn as the max and min of each pixel column, ending
    on the exact last point; ticks that append redo only the last column,
    and a spike that arrives then is drawn. Such a curve has a 1 px pen
    without antialiasing (a 2 px pen made a frame take 130 ms)."""
    n = 200_000
    fill(store, "r", ["time/fps"], n)
    panel.redraw_all()
    view = panel.group_widget("Throughput").view
    qtbot.waitUntil(lambda: view.viewRange()[0][1] >= n * 100, timeout=2000)
    panel.redraw_all()
    for i in range(5):
        step = (n + 1 + i) * 100.0
        value = 1e6 if i == 2 else float(i)
        store.append_rows("r", [{"step": step, "time": 0.0, "time/fps": value}])
        panel.redraw_all()
    x, y = panel.curve_data("r", "time/fps")
    values = store.series("r", "time/fps")[2]
    assert len(x) <= 2 * int(view.width()) + 2
    assert y.max() == 1e6 and y.min() == values.min()
    assert (x[-1], y[-1]) == ((n + 5) * 100.0, 4.0)
    assert np.all(np.diff(x) >= 0)
    (item,) = panel.plot_widget("Throughput").getPlotItem().listDataItems()
    assert item.opts["pen"].widthF() <= 1 and not item.opts["antialias"]


def test_live_ticks_leave_on_screen_what_a_full_repaint_shows(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """A tick repaints only the strip where curves changed (their ends);
    the window's pixels are then those of a repaint of everything."""
    keys = ["time/fps", "rollout/ep_rew_mean"]
    fill(store, "r", keys, 20_000)
    panel.redraw_all()
    groups = [panel.group_widget(t) for t in panel.group_titles()]
    qtbot.waitUntil(
        lambda: all(g.view.viewRange()[0][1] >= 2_000_000 for g in groups),
        timeout=2000,
    )
    qtbot.waitExposed(panel)
    window = panel.window().windowHandle()

    def pixels() -> QtGui.QImage:
        QtWidgets.QApplication.processEvents()  # paints what was updated
        return window.screen().grabWindow(window.winId()).toImage()

    pixels()
    for i in range(5):
        # The ends move up and back by a few pixels; the ranges stay.
        row = {"step": (20_001 + i) * 100.0, "time": 0.0}
        for k in keys:
            row[k] = store.series("r", k)[2][-1] + 30.0 * (-1) ** i
        store.append_rows("r", [row])
        panel.redraw_all()
        shown = pixels()
    assert not shown.isNull()
    for group in groups:
        group.plot.viewport().update()
    assert shown == pixels()


def test_hover_readout_follows_points_drawn_later(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    steps = np.array([100.0, 200.0, 300.0])
    store.append_arrays(
        "a", "rollout/ep_rew_mean", steps, steps / 10, np.array([1.0, 2.0, 3.0])
    )
    panel.redraw_all()
    assert "a 3 @ 300" in panel.hover_text("Rewards", 390.0)
    store.append_rows("a", [{"step": 400.0, "time": 40.0, "rollout/ep_rew_mean": 4.0}])
    panel.redraw_all()
    assert "a 4 @ 400" in panel.legend_text("Rewards")


def test_progress_bar_text_state_and_color(qtbot) -> None:
    bar = RunProgressBar()
    qtbot.addWidget(bar)
    bar.set_state("running")
    bar.set_progress(12_345, 100_000, 850.0, 102.0)
    assert bar.text() == "12,345 / 100,000 steps · 850 steps/s · ETA 1:42"
    assert bar.fraction() == pytest.approx(0.1234, abs=1e-3)
    with qtbot.waitSignal(bar.state_changed, timeout=1000) as sig:
        bar.set_state("failed")
    assert sig.args == ["failed"]
    assert bar.color() == "#e15759" and "ETA" not in bar.text()
    assert bar.color() != RunProgressBar().color()
    bar.set_progress(500, None, None, None)
    assert bar.text() == "500 steps" and bar.fraction() == 0.0
    assert format_eta(7509) == "2:05:09"
    assert format_progress(1, 10, 8.5) == "1 / 10 steps · 8.50 steps/s"
    with pytest.raises(ValueError, match="state must be one of"):
        bar.set_state("paused")


def test_x_range_follows_new_data_with_headroom_until_the_user_zooms(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "r", ["time/fps"], 1000)  # steps 100 .. 100,000
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    view = panel.group_widget("Throughput").view
    lo, hi = view.viewRange()[0]
    assert lo <= 100 and hi > 100_000
    # A small append stays inside the headroom: the range (and axes) stay put.
    store.append_arrays("r", "time/fps", np.array([100_100.0]), np.zeros(1), np.ones(1))
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert view.viewRange()[0] == [lo, hi]
    # Past the headroom the range grows to take the new data in.
    store.append_arrays("r", "time/fps", np.array([150_000.0]), np.zeros(1), np.ones(1))
    qtbot.waitUntil(lambda: view.viewRange()[0][1] > 150_000, timeout=2000)
    # After a zoom, new data does not move the view; reset_view follows again.
    panel.set_x_range(1_000, 2_000, title="Throughput")
    store.append_arrays("r", "time/fps", np.array([300_000.0]), np.zeros(1), np.ones(1))
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert view.viewRange()[0] == [1_000, 2_000]
    panel.reset_view("Throughput")
    qtbot.waitUntil(lambda: view.viewRange()[0][1] > 300_000, timeout=2000)


def test_y_range_follows_the_drawn_points_with_headroom_until_the_user_zooms(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    steps = np.arange(1, 101, dtype=float)
    store.append_arrays("r", "time/fps", steps, steps, np.linspace(0.0, 10.0, 100))
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    view = panel.group_widget("Throughput").view
    lo, hi = view.viewRange()[1]
    assert lo < 0.0 and 10.0 < hi < 15.0
    # A point inside the range leaves it (and the axes) alone.
    store.append_arrays("r", "time/fps", np.array([101.0]), np.ones(1), np.ones(1) * 5)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert view.viewRange()[1] == [lo, hi]
    # A point above it grows the range to take it in.
    store.append_arrays("r", "time/fps", np.array([102.0]), np.ones(1), np.ones(1) * 40)
    qtbot.waitUntil(lambda: view.viewRange()[1][1] > 40.0, timeout=2000)
    # After a zoom, new data does not move y; reset_view follows again.
    view.setYRange(1.0, 2.0, padding=0)
    view.sigRangeChangedManually.emit([False, True])
    store.append_arrays("r", "time/fps", np.array([103.0]), np.ones(1), np.ones(1) * 90)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert view.viewRange()[1] == [1.0, 2.0]
    panel.reset_view("Throughput")
    qtbot.waitUntil(lambda: view.viewRange()[1][1] > 90.0, timeout=2000)


def test_a_shorter_legend_does_not_resize_its_plot(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "r", ["rollout/ep_rew_mean"], 50)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=10_000)
    group = panel.group_widget("Rewards")
    legend = group.legend
    qtbot.waitUntil(lambda: legend.width() > 0 and legend.isVisible(), timeout=2000)
    one_line = legend.heightForWidth(legend.width())
    panel.set_run_label("r", " ".join(["a-long-run-name"] * 40))  # several lines
    tallest = legend.heightForWidth(legend.width())
    assert tallest > one_line
    panel.set_run_label("r", "r")  # one line again
    # The legend keeps its height, so the plot above it keeps its size.
    assert legend.minimumHeight() >= tallest


def test_no_axis_rewrites_its_title_when_the_range_changes(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    fill(store, "r", ["time/fps"], 10)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=10_000)
    item = panel.plot_widget("Throughput").getPlotItem()
    # Hidden axes (top, right) follow the view as well: an SI prefix on any
    # of them would set its rich-text title on every range change.
    for name in ("left", "bottom", "top", "right"):
        assert not item.getAxis(name).autoSIPrefix, name


def test_legends_that_grow_get_their_room_without_squeezing_their_plots(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """More plots than the view holds (it scrolls): when another run's curves
    make every legend a line longer, each plot's row grows in one layout
    step; no plot is first squeezed into the old height (each resize
    re-lays out its axes and repaints it)."""
    panel.resize(700, 400)
    fill(store, "r", PPO_KEYS, 30)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=10_000)
    scroll_bar = panel._scroll.verticalScrollBar()
    qtbot.waitUntil(lambda: scroll_bar.maximum() > 0, timeout=2000)
    titles = panel.group_titles()
    plots = {t: panel.plot_widget(t) for t in titles}
    before = {t: p.height() for t, p in plots.items()}
    legends = {t: panel.group_widget(t).legend.height() for t in titles}
    heights: dict[QtCore.QObject, list[int]] = {p: [] for p in plots.values()}

    class Spy(QtCore.QObject):
        def eventFilter(self, obj: QtCore.QObject, event: QtCore.QEvent) -> bool:
            if event.type() == QtCore.QEvent.Type.Resize:
                heights[obj].append(event.size().height())
            return False

    spy = Spy()
    for plot in plots.values():
        plot.installEventFilter(spy)
    panel.add_run("s", "second-run-with-a-long-name")
    fill(store, "s", PPO_KEYS, 30, seed=1)
    qtbot.waitUntil(
        lambda: any(panel.group_widget(t).legend.height() > legends[t] for t in titles),
        timeout=5000,
    )
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=10_000)
    for title, plot in plots.items():
        assert all(h >= before[title] for h in heights[plot]), (title, heights[plot])


def test_a_hidden_panel_draws_what_came_in_when_it_shows_again(
    qtbot, store: MetricStore
) -> None:
    """Behind another page of a shown window the panel keeps its data (and
    which plots have any) but leaves the drawing until it shows again."""
    window = QtWidgets.QStackedWidget()
    qtbot.addWidget(window)
    panel = LivePlotPanel(vocabulary=TRAINING_METRICS, columns=2)
    panel.set_source(store.series)
    store.add_keys_listener(panel.add_keys)
    store.add_append_listener(panel.mark_dirty)
    other = QtWidgets.QLabel("another workspace")
    window.addWidget(panel)
    window.addWidget(other)
    window.resize(900, 600)
    window.show()
    fill(store, "r", ["rollout/ep_rew_mean"], 10)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=5000)
    assert len(panel.curve_data("r", "rollout/ep_rew_mean")[0]) == 10
    window.setCurrentWidget(other)
    fill(store, "r", ["rollout/ep_rew_mean", "train/value_loss"], 40, seed=1)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=5000)
    assert panel.group_titles() == ["Rewards", "Losses"]  # known while hidden
    assert len(panel.curve_data("r", "rollout/ep_rew_mean")[0]) == 10  # not drawn
    window.setCurrentWidget(panel)
    qtbot.waitUntil(
        lambda: len(panel.curve_data("r", "rollout/ep_rew_mean")[0]) == 50,
        timeout=5000,
    )
    qtbot.waitUntil(
        lambda: len(panel.curve_data("r", "train/value_loss")[0]) == 40, timeout=5000
    )


def test_a_legend_measures_again_after_its_text_changes(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    """The legend remembers its height per width, until its text changes."""
    fill(store, "r", ["rollout/ep_rew_mean"], 10)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=5000)
    legend = panel.group_widget("Rewards").legend
    short = legend.heightForWidth(200)
    panel.set_run_label("r", " ".join(["a-long-run-name"] * 20))
    assert legend.heightForWidth(200) > short
    fresh = QtWidgets.QLabel(legend.text())
    fresh.setWordWrap(True)
    fresh.setFont(legend.font())
    assert legend.heightForWidth(200) == fresh.heightForWidth(200)


def test_tick_labels_are_measured_as_the_painter_measures_them(qtbot) -> None:
    """The axes' remembered label sizes equal the painter's, and a caller
    changing the rectangle it got does not change the remembered one."""
    from widgets.plot_group import MeasuringPainter

    image = QtGui.QImage(50, 50, QtGui.QImage.Format.Format_ARGB32)
    painter = QtGui.QPainter(image)
    try:
        measuring = MeasuringPainter(painter)
        rect = QtCore.QRectF(0, 0, 100, 100)
        center = QtCore.Qt.AlignmentFlag.AlignCenter
        for text in ("250k", "1.5M", "250k"):
            got = measuring.boundingRect(rect, center, text)
            assert got == painter.boundingRect(rect, center, text)
            got.setHeight(got.height() * 0.8)  # as pyqtgraph's axis does
        assert measuring.boundingRect(rect, center, "250k") == painter.boundingRect(
            rect, center, "250k"
        )
    finally:
        painter.end()


def _click_legend_entry(qtbot, panel: LivePlotPanel, title: str, series: str) -> None:
    """Click the legend entry of ``series`` under the plot ``title``, where
    a user sees it (found by laying the legend's text out as the label does)."""
    import urllib.parse

    panel.legend_text(title)  # written now, not at the next redraw tick
    legend = next(
        label
        for label in panel.findChildren(QtWidgets.QLabel, "livePlotLegend")
        if label.parentWidget().title == title  # type: ignore[attr-defined]
    )
    doc = QtGui.QTextDocument()
    doc.setDefaultFont(legend.font())
    doc.setDocumentMargin(0)
    doc.setHtml(legend.text())
    doc.setTextWidth(legend.width())
    top = (legend.height() - doc.size().height()) / 2  # centred vertically
    href = urllib.parse.quote(series, safe="")
    layout = doc.documentLayout()
    for y in range(0, int(doc.size().height()), 2):
        for x in range(0, legend.width(), 2):
            if layout.anchorAt(QtCore.QPointF(x, y)) == href:
                pos = QtCore.QPoint(x + 2, int(top + y))
                qtbot.mouseClick(legend, QtCore.Qt.MouseButton.LeftButton, pos=pos)
                return
    raise AssertionError(f"no legend entry {series!r} in {legend.text()!r}")


def test_clicking_a_legend_entry_hides_its_series_and_again_shows_it(
    qtbot, panel: LivePlotPanel, store: MetricStore
) -> None:
    keys = ["rollout/ep_rew_mean", "eval/mean_reward"]
    fill(store, "run-a", keys, 40, seed=1)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    group = next(
        g
        for g in panel.findChildren(QtWidgets.QFrame, "livePlotGroup")
        if g.title == "Rewards"  # type: ignore[attr-defined]
    )
    items = {c.key: c.item for c in group.curves}  # type: ignore[attr-defined]
    with qtbot.waitSignal(group.series_toggled) as toggled:
        _click_legend_entry(qtbot, panel, "Rewards", "key:eval/mean_reward")
    assert toggled.args == ["key:eval/mean_reward", False]
    assert not items["eval/mean_reward"].isVisible()
    assert items["rollout/ep_rew_mean"].isVisible()
    qtbot.waitUntil(lambda: "<s " in group.legend.text())  # struck through
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        group.grab().save(str(Path(shots) / "legend-click-hides-series.png"))
    # The run shown again (selection going back and forth) keeps it hidden.
    panel.remove_run("run-a")
    panel.add_run("run-a", "again")
    panel.add_keys("run-a", keys)
    qtbot.waitUntil(lambda: panel.pending_redraws() == 0, timeout=2000)
    assert not items["eval/mean_reward"].isVisible()
    _click_legend_entry(qtbot, panel, "Rewards", "key:eval/mean_reward")
    assert items["eval/mean_reward"].isVisible()
