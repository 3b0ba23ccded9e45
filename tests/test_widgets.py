"""Reusable widgets, driven through their own inputs."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLineEdit

from widgets.banner import Banner
from widgets.hardware_meter import HardwareMeter, Usage
from widgets.log_console import LogConsole
from widgets.param_form import ParamForm, check_value
from widgets.record_table import Column, RecordTable

SCHEMA = [
    {
        "name": "learning_rate",
        "type": "float",
        "default": 3e-4,
        "min": 0.0,
        "exclusive_min": True,
        "max": 1.0,
        "help": "Adam step size.",
    },
    {
        "name": "n_steps",
        "type": "int",
        "default": 2048,
        "min": 1,
        "title": "Rollout steps",
    },
    {
        "name": "algo",
        "type": "choice",
        "choices": ["PPO", "A2C", "DQN"],
        "default": "A2C",
    },
    {"name": "normalize", "type": "bool", "default": False},
    {"name": "seed", "type": "int", "optional": True, "default": None},
]


def test_check_value_sentences() -> None:
    lr = SCHEMA[0]
    assert check_value(lr, "0.001") == (0.001, "")
    assert check_value(lr, "0")[1] == "learning_rate must be greater than 0.0."
    assert check_value(lr, "fast")[1] == "learning_rate must be a number."
    assert check_value(lr, "nan")[1] == "learning_rate must be a finite number."
    assert check_value(SCHEMA[1], "1.5")[1] == "Rollout steps must be a whole number."
    assert check_value(SCHEMA[1], "10,000") == (10_000, "")
    assert check_value(SCHEMA[1], "")[1] == "Rollout steps needs a value."
    assert check_value(SCHEMA[4], "") == (None, "")


def test_param_form_validates_as_the_user_types(qtbot) -> None:
    form = ParamForm()
    qtbot.addWidget(form)
    form.show()
    form.set_schema(SCHEMA, {"n_steps": 128})
    assert form.values() == {
        "learning_rate": 3e-4,
        "n_steps": 128,
        "algo": "A2C",
        "normalize": False,
        "seed": None,
    }
    edit = form.editor("learning_rate")
    assert isinstance(edit, QLineEdit)
    with qtbot.waitSignal(form.validity_changed) as blocker:
        edit.clear()
        qtbot.keyClicks(edit, "-1")
    assert blocker.args == [False]
    assert form.errors() == {"learning_rate": "learning_rate must be greater than 0.0."}
    assert form.values()["learning_rate"] == 3e-4  # the last valid value is kept
    with qtbot.waitSignal(form.validity_changed) as blocker:
        edit.clear()
        qtbot.keyClicks(edit, "0.01")
    assert blocker.args == [True] and form.values()["learning_rate"] == 0.01
    combo = form.editor("algo")
    assert isinstance(combo, QComboBox)
    with qtbot.waitSignal(form.values_changed) as changed:
        combo.setCurrentIndex(2)
    assert changed.args[0]["algo"] == "DQN"
    box = form.editor("normalize")
    assert isinstance(box, QCheckBox)
    qtbot.keyClick(box, Qt.Key.Key_Space)
    assert form.values()["normalize"] is True
    form.set_external_errors({"n_steps": "batch_size 256 is larger than the rollout."})
    assert form.is_valid()  # external errors are shown, not owned


def test_log_console_filters_and_caps(qtbot) -> None:
    console = LogConsole(max_lines=50)
    qtbot.addWidget(console)
    for i in range(80):
        console.append_line(
            f"line {i}", "run-a" if i % 2 else "engine", "error" if i == 79 else "info"
        )
    assert console.text().count("\n") == 49 and "line 79" in console.text()
    console.set_filter("run-a")
    assert all("run-a" in line for line in console.text().splitlines())
    console.set_filter("")
    console.clear()
    assert console.text() == ""


def test_banner_action_and_auto_hide(qtbot) -> None:
    banner = Banner()
    qtbot.addWidget(banner)
    banner.show_message("Engine crashed.", "error", action_text="Restart engine")
    assert banner.isVisible() and banner.text() == "Engine crashed."
    with qtbot.waitSignal(banner.action_requested):
        banner._action.click()
    with qtbot.waitSignal(banner.dismissed, timeout=2000):
        banner.show_message("Back.", "success", auto_hide_ms=50)
    assert not banner.isVisible()


def test_record_table_updates_rows_in_place_and_sorts(qtbot) -> None:
    table = RecordTable(
        [Column("Name", lambda r: r["name"]), Column("Steps", lambda r: r["steps"])],
        empty_text="No runs.",
    )
    qtbot.addWidget(table)
    assert table.empty_label.text() == "No runs."
    table.set_records(
        [{"id": "a", "name": "A", "steps": 10}, {"id": "b", "name": "B", "steps": 2}]
    )
    table.view.sortByColumn(1, Qt.SortOrder.AscendingOrder)
    first = table.view.model().index(0, 0).data()
    assert first == "B"  # numeric sort: 2 < 10
    table.select_keys(["a"])
    table.update_record({"id": "a", "name": "A", "steps": 1})
    assert table.selected_keys() == ["a"]
    assert table.view.model().index(0, 0).data() == "A"
    table.update_record({"id": "c", "name": "C", "steps": 5})
    assert table.model.rowCount() == 3


def test_record_table_selects_many_rows_in_one_change(qtbot) -> None:
    """Each selection change redraws the plots of the selected runs: selecting
    three rows is one change, and selecting what is selected is none."""
    table = RecordTable([Column("Name", lambda r: r["name"])])
    qtbot.addWidget(table)
    table.set_records([{"id": k, "name": k.upper()} for k in "abcd"])
    changes: list[list[str]] = []
    table.selection_changed.connect(changes.append)
    table.select_keys(["a", "c", "d"])
    assert changes == [["a", "c", "d"]]
    table.select_keys(["d", "c", "a"])
    assert len(changes) == 1
    table.select_keys(["b"])
    assert changes[-1] == ["b"] and table.selected_keys() == ["b"]
    table.select_keys([])
    assert changes[-1] == [] and len(changes) == 3


def test_hardware_meter_shows_gpu_only_when_known(qtbot) -> None:
    meter = HardwareMeter()
    qtbot.addWidget(meter)
    meter.show()
    meter.set_usage(
        Usage(cpu_percent=42, ram_used_bytes=2 * 2**30, ram_total_bytes=8 * 2**30)
    )
    assert meter.cpu.value.text() == "42%" and meter.ram.bar.value() == 25
    assert not meter.gpu.isVisible()
    meter.set_usage(
        Usage(
            10,
            1,
            2,
            gpu_name="H100",
            gpu_memory_used_bytes=2**30,
            gpu_memory_total_bytes=4 * 2**30,
        )
    )
    assert meter.gpu.isVisible() and meter.vram.bar.value() == 25
