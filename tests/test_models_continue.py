"""Models → Continue training… (issue 31, item 5): the Training workspace's
New run dialog, filled in to start from the selected SB3 policy, against the
real engine; the run it starts registers a model whose lineage names the
policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from models_workspace_support import fill_run_form, make_ppo_zip, submit_run_form
from PySide6.QtCore import Qt
from studio_harness import build_main_window, start_on_project

from engine.store.project import Project
from studio.main_window import MainWindow
from studio.training.run_dialog import RunDialog


def _continue_dialog(qtbot, tmp_path: Path) -> tuple[MainWindow, str, RunDialog]:  # type: ignore[no-untyped-def]
    """A project holding a PPO CartPole policy, open in the studio; its
    Continue training… clicked. The window, the policy's id, the dialog."""
    project = Project.open(tmp_path / "project", create=True)
    policy = project.register_model(
        name="PPO CartPole",
        kind="sb3-policy",
        files=[make_ppo_zip(tmp_path / "ppo.zip")],
        env="CartPole-v1",
        algo="PPO",
    )
    project.close()
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project")
    win.show()
    win.set_workspace("models")
    models = win.workspaces["models"]
    qtbot.waitUntil(lambda: policy.id in {r["id"] for r in models.records()})
    models.select(policy.id)
    button = models.action_bar.buttons["continue"]
    assert button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert win.current_workspace() == "training"
    (dialog,) = win.workspaces["training"].findChildren(RunDialog)
    return win, policy.id, dialog


def test_continue_training_opens_the_new_run_dialog_filled(  # type: ignore[no-untyped-def]
    qtbot, tmp_path: Path
) -> None:
    win, policy_id, dialog = _continue_dialog(qtbot, tmp_path)
    try:
        qtbot.waitUntil(dialog.is_loaded, timeout=30_000)
        values = dialog.form.values()
        assert (values["env"], values["algo"], values["start_from"]) == (
            "CartPole-v1",
            "PPO",
            policy_id,
        )
        assert dialog.form.is_valid(), dialog.form.errors()
    finally:
        win.session.client.stop()


@pytest.mark.slow
def test_the_continued_run_registers_a_model_derived_from_the_policy(  # type: ignore[no-untyped-def]
    qtbot, tmp_path: Path
) -> None:
    win, policy_id, dialog = _continue_dialog(qtbot, tmp_path)
    try:
        fill_run_form(qtbot, dialog, total_steps="128", eval_every_steps="0")
        run_id = submit_run_form(qtbot, dialog)
        state = win.session.state
        qtbot.waitUntil(
            lambda: state.run(run_id).get("status") not in ("queued", "running"),
            timeout=120_000,
        )
        assert state.run(run_id)["status"] == "completed", state.run(run_id)
    finally:
        win.session.client.stop()
    project = Project.open(tmp_path / "project")
    try:
        (child,) = [m for m in project.list_models() if m.source_run == run_id]
        assert (policy_id, child.id, "derived") in project.lineage(child.id)
    finally:
        project.close()
