"""Every workspace fits a 1024x768 and a 1366x768 screen, light and dark
(issue 29, item 3): the first window's frame lies inside the screen, the
status bar inside the window, and no widget of any tab is given less than
its minimum size. One window; its workspaces, tabs, sizes and themes are
switched, not rebuilt."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QApplication,
    QFormLayout,
    QFrame,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QTabWidget,
    QWidget,
)

from studio.main_window import DEFAULT_SIZE, MINIMUM_HEIGHT, WORKSPACES, MainWindow
from studio.model_manager.trace_viewer import BROWSER_WIDTH, TraceViewer
from studio.theme import apply_theme
from tests.models_workspace_support import write_trace_file
from tests.studio_harness import build_main_window
from widgets.chain_view import ChainItem, ChainView
from widgets.fit import (
    FRAME_ALLOWANCE,
    ScrollStrip,
    fit_window,
    fitted_geometry,
    minimum_height,
    screen_capped,
)

SCREENS = ((1024, 768), (1366, 768))
ROWS = 5
"""A list or table at its default layout has room for this many rows."""
CLIP_TOLERANCE_PX = 1
"""A layout shares out odd pixels one at a time, so a widget may get one
pixel under its minimum without losing a line of text or a border."""


QT_SIZES_ITSELF = {"qt_spinbox_lineedit"}
"""Qt's own parts that their widget sizes, below their minimum by design
(a spin box fits its line edit to the field between its frame and arrows)."""


def _scrolled(widget: QWidget, root: QWidget) -> bool:
    """Whether ``widget`` lies inside a scroll area under ``root``: there it
    scrolls rather than being cut."""
    parent = widget.parentWidget()
    while parent is not None and parent is not root:
        if isinstance(parent, QAbstractScrollArea):
            return True
        parent = parent.parentWidget()
    return False


def _minimum(widget: QWidget) -> tuple[int, int]:
    """The size a layout will not go under: an explicit minimum where one
    is set, else the minimum size hint; none along an Ignored policy."""
    hint = widget.minimumSizeHint()
    policy = widget.sizePolicy()
    ignored = QSizePolicy.Policy.Ignored
    width = widget.minimumWidth() or hint.width()
    height = widget.minimumHeight() or hint.height()
    return (
        0 if policy.horizontalPolicy() == ignored else width,
        0 if policy.verticalPolicy() == ignored else height,
    )


def clipped(root: QWidget) -> list[str]:
    """The shown widgets under ``root`` that got less than their minimum."""
    found = []
    for widget in root.findChildren(QWidget):
        if (
            not widget.isVisible()
            or _scrolled(widget, root)
            or widget.objectName() in QT_SIZES_ITSELF
        ):
            continue
        need_w, need_h = _minimum(widget)
        if (
            widget.width() + CLIP_TOLERANCE_PX < need_w
            or widget.height() + CLIP_TOLERANCE_PX < need_h
        ):
            name = widget.objectName() or type(widget).__name__
            found.append(
                f"{name} {widget.width()}x{widget.height()} < {need_w}x{need_h}"
            )
    return found


def too_short(root: QWidget) -> list[str]:
    """The shown lists and tables under ``root`` with room for fewer than
    ``ROWS`` rows, and the shown forms in scroll areas that are not whole."""
    found = []
    for view in root.findChildren(QAbstractItemView):
        if not view.isVisible() or _scrolled(view, root):
            continue
        row = view.sizeHintForRow(0) if view.model() and view.model().rowCount() else 0
        row = max(row, view.fontMetrics().height() + 4)
        if view.viewport().height() < ROWS * row:
            name = view.objectName() or type(view).__name__
            found.append(f"{name} shows {view.viewport().height() // row} rows")
    for strip in root.findChildren(ScrollStrip):
        if strip.isVisible() and strip.horizontalScrollBar().maximum() > 0:
            found.append(
                f"strip {strip.widget().minimumSizeHint().width()} px "
                f"in {strip.viewport().width()}"
            )
    for area in root.findChildren(QScrollArea):
        form = area.widget()
        if (
            area.isVisible()
            and form is not None
            and form.findChild(QFormLayout) is not None
            and not _scrolled(area, root)
            and area.viewport().height() < form.minimumSizeHint().height()
        ):
            found.append(
                f"form {form.objectName() or type(form).__name__} "
                f"{area.viewport().height()} of {form.minimumSizeHint().height()} px"
            )
    return found


def _every_tab(root: QWidget) -> Iterator[str]:
    """Shows each tab of each tab widget under ``root`` in turn (the ones
    shown by switching), yielding where it is."""
    yield "default"
    for tabs in root.findChildren(QTabWidget):
        current = tabs.currentIndex()
        for i in range(tabs.count()):
            if tabs.isVisible() and tabs.isTabVisible(i) and i != current:
                tabs.setCurrentIndex(i)
                yield tabs.tabText(i)
        tabs.setCurrentIndex(current)


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    style, palette = app.style().name(), app.palette()
    win = build_main_window(qtbot, tmp_path)
    win.show()
    for name in WORKSPACES:
        win.workspaces[name]
    yield win
    app.setStyle(style)
    app.setPalette(palette)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_workspace_fits_small_screens(window: MainWindow, theme: str) -> None:
    apply_theme(theme)
    app = QApplication.instance()
    problems: list[str] = []
    for width, height in SCREENS:
        screen = QRect(0, 0, width, height)
        # before the window is shown its frame is guessed, after it is known
        first = fitted_geometry(DEFAULT_SIZE, screen, window.minimumSizeHint())
        assert screen.contains(first.marginsAdded(FRAME_ALLOWANCE))
        fit_window(window, DEFAULT_SIZE, screen)
        app.processEvents()  # type: ignore[union-attr]
        assert screen.contains(window.frameGeometry())
        for name in WORKSPACES:
            window.set_workspace(name)
            central = window.centralWidget()
            for tab in _every_tab(central):
                app.processEvents()  # type: ignore[union-attr]
                where = f"{width}x{height} {theme} {name} / {tab}"
                bar = window.statusBar()
                assert bar.isVisible(), where
                assert window.rect().contains(bar.geometry()), where
                problems += [f"{where}: {c}" for c in clipped(central)]
                problems += [f"{where}: {c}" for c in too_short(central)]
    assert problems == [], "\n".join(problems)


def _contrast(a: QColor, b: QColor) -> float:
    """WCAG's contrast ratio of two colours (1 to 21)."""

    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        r, g, b_ = (channel(x) for x in (c.redF(), c.greenF(), c.blueF()))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b_

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


READABLE = 4.5
"""WCAG AA's contrast for body text."""


def _text_on(widget: QWidget, label: QLabel) -> float:
    """The contrast of ``label``'s text on ``widget``'s background (a pixel
    just inside its border)."""
    widget.ensurePolished()
    label.ensurePolished()
    # grabbed with what lies under it: a translucent background shows it
    top = widget.window()
    background = top.grab().toImage().pixelColor(widget.mapTo(top, QPoint(4, 4)))
    return _contrast(label.palette().color(QPalette.ColorRole.WindowText), background)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_banners_and_the_current_lineage_node_read_on_both_themes(
    window: MainWindow, theme: str
) -> None:
    apply_theme(theme)
    window.set_workspace("training")
    for level in ("info", "warning", "error", "success"):
        window.banner.show_message("The engine was restarted.", level, "Restart")
        label = window.banner.findChild(QLabel)
        assert _text_on(window.banner, label) >= READABLE, level
    chain = ChainView()
    chain.set_items(
        [
            ChainItem("run1", "run", "A run"),
            ChainItem("m1", "sb3-policy", "Model", current=True),
        ]
    )
    chain.resize(400, 80)
    chain.show()
    boxes = chain.findChildren(QFrame, "chain_box")
    assert len(boxes) == 2
    for box in boxes:
        assert _text_on(box, box.findChild(QLabel)) >= READABLE


def test_the_engine_banner_leaves_the_run_buttons_free(window: MainWindow) -> None:
    window.resize(1024, 700)
    window.set_workspace("training")
    window.banner.show_message("The engine crashed. " * 20, "warning", "Restart engine")
    QApplication.processEvents()
    training = window.training
    banner = QRect(window.banner.mapTo(window, QPoint()), window.banner.size())
    for button in (training.new_button, training.stop_button, training.resume_button):
        place = QRect(button.mapTo(window, QPoint()), button.size())
        assert not banner.intersects(place), button.text()


def test_the_run_name_column_stays_readable_and_keeps_its_width(
    qtbot, window: MainWindow, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    window.showMaximized()
    table = window.training.table
    name = "PPO CartPole · brisk-otter"
    runs = [
        {"id": f"r{i}", "name": name, "status": "completed", "kind": "rl"}
        for i in range(3)
    ]
    table.set_records(runs)
    header = table.view.horizontalHeader()
    room = table.view.fontMetrics().horizontalAdvance(name)
    assert header.sectionSize(0) >= room  # whole, not "PP…"
    header.resizeSection(0, room + 60)  # as the user drags it
    table.set_records(runs)
    assert header.sectionSize(0) == room + 60
    window.close()

    again = build_main_window(qtbot, tmp_path)  # the same settings file
    again.training.table.set_records(runs)
    assert again.training.table.view.horizontalHeader().sectionSize(0) == room + 60


def test_a_narrow_inspector_gives_its_fields_the_whole_width(
    window: MainWindow,
) -> None:
    """The flow inspector's form puts labels over fields: beside the label
    "Model folder or hub id", the base model's field got 54 px ("ruct")."""
    form = window.workspaces["workflows"].editor.inspector.param_form  # type: ignore[attr-defined]
    form.set_schema(
        [{"name": "model", "type": "path", "title": "Model folder or hub id"}],
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"},
    )
    form.resize(280, 200)
    form.show()
    QApplication.processEvents()
    field = form.editor("model")
    assert field.width() >= form.width() - 30  # the margins only


def test_the_sweep_tab_gives_back_the_room_it_took(window: MainWindow) -> None:
    window.resize(1024, 726)
    window.set_workspace("training")
    training = window.training
    QApplication.processEvents()
    before = training._split.sizes()
    training.tabs.setCurrentWidget(training.sweep_tab)
    QApplication.processEvents()
    # The form takes every pixel the runs list and the charts can spare,
    # and no more: the list's filter row stays whole (it was cut), and the
    # form scrolls for what is left.
    top = training._split.widget(0)
    form = training.sweep_tab.widget().minimumSizeHint().height()
    assert training.sweep_tab.viewport().height() >= form or (
        top.height() <= minimum_height(top) + CLIP_TOLERANCE_PX
    )
    assert clipped(training.lists) == []
    training.tabs.setCurrentIndex(0)
    assert training._split.sizes() == before


def test_the_runs_list_beside_the_charts_has_room_for_names(
    window: MainWindow,
) -> None:
    """At 1024x768 the runs list keeps about a third of the width: the
    charts' toolbar once held it to 218 px, its names elided."""
    fit_window(window, DEFAULT_SIZE, QRect(0, 0, 1024, 768))
    window.set_workspace("training")
    QApplication.processEvents()
    assert window.training.lists.width() >= 280


def settle(window: QWidget) -> None:
    """Let the layouts settle: a row that wraps at a new width asks for a
    new minimum height, which may resize the window once more."""
    for _ in range(8):
        before = [w.geometry() for w in window.findChildren(QWidget)]
        QApplication.processEvents()
        if before == [w.geometry() for w in window.findChildren(QWidget)]:
            return


def test_nothing_is_clipped_at_the_window_s_minimum_size(window: MainWindow) -> None:
    """The smallest window Qt lets a user make: every workspace and tab at
    it, light and dark, has no widget under its minimum (lists may show
    fewer rows there)."""
    app = QApplication.instance()
    problems: list[str] = []
    for theme in ("light", "dark"):
        apply_theme(theme)
        app.processEvents()  # type: ignore[union-attr]
        smallest = window.minimumSizeHint().expandedTo(window.minimumSize())
        window.resize(smallest)
        app.processEvents()  # type: ignore[union-attr]
        for name in WORKSPACES:
            window.set_workspace(name)
            central = window.centralWidget()
            for tab in _every_tab(central):
                settle(window)
                where = f"{window.width()}x{window.height()} {theme} {name} / {tab}"
                bar = window.statusBar()
                assert window.rect().contains(bar.geometry()), where
                problems += [f"{where}: {c}" for c in clipped(central)]
    assert problems == [], "\n".join(problems)


def test_the_agreement_chart_follows_the_theme(window: MainWindow) -> None:
    """The auto-labeler's agreement chart drew on pyqtgraph's black in the
    light theme."""
    models = window.workspaces["models"]
    window.set_workspace("models")
    models.tabs.setCurrentWidget(models.trace_viewer)  # type: ignore[attr-defined]
    plot = models.trace_viewer.auto.agreement_plot  # type: ignore[attr-defined]
    for theme, light in (("light", True), ("dark", False), ("light", True)):
        apply_theme(theme)
        QApplication.processEvents()
        view = plot.getPlotItem().getViewBox()
        middle = plot.mapFromScene(view.sceneBoundingRect().center())
        color = plot.grab().toImage().pixelColor(middle)
        assert plot.isVisible() and plot.rect().contains(middle)
        assert (color.lightnessF() > 0.8) == light, (theme, color.name())
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        plot.grab().save(str(Path(shots) / "agreement-chart-light.png"))


def test_the_minimum_height_gives_way_to_a_screen_with_a_panel() -> None:
    """A 768 px screen less a 32 px panel has no room for the 720 px minimum
    and its frame: the minimum is the room, so the frame and the status bar
    stay on the screen; a taller screen keeps the whole minimum."""
    panel = QRect(0, 32, 1024, 768 - 32)
    capped = screen_capped(MINIMUM_HEIGHT, panel)
    assert capped < MINIMUM_HEIGHT
    placed = fitted_geometry(DEFAULT_SIZE, panel, QSize(970, capped))
    assert panel.contains(placed.marginsAdded(FRAME_ALLOWANCE))
    assert screen_capped(MINIMUM_HEIGHT, QRect(0, 0, 1366, 900)) == MINIMUM_HEIGHT


PANEL_ROOMS = (QRect(0, 32, 1024, 736), QRect(0, 32, 1366, 736))
"""A 768 px screen less a 32 px panel: the window's minimum is capped to
the room (``screen_capped``), lower than ``MINIMUM_HEIGHT``."""


def _write_long_trace(project: Path) -> None:
    """Twelve episodes of eight steps: more rows than any pane shows."""
    path = write_trace_file(project / "data" / "traces" / "collect.jsonl")
    two = [json.loads(line) for line in path.read_text().splitlines()[:2]]
    episodes = []
    for e in range(12):
        steps = [dict(s, t=t) for t, s in enumerate(two[e % 2]["steps"] * 4)]
        episodes.append(dict(two[e % 2], episode=e, steps=steps, length=len(steps)))
    path.write_text("".join(json.dumps(ep) + "\n" for ep in episodes))


def _traces_short(viewer: TraceViewer) -> list[str]:
    """The Traces panes that do not show their header and ``ROWS`` rows
    (the prompt: ``ROWS`` lines, or its whole text)."""
    found = []
    browser = viewer.browser
    for name, records in (("episodes", browser.episodes), ("steps", browser.steps)):
        view = records.view
        rows = view.viewport().height() / view.rowHeight(0)
        if not view.horizontalHeader().isVisible() or rows < ROWS:
            found.append(f"{name} shows {rows:.1f} rows")
    prompt = browser.prompt
    lines = prompt.viewport().height() / prompt.fontMetrics().lineSpacing()
    whole = prompt.verticalScrollBar().maximum() == 0
    if lines < ROWS and not whole:
        found.append(f"prompt shows {lines:.1f} lines")
    return found


def test_the_traces_tab_and_every_workspace_fit_the_capped_minimum(
    window: MainWindow, tmp_path: Path
) -> None:
    """At the lowest a window goes on a screen with a panel, the Traces
    tab's episodes, steps and prompt each show five rows (they showed two,
    stacked under filters wrapped on four lines), and no workspace's
    widget is under its minimum."""
    models = window.workspaces["models"]
    viewer: TraceViewer = models.trace_viewer  # type: ignore[attr-defined]
    project = tmp_path / "project"
    _write_long_trace(project)
    viewer.set_project(str(project))
    viewer.files.setCurrentRow(0)
    viewer.browser.episodes.view.selectRow(0)
    viewer.browser.steps.view.selectRow(0)
    problems: list[str] = []
    for room in PANEL_ROOMS:
        window.setMinimumHeight(screen_capped(MINIMUM_HEIGHT, room))
        fit_window(window, DEFAULT_SIZE, room)
        window.resize(window.width(), window.minimumHeight())
        settle(window)
        size = f"{window.width()}x{window.height()}"
        assert window.height() < MINIMUM_HEIGHT, size
        window.set_workspace("models")
        models.tabs.setCurrentWidget(viewer)  # type: ignore[attr-defined]
        settle(window)
        problems += [f"{size} Traces: {p}" for p in _traces_short(viewer)]
        for name in WORKSPACES:
            window.set_workspace(name)
            central = window.centralWidget()
            for tab in _every_tab(central):
                settle(window)
                where = f"{size} {name} / {tab}"
                assert window.rect().contains(window.statusBar().geometry()), where
                problems += [f"{where}: {c}" for c in clipped(central)]
    assert problems == [], "\n".join(problems)


def test_the_traces_tab_borrows_width_from_the_models_table_and_gives_it_back(
    window: MainWindow,
) -> None:
    fit_window(window, DEFAULT_SIZE, PANEL_ROOMS[0])
    window.set_workspace("models")
    models = window.workspaces["models"]
    settle(window)
    split = models._split  # type: ignore[attr-defined]
    before = split.sizes()
    viewer: TraceViewer = models.trace_viewer  # type: ignore[attr-defined]
    table: QWidget = models.table  # type: ignore[attr-defined]
    models.tabs.setCurrentWidget(viewer)  # type: ignore[attr-defined]
    settle(window)
    # the width it wants, or all the table can give on a 1024 px screen
    assert split.sizes()[1] > before[1]
    assert viewer.browser.width() >= BROWSER_WIDTH - CLIP_TOLERANCE_PX or (
        table.width() <= table.minimumSizeHint().width() + CLIP_TOLERANCE_PX
    )
    models.tabs.setCurrentIndex(0)  # type: ignore[attr-defined]
    assert split.sizes() == before
