"""The curriculum field of the training form: derived from the config
dataclasses (one column per difficulty setting of the env's kind), shown only
for designed envs with difficulty settings, edited as a stage table or JSON,
round-tripping to a run config the engine's validator accepts, and bad input
shown as one sentence while the last good value is kept."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel, QLineEdit, QWidget

from engine.envs.curriculum import (
    DIFFICULTY,
    CurriculumConfig,
    check_curriculum,
)
from engine.rl.schema import schema
from engine.settings import fields_of
from studio.training.run_dialog import flatten_config, nest_values
from widgets.param_form import ObjectField, ParamForm
from widgets.rows_editor import RowsEditor

EXAMPLES = Path(__file__).resolve().parents[1] / "resources" / "examples"
MAZE = "rlstudio/maze-v0"
JIRA = "rlstudio/jira_issue_resolution-v0"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    return tmp_path


def curriculum_schema(env: str, project: Path) -> dict[str, Any] | None:
    fields = schema({"env": env, "project_dir": str(project)})
    found = [f for f in fields if f["name"] == "curriculum"]
    return found[0] if found else None


def build_form(
    qtbot: Any, env: str, project: Path, values: dict[str, Any] | None = None
) -> ParamForm:
    form = ParamForm()
    qtbot.addWidget(form)
    form.show()
    form.set_schema(schema({"env": env, "project_dir": str(project)}), values)
    return form


def parts(form: ParamForm) -> tuple[ObjectField, RowsEditor]:
    field = form.editor("curriculum")
    assert isinstance(field, ObjectField)
    table = field.form.editor("stages")
    assert isinstance(table, RowsEditor)
    return field, table


def type_cell(table: RowsEditor, row: int, title: str, text: str) -> None:
    """What the table's cell editor does when the user commits ``text``."""
    headers = [
        table.table.horizontalHeaderItem(c).text()
        for c in range(table.table.columnCount())
    ]
    titles = [" ".join(h.split()).split(" (")[0] for h in headers]
    (column,) = [i for i, t in enumerate(titles) if t == title]
    table.table.item(row, column).setText(text)


def click(qtbot: Any, button: QWidget) -> None:
    """Click ``button`` once the layout has given it a size (a section just
    shown is laid out by the event loop)."""
    qtbot.waitUntil(lambda: button.height() > 0)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def retype(edit: QLineEdit, qtbot: Any, text: str) -> None:
    edit.clear()
    qtbot.keyClicks(edit, text)


def shown_sentences(form: ParamForm) -> list[str]:
    return [
        label.text()
        for label in form.findChildren(QLabel)
        if label.isVisible()
        and label.text().endswith(".")
        and label.styleSheet() == "color: #d62728;"
    ]


# ------------------------------------------------------------ the schema
@pytest.mark.parametrize(("env", "kind"), [(MAZE, "grid"), (JIRA, "workflow")])
def test_the_stage_columns_are_the_kinds_difficulty_settings(
    project: Path, env: str, kind: str
) -> None:
    field = curriculum_schema(env, project)
    assert field is not None and field["type"] == "object" and field["optional"]
    subfields = {f["name"]: f for f in field["fields"]}
    assert list(subfields) == list(fields_of(CurriculumConfig))
    stages = subfields["stages"]
    assert stages["type"] == "rows" and stages["min_rows"] == 1
    assert [c["name"] for c in stages["columns"]] == list(fields_of(DIFFICULTY[kind]))
    threshold = subfields["threshold"]
    assert (threshold["title"], threshold["min"], threshold["max"]) == (
        "Advance at",
        0,
        1,
    )


def test_envs_without_difficulty_settings_get_no_curriculum_field(
    project: Path, qtbot: Any
) -> None:
    for env in ("CartPole-v1", "rlstudio/cartpole-v0", "rlstudio/missing-v0"):
        assert curriculum_schema(env, project) is None, env
    form = build_form(qtbot, "CartPole-v1", project)
    assert "curriculum" not in form.values()
    assert not form.findChildren(ObjectField) and not form.findChildren(RowsEditor)
    assert curriculum_schema(MAZE, None) is None  # type: ignore[arg-type]


# ------------------------------------------------------------ editing
def test_the_stage_table_gives_a_config_the_engine_accepts(
    project: Path, qtbot: Any
) -> None:
    from engine.rl.config import validate

    form = build_form(qtbot, MAZE, project)
    field, table = parts(form)
    assert form.values()["curriculum"] is None and field.form.isHidden()
    with qtbot.waitSignal(form.values_changed):
        field.enabled_box.click()
    assert form.values()["curriculum"] == {
        "stages": [{}],
        "threshold": 0.8,
        "window": 20,
        "start_stage": 0,
    }
    # Two easier stages before the maze as designed, moved into place.
    click(qtbot, table.add_button)
    click(qtbot, table.add_button)
    type_cell(table, 2, "Size", "3, 3")
    type_cell(table, 2, "Max steps", "30")
    table.table.item(2, 2).setCheckState(Qt.CheckState.Unchecked)  # no traps
    type_cell(table, 1, "Slip", "0")
    table.select_row(2)
    click(qtbot, table.up_button)
    click(qtbot, table.up_button)
    table.select_row(2)
    click(qtbot, table.up_button)
    threshold = field.form.editor("threshold")
    assert isinstance(threshold, QLineEdit)
    retype(threshold, qtbot, "0.7")
    window = field.form.editor("window")
    assert isinstance(window, QLineEdit)
    retype(window, qtbot, "5")
    assert form.is_valid(), form.errors()
    expected = {
        "stages": [
            {"size": [3, 3], "traps": False, "max_steps": 30},
            {"slip": 0.0},
            {},
        ],
        "threshold": 0.7,
        "window": 5,
        "start_stage": 0,
    }
    assert form.values()["curriculum"] == expected
    config = nest_values(form.values())
    checked = validate(
        {**config, "project_dir": str(project), "total_steps": 1000, "algo": "PPO"}
    )
    assert checked["curriculum"] == check_curriculum(expected, "grid")
    # Duplicating the run shows the same stages (the engine's filled-in
    # config reads back as the compact one).
    again = build_form(qtbot, MAZE, project, flatten_config(checked))
    assert again.values()["curriculum"] == expected
    _, again_table = parts(again)
    assert again_table.table.rowCount() == 3
    # Off again: no curriculum in the config.
    field.enabled_box.click()
    assert "curriculum" not in nest_values(form.values())


def test_bad_input_shows_one_sentence_and_keeps_the_saved_config(
    project: Path, qtbot: Any
) -> None:
    form = build_form(qtbot, JIRA, project, {"curriculum": {"stages": [{}, {}]}})
    field, table = parts(form)
    saved = form.values()["curriculum"]
    assert saved["stages"] == [{}, {}] and form.is_valid()
    threshold = field.form.editor("threshold")
    assert isinstance(threshold, QLineEdit)

    def refused(sentence: str) -> None:
        assert not form.is_valid()
        assert form.errors() == {"curriculum": sentence}
        qtbot.waitUntil(lambda: shown_sentences(form).count(sentence) == 1)
        assert form.values()["curriculum"] == saved

    with qtbot.waitSignal(form.validity_changed):
        retype(threshold, qtbot, "2")  # one keystroke: nothing valid in between
    refused("Advance at must be at most 1.")
    retype(threshold, qtbot, "0.9")
    assert form.is_valid()
    saved = form.values()["curriculum"]
    assert saved["threshold"] == 0.9

    type_cell(table, 1, "Transition noise", "1")
    refused("Transition noise in row 2 must be less than 1.")
    type_cell(table, 1, "Transition noise", "0.1")
    saved = form.values()["curriculum"]
    assert saved["stages"] == [{}, {"transition_noise": 0.1}]

    table.select_row(0)
    click(qtbot, table.remove_button)
    saved = form.values()["curriculum"]
    assert saved["stages"] == [{"transition_noise": 0.1}]
    table.select_row(0)
    click(qtbot, table.remove_button)
    refused("Stages needs at least 1 row; add one.")
    click(qtbot, table.add_button)
    assert form.is_valid() and form.values()["curriculum"]["stages"] == [{}]
    saved = form.values()["curriculum"]

    # The same settings as JSON: unknown keys and broken text are refused.
    click(qtbot, field.json_button)
    assert field.form.isHidden() and not field.json_edit.isHidden()
    field.json_edit.setPlainText('{"stages": [{}], "speed": 2}')
    refused(
        "'speed' is not a setting of Curriculum; it has stages, threshold, "
        "window, back_threshold, start_stage."
    )
    field.json_edit.setPlainText('{"stages": [{"speed": 2}]}')
    refused(
        "'speed' in row 1 is not a column of Stages; it has max_task_difficulty, "
        "harder_task_weight, max_steps, transition_noise."
    )
    field.json_edit.setPlainText('{"stages": [{}],')
    refused(
        "Curriculum is not valid JSON: expecting property name enclosed in "
        "double quotes at line 1, column 17."
    )
    field.json_edit.setPlainText('{"stages": [{"max_steps": 12}, {}], "window": 3}')
    assert form.is_valid()
    assert form.values()["curriculum"] == {
        "stages": [{"max_steps": 12}, {}],
        "threshold": 0.8,
        "window": 3,
        "start_stage": 0,
    }
    # Back to the table, which shows what the JSON said.
    click(qtbot, field.json_button)
    _, table = parts(form)
    assert table.table.rowCount() == 2 and table.table.item(0, 2).text() == "12"


def test_an_engine_error_inside_the_curriculum_shows_on_its_field(
    project: Path, qtbot: Any
) -> None:
    form = build_form(
        qtbot, MAZE, project, {"curriculum": {"stages": [{"size": [1, 1]}]}}
    )
    sentence = "maze has no free cell to start from in a 1 x 1 area."
    form.set_external_errors({"curriculum.stages[0].size": sentence})
    qtbot.waitUntil(lambda: shown_sentences(form) == [sentence])
    assert form.is_valid()  # the engine's errors are shown, not owned
    _, table = parts(form)
    type_cell(table, 0, "Size", "3, 3")  # an edit: the engine's word is old
    qtbot.waitUntil(lambda: shown_sentences(form) == [])
    assert form.values()["curriculum"]["stages"] == [{"size": [3, 3]}]


def test_an_optional_object_field_starts_off_and_seeds_its_rows(qtbot: Any) -> None:
    field = ObjectField(
        {
            "name": "plan",
            "title": "Plan",
            "optional": True,
            "fields": [
                {
                    "name": "steps",
                    "type": "rows",
                    "title": "Steps",
                    "min_rows": 2,
                    "default": [],
                    "columns": [
                        {"name": "on", "type": "bool", "default": True},
                        {"name": "n", "type": "int", "default": None, "min": 1},
                    ],
                }
            ],
        }
    )
    qtbot.addWidget(field)
    assert field.value() is None and field.problem() == ""
    assert isinstance(field.enabled_box, QCheckBox)
    with qtbot.waitSignal(field.value_changed) as changed:
        field.enabled_box.setChecked(True)
    assert changed.args == [{"steps": [{}, {}]}]
    field.set_value("steps")
    assert field.problem() == "Plan must be an object of settings."
    assert field.value() == {"steps": [{}, {}]}


# ------------------------------------------------------------ the dialog
def test_the_run_dialog_sends_the_curriculum_and_shows_the_engines_refusal(
    qtbot: Any, tmp_path: Path
) -> None:
    """Through the real engine: the New run dialog on a designed maze shows
    the curriculum, a refused one (back_threshold above threshold) shows the
    engine's sentence on the field and the dialog stays open, the fixed one
    starts a run whose config holds it."""
    from studio_harness import build_main_window, start_on_project

    win = build_main_window(qtbot, tmp_path)
    try:
        start_on_project(qtbot, win, tmp_path / "project", create=True)
        shutil.copy(EXAMPLES / "envs" / "maze.env.json", tmp_path / "project" / "envs")
        training = win.workspaces["training"]
        dialog = training.open_run_dialog({"env": MAZE, "algo": "PPO"})
        qtbot.waitUntil(lambda: "curriculum" in dialog.form.values(), timeout=30_000)
        field, table = parts(dialog.form)
        field.enabled_box.click()
        click(qtbot, table.add_button)
        type_cell(table, 0, "Size", "3, 3")
        back = field.form.editor("back_threshold")
        assert isinstance(back, QLineEdit)
        retype(back, qtbot, "0.9")
        for name, text in (("total_steps", "256"), ("eval_every_steps", "128"),
                           ("eval_episodes", "2"), ("n_envs", "1")):  # fmt: skip
            edit = dialog.form.editor(name)
            assert isinstance(edit, QLineEdit)
            retype(edit, qtbot, text)
        assert dialog.form.is_valid(), dialog.form.errors()
        sent = {"stages": [{"size": [3, 3]}, {}], "threshold": 0.8, "window": 20,
                "back_threshold": 0.9, "start_stage": 0}  # fmt: skip
        assert dialog.config()["curriculum"] == sent
        dialog.buttons.accepted.emit()
        sentence = (
            "back_threshold (0.9) must be below threshold (0.8), or every stage "
            "would be left both ways."
        )
        qtbot.waitUntil(lambda: dialog.message.text() == sentence, timeout=30_000)
        qtbot.waitUntil(lambda: sentence in shown_sentences(dialog.form))
        assert dialog.isVisible() and not dialog.started_run_id
        retype(back, qtbot, "0.5")
        qtbot.waitUntil(lambda: sentence not in shown_sentences(dialog.form))
        with qtbot.waitSignal(dialog.accepted, timeout=30_000):
            dialog.buttons.accepted.emit()
        run_id = dialog.started_run_id
        state = win.session.state
        qtbot.waitUntil(
            lambda: (state.run(run_id) or {}).get("status") == "completed",
            timeout=180_000,
        )
        config = (state.run(run_id) or {})["config"]
        assert config["curriculum"] == check_curriculum(
            {**sent, "back_threshold": 0.5}, "grid"
        )
    finally:
        win.session.client.stop()
