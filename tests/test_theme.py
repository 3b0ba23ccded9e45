"""View → Theme and ``--theme``: the palette, and the plots and canvases
that draw their own colours, follow the chosen theme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from studio.app import build_parser
from studio.main_window import MainWindow
from studio.theme import apply_theme
from tests.studio_harness import build_main_window
from widgets.histogram import Histogram
from widgets.node_graph import NodeGraphView
from widgets.state_machine_editor import StateMachineEditor
from widgets.theme import CANVAS, PLOT, is_dark


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    win.show()
    yield win
    apply_theme("light")  # the next tests see the usual palette


def _corner(widget) -> QColor:  # type: ignore[no-untyped-def]
    image: QImage = widget.grab().toImage()
    return QColor(image.pixel(3, 3))


def test_theme_reaches_plots_and_canvases(qtbot, window: MainWindow) -> None:
    # The env editors are built on first use: build the workflow canvas.
    designer_canvas = window.workspaces["environments"].editors["workflow"].canvas  # type: ignore[attr-defined]
    window.workspaces["workflows"]  # builds the flow canvas
    canvases = [
        *window.findChildren(NodeGraphView),
        *window.findChildren(StateMachineEditor),
    ]
    assert designer_canvas in canvases
    histograms = window.findChildren(Histogram)
    assert canvases and histograms
    plots = window.training.plots
    for theme in ("dark", "light", "dark"):
        window.set_theme(theme)
        assert is_dark() == (theme == "dark")
        assert window.settings.theme == theme
        assert window.theme_actions[theme].isChecked()
        # hidden widgets hear of the change from the event queue
        qtbot.waitUntil(lambda t=theme: plots._theme_name == t)
        for histogram in histograms:
            qtbot.waitUntil(
                lambda h=histogram, t=theme: (
                    h.plot.backgroundBrush().color() == QColor(PLOT[t][0])
                )
            )
        for canvas in canvases:
            canvas.resize(200, 150)
            qtbot.waitUntil(
                lambda c=canvas, t=theme: _corner(c.viewport()) == QColor(CANVAS[t][0])
            )


def test_system_theme_follows_the_desktop(window: MainWindow) -> None:
    scheme = QApplication.styleHints().colorScheme()
    window.set_theme("system")
    assert window.settings.theme == "system"
    assert is_dark() == (scheme.name == "Dark")


def test_a_new_start_keeps_the_theme(qtbot, tmp_path: Path, window: MainWindow) -> None:
    window.set_theme("dark")
    window.close()
    again = build_main_window(qtbot, tmp_path)
    assert again.settings.theme == "dark"
    assert again.theme_actions["dark"].isChecked()


def test_bad_theme_and_size_are_one_sentence(capsys, window: MainWindow) -> None:
    parser = build_parser()
    assert parser.parse_args(["--theme", "dark", "--size", "1024x700"]).size == (
        1024,
        700,
    )
    for argv, said in (
        (["--theme", "neon"], "invalid choice: 'neon'"),
        (["--size", "wide"], "'wide' is not a size; write WIDTHxHEIGHT"),
        (["--size", "0x700"], "'0x700' is not a size"),
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert said in capsys.readouterr().err
    with pytest.raises(ValueError, match="The theme must be one of"):
        window.settings.theme = "neon"
    assert window.settings.theme == "system"
