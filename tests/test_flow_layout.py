"""widgets.flow_layout: a row of buttons wraps instead of scrolling, so every
button stays in sight and the row needs only its widest button's width."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QVBoxLayout, QWidget

from widgets.flow_layout import FlowLayout


def _row(qtbot, width: int) -> tuple[QWidget, QWidget, list[QPushButton]]:  # type: ignore[no-untyped-def]
    window = QWidget()
    qtbot.addWidget(window)
    holder = QWidget()
    flow = FlowLayout(holder)
    buttons = [QPushButton(f"Action number {i}") for i in range(8)]
    for i, b in enumerate(buttons):
        flow.addWidget(b)
        if i == 3:
            flow.addSpacing(10)
    buttons[5].hide()
    outer = QVBoxLayout(window)
    outer.addWidget(holder)
    outer.addStretch(1)
    window.resize(width, 400)
    window.show()
    qtbot.waitExposed(window)
    return window, holder, buttons


def test_a_narrow_row_wraps_and_keeps_every_button_in_sight(qtbot) -> None:  # type: ignore[no-untyped-def]
    _window, holder, buttons = _row(qtbot, 300)
    shown = [b for b in buttons if b.isVisible()]
    assert len(shown) == 7
    qtbot.waitUntil(lambda: len({b.y() for b in shown}) > 2)
    for b in shown:
        assert b.geometry().right() <= holder.width()
        assert b.geometry().bottom() <= holder.height()
    # lines are not indented by a spacer that fell at a line's start
    assert {b.x() for b in shown if b.x() < 20} == {shown[0].x()}
    # nothing overlaps
    for a in shown:
        for b in shown:
            assert a is b or not a.geometry().intersects(b.geometry())
    assert (
        holder.minimumSizeHint().width()
        <= max(b.sizeHint().width() for b in shown) + 20
    )


def test_a_wide_row_is_one_line(qtbot) -> None:  # type: ignore[no-untyped-def]
    _window, _, buttons = _row(qtbot, 2000)
    shown = [b for b in buttons if b.isVisible()]
    qtbot.waitUntil(lambda: len({b.y() for b in shown}) == 1)
    xs = [b.x() for b in shown]
    assert xs == sorted(xs)


def test_the_row_grows_again_when_a_hidden_button_shows(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Heights are remembered per width until the items change: a button
    shown again, or one more, makes the remembered heights stale."""
    _window, holder, buttons = _row(qtbot, 300)
    layout = holder.layout()
    assert isinstance(layout, FlowLayout)
    before = layout.heightForWidth(300)
    buttons[5].show()
    layout.addWidget(QPushButton("One more action"))
    qtbot.waitUntil(lambda: layout.heightForWidth(300) > before)
