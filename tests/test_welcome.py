"""The welcome page's three starts really start their journeys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from studio.main_window import MainWindow
from studio.training.run_dialog import RunDialog
from tests.studio_harness import build_main_window, start_on_project


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    win.show()
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    yield win
    win.session.client.stop()


def _start(qtbot, win: MainWindow, kind: str) -> None:  # type: ignore[no-untyped-def]
    dialog = win.show_welcome()
    qtbot.waitUntil(dialog.isVisible)
    qtbot.mouseClick(dialog.buttons[kind], Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()


def test_design_an_environment_opens_a_new_one(qtbot, window: MainWindow) -> None:
    _start(qtbot, window, "design")
    envs = window.environments
    assert window.current_workspace() == "environments"
    assert envs.model.name == "my_env"
    assert envs.model.kind == "workflow"
    _start(qtbot, window, "design")  # a second one does not take the same name
    assert envs.model.name == "my_env_2"


def test_train_cartpole_opens_a_filled_run_dialog(qtbot, window: MainWindow) -> None:
    _start(qtbot, window, "cartpole")
    assert window.current_workspace() == "training"
    dialog = next(d for d in window.findChildren(RunDialog) if d.isVisible())
    # the form fills in once the engine has sent the settings' schema
    qtbot.waitUntil(lambda: "env" in dialog.form.values(), timeout=30_000)
    values = dialog.form.values()
    assert values["env"] == "CartPole-v1"
    assert values["algo"] == "PPO"
    dialog.reject()


def test_fine_tune_opens_the_bundled_llm_flow(qtbot, window: MainWindow) -> None:
    _start(qtbot, window, "llm")
    workflows = window.workspaces["workflows"]
    assert window.current_workspace() == "workflows"
    qtbot.waitUntil(lambda: workflows.model.path is not None)
    assert Path(workflows.model.path).name == "jira_llm_grpo.flow.json"
    assert (
        Path(workflows.model.path).parent
        == window.workspaces["workflows"].project_flows_dir()
    )


def test_show_at_start_is_remembered(qtbot, window: MainWindow) -> None:
    assert window.settings.show_welcome
    dialog = window.show_welcome()
    dialog.show_at_start.setChecked(False)
    dialog.reject()
    assert not window.settings.show_welcome
    with pytest.raises(ValueError, match="Unknown start"):
        window.start_journey("tour")
