"""Node titles stay readable: the bundled LLM flow fitted in a 1,024 x 700
window names every node in a legible on-screen font, at 100 % and (in a
subprocess) at 200 % scaling, and a title too long for a node's header is
wrapped or elided with the whole title in the tooltip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPoint, QPointF, QRectF
from PySide6.QtGui import QColor, QFont, QImage
from PySide6.QtWidgets import QApplication, QWidget

from widgets.node_graph import (
    LOD_NODE_DETAIL,
    NODE_WIDTH,
    OVERVIEW_TITLE_PX,
    NodeGraphView,
    NodeItem,
    wrap_title,
)

ROOT = Path(__file__).resolve().parent.parent
LLM_FLOW = ROOT / "resources" / "examples" / "flows" / "jira_llm_grpo.flow.json"
SMALLEST_PX = OVERVIEW_TITLE_PX[-1]


def _ink(image: QImage, box: QRectF) -> int:
    """Dark (text) pixels of ``image`` inside ``box`` (device pixels)."""
    count = 0
    r = box.toAlignedRect().intersected(image.rect())
    for y in range(r.top(), r.bottom() + 1):
        for x in range(r.left(), r.right() + 1):
            if QColor(image.pixel(x, y)).lightnessF() < 0.35:
                count += 1
    return count


def _title_report(
    view: NodeGraphView, node: NodeItem, image: QImage, window: QWidget
) -> dict[str, Any]:
    """What the fitted canvas draws for ``node``'s title (``image``: a grab
    of ``window``)."""
    lod = view.zoom()
    assert lod < LOD_NODE_DETAIL  # a fitted 11-node flow shows its overview
    px, lines = node.overview_title(lod)
    box = node.mapRectToScene(node._overview_title_box(lod))
    on_screen = QRectF(view.mapFromScene(box).boundingRect())
    on_screen.translate(QPointF(view.viewport().mapTo(window, QPoint(0, 0))))
    dpr = image.devicePixelRatio()
    device = QRectF(
        on_screen.x() * dpr,
        on_screen.y() * dpr,
        on_screen.width() * dpr,
        on_screen.height() * dpr,
    )
    return {
        "title": node.title,
        "lines": list(lines),
        "screen_px": px,
        "ink": _ink(image, device),
        "tooltip": node.toolTip(),
    }


def fitted_titles(tmp: Path) -> dict[str, Any]:
    """Open the bundled LLM flow in a 1,024 x 700 main window (no engine)
    and report its zoom and each node's title as drawn."""
    from PySide6.QtCore import QSettings

    from engine.nodes import catalog
    from studio.engine_client import EngineClient
    from studio.main_window import MainWindow
    from studio.session import Session
    from studio.settings import Settings
    from studio.state.project_state import ProjectState

    settings = Settings(QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat))
    win = MainWindow(Session(EngineClient(), ProjectState(), settings), settings)
    win.confirm_quit = False
    win.set_workspace("workflows")
    ws = win.workspaces["workflows"]
    ws.set_catalog(catalog())
    win.resize(1024, 700)
    win.show()
    QApplication.processEvents()
    assert win.width() == 1024, win.width()  # the window is not held smaller
    copy = tmp / LLM_FLOW.name
    shutil.copy(LLM_FLOW, copy)
    assert ws.open_file(copy)
    view = ws.editor.canvas
    image = win.grab().toImage()
    report = {
        "dpr": image.devicePixelRatio(),
        "viewport": [view.viewport().width(), view.viewport().height()],
        "zoom": view.zoom(),
        "nodes": {
            nid: _title_report(view, node, image, win)
            for nid, node in view.nodes.items()
        },
    }
    win.close()
    return report


def _check(report: dict[str, Any]) -> None:
    assert len(report["nodes"]) == 11
    for nid, node in report["nodes"].items():
        # every title whole, legible, and really painted
        assert " ".join(node["lines"]) == " ".join(node["title"].split()), nid
        assert node["screen_px"] >= SMALLEST_PX, nid
        assert node["ink"] > 20, nid
        assert node["tooltip"].splitlines()[0] == node["title"], nid


def test_the_fitted_llm_flow_names_every_node(qtbot, tmp_path: Path) -> None:
    report = fitted_titles(tmp_path)
    assert report["viewport"][0] < 400  # the narrow canvas of a small window
    _check(report)
    titles = {n["title"] for n in report["nodes"].values()}
    assert {"Collect rollouts", "Qwen2.5 0.5B Instruct", "Fine-tune GRPO"} <= titles


def test_200_percent_scaling_draws_the_same_titles(qtbot, tmp_path: Path) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": "2"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), env.get("PYTHONPATH")])
    )
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from tests.test_flow_titles import fitted_titles\n"
        "print(json.dumps(fitted_titles(Path(sys.argv[1]))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    scaled = json.loads(done.stdout.strip().splitlines()[-1])
    assert scaled["dpr"] == 2
    _check(scaled)
    (tmp_path / "plain").mkdir()
    plain = fitted_titles(tmp_path / "plain")
    # the same zoom and lines as at 100 %: scaling is not zooming out
    assert abs(scaled["zoom"] - plain["zoom"]) < 0.01
    for nid, node in plain["nodes"].items():
        assert scaled["nodes"][nid]["lines"] == node["lines"], nid


def test_a_long_title_wraps_in_the_header_and_elides_with_a_tooltip(qtbot) -> None:
    view = NodeGraphView()
    qtbot.addWidget(view)
    title = "Evaluate language-model policy"
    node = view.add_node("e", title, inputs=[("env", "env")])
    font = QFont()
    font.setBold(True)
    font.setPointSizeF(7.5)
    assert wrap_title(title, font, NODE_WIDTH - 34, 26) == [
        "Evaluate language-model",
        "policy",
    ]
    # too long for any overview size: elided on its last line, whole in the tip
    lines = wrap_title(title + " over every scenario group", font, 120, 20)
    assert len(lines) == 1 and lines[0].endswith("…")
    assert node.toolTip().splitlines()[0] == title
    # far out, a title still shows (first letters at least), in 9 px or more
    _, far = node.overview_title(0.15)
    assert far and far[0][0] == "E"
