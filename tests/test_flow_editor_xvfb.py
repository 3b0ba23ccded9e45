"""A real drag and drop: the app runs under Xvfb on the xcb platform and
xdotool drives the mouse: a node type is dragged from the palette onto the
canvas (twice), then an output port is dragged onto an input port. The
editor's autosave copy must then hold the two nodes and the link.
Screenshots of each step go to ``test-output/xvfb/``.

Needs ``xvfb`` and ``xdotool`` (and ``imagemagick`` for the screenshots):
``apt-get install -y xvfb xdotool imagemagick``. Skipped without them.

Where to press is taken from an offscreen replica of the same window at the
same size (widget geometry does not depend on the platform plugin).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, QSettings

from engine.nodes import catalog
from studio.engine_client import EngineClient
from studio.main_window import MainWindow
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from widgets.node_graph import HEADER_HEIGHT, NODE_WIDTH, PORT_ROW

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-output" / "xvfb"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (
            shutil.which("xvfb-run")
            and shutil.which("xdotool")
            and shutil.which("Xvfb")
        ),
        reason="needs Xvfb and xdotool (apt-get install -y xvfb xdotool)",
    ),
]


def wait_for(what: str, check: Callable[[], object], timeout: float) -> object:
    """Poll an outside process's state (files, windows); not a Qt wait."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Desktop:
    """An Xvfb server, and xdotool / import pointed at it."""

    def __init__(self, tmp: Path) -> None:
        # -displayfd: the server picks a free display and says which once it
        # accepts connections (no race with other servers starting).
        self.server = subprocess.Popen(
            [
                "Xvfb",
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1400x900x24",
                "-nolisten",
                "tcp",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.server.stdout is not None
        line = self.server.stdout.readline().strip()
        if not line.isdigit():
            self.server.kill()
            raise AssertionError("Xvfb did not start")
        self.number = int(line)
        self.env = {
            **os.environ,
            "DISPLAY": f":{self.number}",
            "QT_QPA_PLATFORM": "xcb",
            "HOME": str(tmp / "home"),
            "XDG_CONFIG_HOME": str(tmp / "home" / ".config"),
            "XDG_DATA_HOME": str(tmp / "home" / ".local" / "share"),
            "PYTHONUNBUFFERED": "1",
        }

    def xdotool(self, *args: object) -> str:
        proc = subprocess.run(
            ["xdotool", *map(str, args)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def drag(self, start: QPoint, end: QPoint, steps: int = 12) -> None:
        self.xdotool("mousemove", "--sync", start.x(), start.y())
        time.sleep(0.15)
        self.xdotool("mousedown", 1)
        time.sleep(0.15)
        for i in range(1, steps + 1):
            p = start + (end - start) * (i / steps)
            self.xdotool("mousemove", "--sync", p.x(), p.y())
            time.sleep(0.04)
        time.sleep(0.2)
        self.xdotool("mouseup", 1)

    def screenshot(self, name: str) -> None:
        if shutil.which("import") is None:
            return
        SHOTS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["import", "-window", "root", str(SHOTS / name)],
            env=self.env,
            capture_output=True,
            timeout=30,
        )

    def close(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(10)
        except subprocess.TimeoutExpired:
            self.server.kill()


@pytest.fixture
def desktop(tmp_path: Path) -> Iterator[Desktop]:
    d = Desktop(tmp_path)
    yield d
    d.close()


def replica(qtbot, tmp_path: Path, width: int, height: int) -> MainWindow:
    """The same window, offscreen, to read where things are."""
    settings = Settings(
        QSettings(str(tmp_path / "replica.ini"), QSettings.Format.IniFormat)
    )
    session = Session(EngineClient(), ProjectState(), settings)
    win = MainWindow(session, settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    win.set_workspace("workflows")
    win.workspaces["workflows"].set_catalog(catalog())
    win.resize(width, height)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_drag_from_palette_and_link_ports_under_xvfb(
    qtbot, tmp_path: Path, desktop: Desktop
) -> None:
    project = tmp_path / "xproj"
    log = open(tmp_path / "app.log", "w")  # noqa: SIM115 - closed below
    app = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "studio",
            "--project",
            str(project),
            "--workspace",
            "workflows",
        ],
        cwd=ROOT,
        env=desktop.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    window = ""
    try:
        found = wait_for(
            "the main window",
            lambda: desktop.xdotool("search", "--name", "xproj — RL Studio"),
            60,
        )
        window = str(found).split()[0]
        geometry = dict(
            line.split("=")
            for line in desktop.xdotool("getwindowgeometry", "--shell", window).split()
        )
        origin = QPoint(int(geometry["X"]), int(geometry["Y"]))
        win = replica(qtbot, tmp_path, int(geometry["WIDTH"]), int(geometry["HEIGHT"]))
        ws = win.workspaces["workflows"]
        tree = ws.editor.node_palette.tree

        def palette_point(type_name: str) -> QPoint:
            item = ws.editor.node_palette.type_item(type_name)
            rect = tree.visualItemRect(item)
            at = QPoint(rect.left() + 30, rect.center().y())
            return origin + tree.viewport().mapTo(win, at)

        canvas = ws.editor.canvas
        canvas_origin = origin + canvas.viewport().mapTo(win, QPoint(0, 0))
        scene_top_left = canvas.mapToScene(QPoint(0, 0))

        def scene_to_screen(p: QPointF) -> QPoint:
            return canvas_origin + (p - scene_top_left).toPoint()

        autosave = project / "flows" / ".autosave" / "untitled.flow.json"

        def saved() -> dict:
            try:
                return json.loads(autosave.read_text())
            except (OSError, ValueError):
                return {}

        desktop.screenshot("01-start.png")
        drops = [("env.environment", QPoint(120, 200)), ("rl.train", QPoint(420, 200))]
        for i, (type_name, where) in enumerate(drops, start=1):
            target = canvas_origin + where

            def dropped(i: int = i) -> bool:
                return len(saved().get("nodes", [])) >= i

            # The catalog may reach the app a moment after its window shows.
            for _attempt in range(3):
                desktop.drag(palette_point(type_name), target)
                try:
                    wait_for(f"{type_name} on the canvas", dropped, 8)
                    break
                except AssertionError:
                    continue
            assert dropped(), (tmp_path / "app.log").read_text()[-3000:]
        desktop.screenshot("02-dropped.png")

        nodes = {n["id"]: n for n in saved()["nodes"]}
        assert [n["type"] for n in nodes.values()] == ["env.environment", "rl.train"]
        env, train = nodes["environment"]["position"], nodes["train"]["position"]
        port_y = HEADER_HEIGHT + PORT_ROW * 0.5 + 6
        out_port = QPointF(env["x"] + NODE_WIDTH, env["y"] + port_y)
        in_port = QPointF(train["x"], train["y"] + port_y)
        desktop.drag(scene_to_screen(out_port), scene_to_screen(in_port))
        wait_for("the link", lambda: saved().get("links"), 10)
        desktop.screenshot("03-linked.png")

        doc = saved()
        assert len(doc["nodes"]) == 2
        assert doc["links"] == [
            {"from": {"node": "environment", "port": "env"},
             "to": {"node": "train", "port": "env"}}
        ]  # fmt: skip
    finally:
        if window:
            desktop.xdotool("windowactivate", window)
            desktop.xdotool("key", "ctrl+q")
        try:
            app.wait(20)
        except subprocess.TimeoutExpired:
            app.send_signal(signal.SIGTERM)
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                app.kill()
        log.close()
