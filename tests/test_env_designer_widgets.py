"""The designer's reusable widgets: state-machine canvas and grid painter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF

from studio.state.env_design import EMPTY_CELL
from widgets.grid_painter import COIN, EMPTY, GridPainter, GridPalette
from widgets.state_machine_editor import (
    READABLE_PX,
    Edge,
    StateMachineEditor,
    circular_layout,
    layered_layout,
    text_width,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "resources" / "examples" / "envs"
JIRA = sorted(EXAMPLES.glob("jira_*.env.json"))


def graph(path: Path) -> tuple[list[str], list[Edge], str]:
    body = json.loads(path.read_text())["workflow"]
    edges = [
        Edge(i, t["from"], t["to"], t["tool"])
        for i, t in enumerate(body["transitions"])
    ]
    return body["statuses"], edges, body["start"]


@pytest.mark.parametrize("path", JIRA, ids=lambda p: p.stem)
def test_layout_of_the_jira_examples_is_readable(qtbot, path: Path) -> None:
    statuses, edges, start = graph(path)
    positions = layered_layout(
        statuses,
        [(e.source, e.target) for e in edges],
        start,
        text_width(e.label for e in edges),
    )
    assert set(positions) == set(statuses)
    assert positions[start][0] == min(x for x, _ in positions.values())
    view = StateMachineEditor()
    qtbot.addWidget(view)
    view.set_graph(statuses, edges, start=start, positions=positions)
    boxes = [
        view.status_item(s).mapRectToScene(view.status_item(s).rect()) for s in statuses
    ]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.intersects(b), "status boxes overlap"
    # Every transition is drawn, and no label sits on a status box.
    assert len(view.edge_items()) == len(edges)
    for item in view.edge_items():
        label = item._label_rect
        for s in statuses:
            assert not label.intersects(
                view.status_item(s).mapRectToScene(view.status_item(s).rect())
            ), f"label {item.edge.label} covers {s}"


def test_circular_layout_spreads_statuses() -> None:
    pos = circular_layout(["a", "b", "c", "d"])
    xs = sorted(round(x) for x, _ in pos.values())
    assert len(set(pos.values())) == 4 and xs[0] < 0 < xs[-1]


def test_canvas_reports_moves_once_and_shows_problems(qtbot) -> None:
    view = StateMachineEditor()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.set_graph(
        ["a", "b"],
        [Edge(0, "a", "b", "go"), Edge(1, "a", "ghost", "lost")],
        start="a",
        positions={"a": (0.0, 0.0), "b": (300.0, 0.0)},
    )
    assert view.status_names() == ["a", "b"]
    assert view.status_item("ghost").ghost  # an unknown name gets a red ghost box
    view.show()
    qtbot.waitExposed(view)
    view.request_fit()
    item = view.status_item("b")
    moves = []
    view.statuses_moved.connect(moves.append)
    center = view.mapFromScene(item.scenePos())
    qtbot.mousePress(view.viewport(), Qt.MouseButton.LeftButton, pos=center)
    item.setPos(320.0, 40.0)  # what the drag does; the press/release frame it
    item.setPos(340.0, 60.0)
    qtbot.mouseRelease(view.viewport(), Qt.MouseButton.LeftButton, pos=center)
    assert moves == [{"b": (340.0, 60.0)}]
    view.set_problems({"a": "Unreachable."}, {1: "Not a status."})
    assert view.status_item("a").problem == "Unreachable."
    assert view.status_item("a").toolTip().startswith("Unreachable.")
    assert view.edge_item(1).problem == "Not a status."
    seen = []
    view.selection_changed.connect(lambda kind, key: seen.append((kind, key)))
    view.select("transition", 1)
    assert view.selected() == ("transition", 1) and seen[-1] == ("transition", 1)


def test_grid_stroke_is_reported_once_on_release(qtbot) -> None:
    painter = GridPainter()
    qtbot.addWidget(painter)
    painter.resize(400, 400)
    painter.set_grid(
        5, 5, {(0, 0): ("start", None, False), (4, 4): ("goal", None, False)}
    )
    strokes = []
    painter.stroke_finished.connect(strokes.append)
    painter.set_tool("wall")
    qtbot.mousePress(painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(1, 0))
    qtbot.mouseMove(painter, painter.cell_center(1, 4))  # a fast drag: no gaps
    assert strokes == []
    qtbot.mouseRelease(
        painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(1, 4)
    )
    assert len(strokes) == 1
    assert [(r, c, new) for r, c, _, new in strokes[0]] == [
        (1, c, ("wall", None, False)) for c in range(5)
    ]
    painter.set_tool("start")
    qtbot.mouseClick(painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(3, 3))
    assert sorted(strokes[1]) == [
        (0, 0, ("start", None, False), EMPTY),
        (3, 3, EMPTY, ("start", None, False)),
    ]
    painter.set_tool("reward", 0.5)
    qtbot.mouseClick(painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(4, 4))
    assert strokes[2] == [(4, 4, ("goal", None, False), ("goal", 0.5, False))]
    with pytest.raises(ValueError, match="Unknown tool 'lava'"):
        painter.set_tool("lava")


def _paint_stroke(qtbot, painter: GridPainter, cells: list[tuple[int, int]]) -> None:  # type: ignore[no-untyped-def]
    """Press on the first cell, drag over the rest and release on the last."""
    button = Qt.MouseButton.LeftButton
    qtbot.mousePress(painter, button, pos=painter.cell_center(*cells[0]))
    for cell in cells[1:]:
        qtbot.mouseMove(painter, painter.cell_center(*cell))
    qtbot.mouseRelease(painter, button, pos=painter.cell_center(*cells[-1]))


def _coin_pixels(painter: GridPainter, row: int, col: int) -> int:
    """How many pixels of the cell are drawn in the coin's colour."""
    image = painter.grab().toImage()
    rect = painter.cell_rect(row, col).toAlignedRect()
    coin = QColor(COIN)
    return sum(
        1
        for x in range(rect.left(), rect.right())
        for y in range(rect.top(), rect.bottom())
        if image.pixelColor(x, y) == coin
    )


def test_the_palettes_once_box_paints_cells_paid_once(qtbot) -> None:  # type: ignore[no-untyped-def]
    painter = GridPainter()
    palette = GridPalette(painter)
    for widget in (painter, palette):
        qtbot.addWidget(widget)
    painter.resize(300, 300)
    painter.set_grid(
        5, 5, {(0, 0): ("start", None, False), (4, 4): ("goal", None, False)}
    )
    palette.show()
    qtbot.waitExposed(palette)
    assert EMPTY == EMPTY_CELL  # the model's cells and the painter's are alike
    assert palette.once.toolTip().startswith("Paid the first time the cell is")
    strokes: list[list] = []
    painter.stroke_finished.connect(strokes.append)
    palette.buttons["reward"].click()
    palette.reward.setValue(0.25)
    qtbot.mouseClick(palette.once, Qt.MouseButton.LeftButton)
    assert palette.once.isChecked() and painter.once
    _paint_stroke(qtbot, painter, [(2, 0), (2, 1), (2, 2)])
    assert [(r, c, new) for r, c, _, new in strokes[-1]] == [
        (2, c, ("empty", 0.25, True)) for c in range(3)
    ]
    assert painter.cell(2, 1) == ("empty", 0.25, True)
    # The goal keeps its kind and gets the coin.
    _paint_stroke(qtbot, painter, [(4, 4)])
    assert strokes[-1] == [(4, 4, ("goal", None, False), ("goal", 0.25, True))]
    assert _coin_pixels(painter, 2, 1) > 20 and _coin_pixels(painter, 4, 4) > 20
    # Cleared, the box paints rewards paid each entry over the coins.
    qtbot.mouseClick(palette.once, Qt.MouseButton.LeftButton)
    assert not palette.once.isChecked() and not painter.once
    _paint_stroke(qtbot, painter, [(2, 1), (2, 2)])
    assert strokes[-1] == [
        (2, 1, ("empty", 0.25, True), ("empty", 0.25, False)),
        (2, 2, ("empty", 0.25, True), ("empty", 0.25, False)),
    ]
    assert _coin_pixels(painter, 2, 1) == 0 and _coin_pixels(painter, 2, 0) > 20
    # Start moved onto a coin keeps it; a wall over one drops it.
    palette.buttons["start"].click()
    _paint_stroke(qtbot, painter, [(2, 0)])
    assert painter.cell(2, 0) == ("start", 0.25, True)
    palette.buttons["wall"].click()
    _paint_stroke(qtbot, painter, [(4, 4)])
    assert painter.cell(4, 4) == ("wall", None, False)


def test_a_fitted_small_canvas_still_names_every_status(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The Jira graph fitted in the canvas a 1,024 x 700 window leaves (about
    300 x 250 px) is zoomed out to where the 10 pt names would be 4 px; each
    status is still named whole in a READABLE_PX font, painted, and the
    transitions' labels (unreadable there) are left to their tooltips."""
    path = EXAMPLES / "jira_issue_resolution.env.json"
    statuses, edges, start = graph(path)
    positions = layered_layout(
        statuses,
        [(e.source, e.target) for e in edges],
        start,
        text_width(e.label for e in edges),
    )
    view = StateMachineEditor()
    qtbot.addWidget(view)
    view.resize(300, 250)
    view.set_graph(statuses, edges, start=start, positions=positions)
    view.show()
    qtbot.waitExposed(view)
    view.request_fit()
    assert view.zoom() < 0.45
    image = view.viewport().grab().toImage()
    for name in statuses:
        item = view.status_item(name)
        centre = view.mapFromScene(item.scenePos())
        metrics_px = QFontMetricsF(item._font).height() * view.zoom()
        assert metrics_px < READABLE_PX  # the plain name would be unreadable
        box = QRectF(centre.x() - 30, centre.y() - 6, 60, 12).toAlignedRect()
        box = box.intersected(image.rect())
        dark = sum(
            QColor(image.pixel(QPoint(x, y))).lightnessF() < 0.35
            for y in range(box.top(), box.bottom() + 1)
            for x in range(box.left(), box.right() + 1)
        )
        assert dark > 5, f"no name drawn for {name}"
        assert name in item.toolTip() or name in item.text
    for edge in view.edge_items():
        assert edge.edge.label in edge.toolTip()


# The offscreen platform cannot raise the tooltip's window; it shows it.
@pytest.mark.qt_log_ignore("This plugin does not support raise")
def test_hovering_a_cell_says_what_it_is_and_what_it_pays(qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    painter = GridPainter()
    qtbot.addWidget(painter)
    painter.resize(300, 300)
    painter.set_grid(
        3,
        3,
        {
            (0, 0): ("start", None, False),
            (0, 1): ("empty", 0.5, True),
            (1, 1): ("empty", -0.1, False),
            (2, 2): ("goal", 1.0, False),
        },
    )
    painter.set_problem_cells({(0, 1): "Paid again on every visit."})
    painter.show()
    qtbot.waitExposed(painter)

    def hover(row: int, col: int) -> str:
        pos = painter.cell_center(row, col)
        QApplication.sendEvent(
            painter, QHelpEvent(QEvent.Type.ToolTip, pos, painter.mapToGlobal(pos))
        )
        return QToolTip.text()

    assert hover(1, 1) == "Row 1, column 1. Empty. Pays -0.1 each time it is entered."
    assert hover(0, 1) == (
        "Row 0, column 1. Empty. Pays +0.5 the first time it is entered in an "
        "episode.\nPaid again on every visit."
    )
    assert hover(2, 2) == (
        "Row 2, column 2. Goal: entering it ends the episode with success. "
        "Pays +1 each time it is entered."
    )
    assert hover(0, 0) == "Row 0, column 0. Start: each episode begins here."
    # Mid-stroke, nothing covers the cells being painted.
    qtbot.mousePress(painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(2, 0))
    hover(2, 0)
    assert not QToolTip.isVisible()
    qtbot.mouseRelease(
        painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(2, 0)
    )
