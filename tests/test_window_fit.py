"""The main window fits small screens and comes back as it was left: its
minimum width, the undo buttons' fixed text, the restored geometry,
splitters and workspace, and the Help menu's shortcuts and documentation."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QUrl
from PySide6.QtGui import QUndoCommand
from PySide6.QtWidgets import QWidget

from studio.docs_viewer import DOCS_DIR, README, DocsDialog
from studio.main_window import WORKSPACES
from studio.shortcuts import APPLICATION
from tests.studio_harness import build_main_window
from widgets.banner import OVERLAY_MARGIN
from widgets.fit import ScrollStrip

MAX_MIN_WIDTH = 1000


def _min_width(win: QWidget) -> int:
    return max(win.minimumSizeHint().width(), win.minimumWidth())


def test_main_window_fits_1000_px_on_every_workspace(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    win.show()
    for name in WORKSPACES:
        win.set_workspace(name)
        assert _min_width(win) <= MAX_MIN_WIDTH, name
    win.resize(MAX_MIN_WIDTH, 700)
    qtbot.waitUntil(lambda: win.width() == MAX_MIN_WIDTH)


def test_a_long_undo_text_does_not_widen_the_window(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    win.show()
    before = _min_width(win)
    envs = win.environments
    stack = envs.undo_stack
    # what an edit would name itself; the edit itself does not matter here
    stack.push(QUndoCommand("Set the description to " + "a very long text " * 20))
    assert envs.header.undo_button.text() == "Undo"
    assert "a very long text" in envs.header.undo_action.toolTip()
    assert _min_width(win) <= min(before, MAX_MIN_WIDTH)
    stack.undo()
    assert envs.header.redo_button.text() == "Redo"
    assert "a very long text" in envs.header.redo_action.toolTip()


def test_undo_tooltips_say_why_they_are_disabled(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    envs = win.environments
    assert not envs.header.undo_action.isEnabled()
    assert envs.header.undo_action.toolTip().startswith("Nothing to undo:")
    assert envs.header.redo_action.toolTip().startswith("Nothing to redo:")


def test_a_strip_scrolls_instead_of_widening(qtbot) -> None:
    from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout

    row = QHBoxLayout()
    for i in range(12):
        row.addWidget(QPushButton(f"A rather wide button {i}"))
    strip = ScrollStrip(row)
    holder = QWidget()
    QVBoxLayout(holder).addWidget(strip)
    qtbot.addWidget(holder)
    holder.resize(300, 200)
    holder.show()
    assert strip.minimumSizeHint().width() < 300 < strip.widget().sizeHint().width()
    qtbot.waitUntil(lambda: strip.horizontalScrollBar().maximum() > 0)
    qtbot.waitUntil(lambda: strip.height() == strip.sizeHint().height())
    assert strip.height() > strip.widget().sizeHint().height()


def test_geometry_splitters_and_workspace_come_back(qtbot, tmp_path: Path) -> None:
    # The offscreen screen is 800 x 600, smaller than the window's minimum,
    # so Qt fits any restored size to it; the maximized state shows that the
    # geometry came back.
    win = build_main_window(qtbot, tmp_path)
    win.showMaximized()
    qtbot.waitUntil(win.isMaximized)
    win.set_workspace("training")
    key, splitter = next(
        (k, s)
        for k, s in win.splitters().items()
        if k.startswith("training") and s.isVisible()
    )
    total = sum(splitter.sizes())
    splitter.setSizes([total - 200, 200])
    sizes = splitter.sizes()
    win.close()

    again = build_main_window(qtbot, tmp_path)
    assert again.current_workspace() == "training"
    again.show()
    qtbot.waitUntil(again.isMaximized)
    again_splitter = again.splitters()[key]
    # the pane the user sized keeps its size; the stretching one takes up
    # what differs in the window's height
    qtbot.waitUntil(lambda: again_splitter.sizes()[1] == sizes[1])


def test_unreadable_saved_layout_is_ignored(qtbot, tmp_path: Path) -> None:
    ini = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    ini.setValue("window/last_workspace", "no such workspace")
    ini.setValue("window/geometry", "not a geometry")
    ini.sync()
    win = build_main_window(qtbot, tmp_path)
    assert win.current_workspace() == "environments"
    assert _min_width(win) <= MAX_MIN_WIDTH


def test_shortcuts_dialog_lists_the_actions_real_keys(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    dialog = win.shortcuts_dialog()
    qtbot.addWidget(dialog)
    rows = {(group, text): keys for group, text, keys in _tree_rows(dialog)}
    assert rows[(APPLICATION, "Quit")] == "Ctrl+Q"
    assert rows[(APPLICATION, "Training")] == "Ctrl+3"
    assert rows[(APPLICATION, "Keyboard shortcuts")] == "Ctrl+/"
    assert rows[("Environments", "Undo")] == "Ctrl+Z"
    assert rows[("Workflows", "Duplicate")] == "Ctrl+D"
    # derived, not copied: a changed shortcut shows changed
    win.workspaces["workflows"].flow_actions["duplicate"].setShortcut("Ctrl+Shift+U")
    dialog = win.shortcuts_dialog()
    qtbot.addWidget(dialog)
    rows = {(group, text): keys for group, text, keys in _tree_rows(dialog)}
    assert rows[("Workflows", "Duplicate")] == "Ctrl+Shift+U"


def _tree_rows(dialog):  # type: ignore[no-untyped-def]
    tree = dialog.tree
    for i in range(tree.topLevelItemCount()):
        section = tree.topLevelItem(i)
        for j in range(section.childCount()):
            item = section.child(j)
            yield section.text(0), item.text(0), item.text(1)


def test_documentation_opens_in_the_app(qtbot, tmp_path: Path) -> None:
    """Help → Documentation reads the README and docs/*.md in a window of
    the studio's own (handing the folder to the desktop did nothing where no
    file manager is set up): rendered, not their source; a link to another
    document opens it there, one to the web goes to the browser."""
    win = build_main_window(qtbot, tmp_path)
    opened: list[QUrl] = []
    win.open_url = opened.append
    win.open_documentation()
    dialog = win.docs_dialog
    assert isinstance(dialog, DocsDialog) and dialog.isVisible()
    assert dialog.paths[0] == README.resolve()
    assert DOCS_DIR.resolve() / "design.md" in dialog.paths
    assert dialog.shown == README.resolve()
    shown = dialog.browser.toPlainText()
    assert "make studio" in shown and "```" not in shown  # rendered Markdown
    dialog.browser.anchorClicked.emit(QUrl("docs/design.md"))
    assert dialog.shown == DOCS_DIR.resolve() / "design.md"
    assert opened == []
    dialog.browser.anchorClicked.emit(QUrl("https://stable-baselines3.readthedocs.io"))
    assert [u.toString() for u in opened] == [
        "https://stable-baselines3.readthedocs.io"
    ]
    win.open_documentation()  # again: the same window, brought forward
    assert win.docs_dialog is dialog


def test_a_document_that_cannot_be_read_is_one_sentence(qtbot, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Hello\n\nSee [the guide](guide.md).\n", "utf-8")
    (tmp_path / "guide.md").mkdir()  # a folder where a file was expected
    dialog = DocsDialog([readme, tmp_path / "guide.md"])
    qtbot.addWidget(dialog)
    assert dialog.browser.toPlainText().startswith("Hello")
    dialog.browser.anchorClicked.emit(QUrl("guide.md"))
    assert dialog.shown == (tmp_path / "guide.md").resolve()
    assert "cannot be read" in dialog.browser.toPlainText()


def test_banners_overlay_instead_of_pushing(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    win.show()
    win.resize(1000, 700)
    stack_top = win.stack.mapTo(win, win.stack.rect().topLeft())
    envs = win.environments
    tabs_top = envs.tabs.mapTo(win, envs.tabs.rect().topLeft())
    win.banner.show_message("A long message " * 30, "warning", "Restart engine")
    envs.banner.show_message("The spec could not be read.", "error")
    qtbot.waitUntil(lambda: win.banner.isVisible() and envs.banner.isVisible())
    # nothing under the banners moved
    assert win.stack.mapTo(win, win.stack.rect().topLeft()) == stack_top
    assert envs.tabs.mapTo(win, envs.tabs.rect().topLeft()) == tabs_top
    # the banner lies over its host's top, as wide as the host, its text whole
    host = win.banner.parentWidget()
    assert win.banner.width() == host.width() - 2 * OVERLAY_MARGIN
    assert win.banner.height() >= win.banner.heightForWidth(win.banner.width())
    win.resize(1100, 700)
    qtbot.waitUntil(lambda: win.banner.width() == host.width() - 2 * OVERLAY_MARGIN)
    win.banner.dismiss()
    assert not win.banner.isVisible()


def test_node_titles_shrink_before_they_are_cut(qtbot) -> None:
    from PySide6.QtGui import QFont, QFontMetricsF

    from widgets.node_graph import NODE_WIDTH, TITLE_POINTS, fit_title

    width = NODE_WIDTH - 8 - 26
    font = QFont()
    font.setBold(True)
    assert fit_title("Train (SB3)", font, width) == "Train (SB3)"
    assert font.pointSizeF() == TITLE_POINTS[0]
    # a title too wide at the usual size is whole at a smaller one
    title = "Collect rollouts"
    font.setPointSizeF(TITLE_POINTS[1])
    room = QFontMetricsF(font).horizontalAdvance(title)
    assert fit_title(title, font, room) == title
    assert font.pointSizeF() == TITLE_POINTS[1]
    # one that fits no size is elided, at the smallest
    long = "Evaluate language-model policy on every scenario group"
    assert fit_title(long, font, width).endswith("…")
    assert font.pointSizeF() == TITLE_POINTS[-1]
    assert QFontMetricsF(font).horizontalAdvance(fit_title(long, font, width)) <= width


def test_disabled_run_buttons_say_why(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    training = win.training
    training._update_controls()
    for button in (
        training.stop_button,
        training.resume_button,
        training.duplicate_button,
        training.folder_button,
    ):
        assert not button.isEnabled()
        assert button.toolTip() == "Select a run in the list first."


def test_shortcuts_dialog_lists_the_trace_viewers_labelling_keys(
    qtbot, tmp_path: Path
) -> None:
    """The labelling keys are handled by the trace viewer itself, not by
    actions; the dialog lists them from the same table that dispatches them."""
    from studio.model_manager.trace_viewer import TraceViewer

    win = build_main_window(qtbot, tmp_path)
    dialog = win.shortcuts_dialog()
    qtbot.addWidget(dialog)
    rows = {(group, text): keys for group, text, keys in _tree_rows(dialog)}
    assert rows[("Models", "Traces: Label good")] == "G"
    assert rows[("Models", "Traces: Pinned step is better (steps)")] == "1"
    assert rows[("Models", "Suggestions: Accept the suggestions")] == "A"
    listed = {t for g, t in rows if g == "Models" and t.startswith("Traces: ")}
    assert len(listed) == len(TraceViewer.KEYS)


def test_the_built_window_is_left_out_of_the_collectors_full_passes(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every workspace is built, what the window keeps for its life is
    frozen (``gc.freeze``): a full collection walked it on the GUI thread
    (40-50 ms, stalls while runs train). Garbage left before is collected
    first, not frozen for good; a process freezes once."""
    win = build_main_window(qtbot, tmp_path)
    gc.unfreeze()  # as in a new process
    gc.disable()  # only the studio's own collection may reclaim the cycle
    try:
        earlier = Cycle()
        earlier.me = earlier
        gone = weakref.ref(earlier)
        del earlier
        for name in WORKSPACES:
            win.workspaces[name]
        assert gc.get_freeze_count() > 10_000
        assert gone() is None
        froze_again: list[bool] = []
        monkeypatch.setattr(gc, "freeze", lambda: froze_again.append(True))
        other = build_main_window(qtbot, tmp_path / "other")
        for name in WORKSPACES:
            other.workspaces[name]
        assert froze_again == []
    finally:
        gc.enable()
        gc.unfreeze()


class Cycle:
    me: object = None
