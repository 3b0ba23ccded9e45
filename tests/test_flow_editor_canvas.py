"""The node-graph canvas and the palette as reusable widgets, driven by
mouse, keyboard and drop events."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from widgets.node_graph import NODE_TYPE_MIME, STATE_COLORS, NodeGraphView, Port
from widgets.node_palette import NodePalette


def make_canvas(qtbot) -> NodeGraphView:
    view = NodeGraphView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.add_node("env", "Environment", outputs=[Port("env", "env")], pos=(0, 0))
    view.add_node(
        "train",
        "Train",
        inputs=[Port("env", "env", required=True)],
        outputs=[Port("policy", "policy")],
        pos=(300, 0),
    )
    view.add_node("eval", "Evaluate", inputs=[("policy", "policy")], pos=(600, 0))
    view.show()
    qtbot.waitExposed(view)
    view.fit_view()
    return view


def vp(view: NodeGraphView, scene_pos: QPointF) -> QPoint:
    return view.mapFromScene(scene_pos)


def drag(qtbot, view: NodeGraphView, start: QPoint, end: QPoint) -> None:
    port = view.viewport()
    qtbot.mousePress(port, Qt.MouseButton.LeftButton, pos=start)
    steps = 6
    for i in range(1, steps + 1):
        p = start + (end - start) * (i / steps)
        qtbot.mouseMove(port, p)
    qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=end)


def test_dragging_between_ports_requests_a_link(qtbot) -> None:
    view = make_canvas(qtbot)
    start = vp(view, view.port_scene_pos("env", "env", output=True))
    end = vp(view, view.port_scene_pos("train", "env", output=False))
    with qtbot.waitSignal(view.link_requested) as blocker:
        drag(qtbot, view, start, end)
    assert blocker.args == ["env", "env", "train", "env"]
    # Dragging from an input to an output asks for the same direction.
    start = vp(view, view.port_scene_pos("eval", "policy", output=False))
    end = vp(view, view.port_scene_pos("train", "policy", output=True))
    with qtbot.waitSignal(view.link_requested) as blocker:
        drag(qtbot, view, start, end)
    assert blocker.args == ["train", "policy", "eval", "policy"]
    assert not view.links  # the host decides; nothing drawn yet
    view.add_link("env", "env", "train", "env")
    assert ("env", "env", "train", "env") in view.links
    view.show_link_refused("A policy output cannot feed the env input.")
    assert view.last_refusal == "A policy output cannot feed the env input."


def test_a_node_drag_is_reported_once_on_release(qtbot) -> None:
    view = make_canvas(qtbot)
    view.add_link("env", "env", "train", "env")
    moves = []
    view.nodes_moved.connect(moves.append)
    rect = view.node_scene_rect("train")
    start = vp(view, rect.topLeft() + QPointF(60, 12))  # the title bar
    end = start + QPoint(80, 60)
    drag(qtbot, view, start, end)
    assert len(moves) == 1
    (old, new) = moves[0]["train"]
    assert old == (300.0, 0.0)
    assert new != old and new[0] % 20 == 0 and new[1] % 20 == 0  # snapped
    link = view.links[("env", "env", "train", "env")]
    assert link.path().pointAtPercent(1.0) == view.port_scene_pos("train", "env", False)


def test_drop_of_a_node_type_is_requested_at_the_scene_position(qtbot) -> None:
    view = make_canvas(qtbot)
    mime = QMimeData()
    mime.setData(NODE_TYPE_MIME, b"rl.train")
    where = QPointF(200, 300)
    enter = QDragEnterEvent(
        where.toPoint(),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(view.viewport(), enter)
    assert enter.isAccepted()
    event = QDropEvent(
        where,
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    with qtbot.waitSignal(view.node_drop_requested) as blocker:
        QApplication.sendEvent(view.viewport(), event)
    assert blocker.args[0] == "rl.train"
    assert blocker.args[1] == view.mapToScene(where.toPoint())


def test_selection_delete_zoom_and_badges(qtbot) -> None:
    view = make_canvas(qtbot)
    view.add_link("env", "env", "train", "env")
    selections = []
    view.selection_changed.connect(selections.append)
    view.select_nodes(["train", "eval"])
    assert selections[-1] == ["train", "eval"]
    view.setFocus()
    with qtbot.waitSignal(view.delete_requested) as blocker:
        qtbot.keyClick(view, Qt.Key.Key_Delete)
    assert blocker.args == [["train", "eval"]]

    # Rubber band over the first node only.
    view.select_nodes([])
    rect = view.node_scene_rect("env")
    drag(
        qtbot,
        view,
        vp(view, rect.topLeft() - QPointF(30, 30)),
        vp(view, rect.bottomRight() + QPointF(10, 10)),
    )
    assert view.selected_nodes() == ["env"]

    before = view.zoom()
    view.set_zoom(before * 2)
    assert abs(view.zoom() - min(3.0, before * 2)) < 1e-6
    view.set_zoom(100)
    assert view.zoom() == 3.0

    view.set_node_state("train", "running", 0.4)
    assert view.node_state("train") == ("running", 0.4)
    view.set_node_errors("eval", ["The required input 'policy' is not linked."])
    assert "not linked" in view.nodes["eval"].toolTip()
    view.fit_view()
    image = QImage(view.viewport().size(), QImage.Format.Format_ARGB32)
    view.viewport().render(image)
    # The running badge's blue and the error mark's red are on screen.
    colors = {
        image.pixelColor(x, y).name()
        for x in range(0, image.width(), 2)
        for y in range(0, image.height(), 2)
    }
    assert "#4c9be8" in colors and "#e15759" in colors

    view.remove_node("train")
    assert not view.links and "train" not in view.nodes
    view.clear()
    assert not view.nodes


def test_palette_groups_searches_and_activates(qtbot) -> None:
    palette = NodePalette()
    qtbot.addWidget(palette)
    palette.set_node_types(
        [
            {"type": "env.environment", "title": "Environment", "category": "Envs"},
            {
                "type": "rl.train",
                "title": "Train (SB3)",
                "category": "RL",
                "help": "PPO",
            },
            {"type": "rl.evaluate", "title": "Evaluate", "category": "RL"},
        ]
    )
    assert palette.visible_types() == ["env.environment", "rl.evaluate", "rl.train"]
    qtbot.keyClicks(palette.search, "ppo")
    assert palette.visible_types() == ["rl.train"]
    palette.search.clear()
    qtbot.keyClicks(palette.search, "zzz")
    assert palette.visible_types() == [] and palette.empty_label.isVisibleTo(palette)
    palette.search.clear()
    item = palette.type_item("rl.evaluate")
    mime = palette.tree.mimeData([item])
    assert bytes(mime.data(NODE_TYPE_MIME).data()) == b"rl.evaluate"
    with qtbot.waitSignal(palette.node_type_activated) as blocker:
        palette.tree.itemActivated.emit(item, 0)
    assert blocker.args == ["rl.evaluate"]


def test_pan_with_middle_button_or_space_and_zoom_with_the_wheel(qtbot) -> None:
    view = make_canvas(qtbot)
    port = view.viewport()
    view.set_zoom(1.0)
    here = QPoint(450, 300)
    under = view.mapToScene(here)
    # Middle-button drag: the scene follows the mouse, nothing is selected.
    qtbot.mousePress(port, Qt.MouseButton.MiddleButton, pos=here)
    qtbot.mouseMove(port, here + QPoint(60, 40))
    qtbot.mouseRelease(port, Qt.MouseButton.MiddleButton, pos=here + QPoint(60, 40))
    moved = view.mapToScene(here)
    assert (under.x() - moved.x(), under.y() - moved.y()) == (60.0, 40.0)
    # Space + left drag over a node pans instead of moving the node.
    before = view.node_pos("train")
    grab = vp(view, view.node_scene_rect("train").topLeft() + QPointF(60, 12))
    view.setFocus()
    qtbot.keyPress(view, Qt.Key.Key_Space)
    assert view.space_held
    under = view.mapToScene(grab)
    drag(qtbot, view, grab, grab + QPoint(-30, 20))
    qtbot.keyRelease(view, Qt.Key.Key_Space)
    assert view.node_pos("train") == before and not view.space_held
    assert view.mapToScene(grab) == under + QPointF(30, -20)
    # The wheel zooms about the mouse: the point under it stays put.
    anchor = QPointF(300, 200)
    under = view.mapToScene(anchor.toPoint())
    wheel = QWheelEvent(
        anchor,
        view.mapToGlobal(anchor),
        QPoint(),
        QPoint(0, 240),  # two notches
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(port, wheel)
    assert abs(view.zoom() - 1.15**2) < 1e-6
    after = view.mapToScene(anchor.toPoint())
    assert abs(after.x() - under.x()) <= 1 and abs(after.y() - under.y()) <= 1
    # Fit brings every node back into view.
    view.pan_by(5000, 5000)
    view.fit_view()
    visible = view.mapToScene(port.rect()).boundingRect()
    for node_id in view.nodes:
        assert visible.contains(view.node_scene_rect(node_id))


def test_far_out_nodes_still_show_state_errors_and_ports(qtbot) -> None:
    view = make_canvas(qtbot)
    view.add_link("env", "env", "train", "env")
    view.set_node_state("train", "stopped", 0.0, "Stopped before the end.")
    view.set_node_errors("eval", ["The required input 'policy' is not linked."])
    view.set_zoom(0.3)  # below the level of detail: no text, plain shapes
    view.centerOn(view.node_scene_rect("train").center())
    image = view.viewport().grab().toImage()
    colors = {
        image.pixelColor(x, y).name()
        for x in range(0, image.width(), 2)
        for y in range(0, image.height(), 2)
    }
    # The stopped badge, the error mark and the env ports' color.
    port = view.nodes["env"].outputs["env"].color.name()
    assert {STATE_COLORS["stopped"], "#e15759", port} <= colors
