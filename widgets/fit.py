"""Containers that let wide content scroll instead of widening the window.

A row of buttons or an inspector form has a minimum width; laid out directly,
that minimum adds up into the window's and the window cannot be made narrow.
Wrapped in these, the content keeps its size and scrolls where the window is
narrower than it.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QObject, QRect, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence, QResizeEvent, QUndoStack
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QWidget,
)

NOTHING = {
    "Undo": "no edit since the document was opened.",
    "Redo": "no undone edit to do again.",
}
STRIP_MIN_WIDTH = 80
"""The narrowest a strip gets (px): a scroll bar's worth, still usable."""
FRAME_ALLOWANCE = QMargins(4, 38, 4, 4)
"""Room (px) for a window manager's frame before the window is shown and
its real frame is known: a title bar and thin borders (GNOME's, KDE's and
Xfce's title bars are 30 to 37 px at 100 % scale). Without it a window as
tall as the available screen puts its status bar under the screen's edge."""


def screen_capped(height: int, available: QRect) -> int:
    """``height`` for a window's minimum, or less where ``available`` (the
    screen less its panels, a frame allowed for) has less room: a minimum
    taller than the screen would put the status bar under its edge again."""
    return min(height, available.marginsRemoved(FRAME_ALLOWANCE).height())


def fitted_geometry(
    wanted: QSize, available: QRect, minimum: QSize, frame: QMargins = FRAME_ALLOWANCE
) -> QRect:
    """A window's geometry (its frame not included) of ``wanted`` size, or
    less where ``available`` (the screen less its panels) is smaller, never
    under ``minimum``, centred so that its ``frame`` lies inside too."""
    room = available.marginsRemoved(frame)
    width = max(minimum.width(), min(wanted.width(), room.width()))
    height = max(minimum.height(), min(wanted.height(), room.height()))
    left = room.left() + max(0, (room.width() - width) // 2)
    top = room.top() + max(0, (room.height() - height) // 2)
    return QRect(left, top, width, height)


def fit_window(window: QWidget, wanted: QSize, available: QRect | None = None) -> None:
    """Size and place ``window`` by ``fitted_geometry`` on its screen's
    available geometry (or ``available``); its frame, once shown, is the
    one measured where the window system reports one."""
    if available is None:
        screen = window.screen()
        if screen is None:
            window.resize(wanted)
            return
        available = screen.availableGeometry()
    frame = window.frameGeometry()
    inner = window.geometry()
    measured = QMargins(
        inner.left() - frame.left(),
        inner.top() - frame.top(),
        frame.right() - inner.right(),
        frame.bottom() - inner.bottom(),
    )
    known = window.isVisible() and measured != QMargins()
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    window.setGeometry(
        fitted_geometry(
            wanted, available, minimum, measured if known else FRAME_ALLOWANCE
        )
    )


def _as_widget(content: QWidget | QLayout) -> QWidget:
    if isinstance(content, QLayout):
        holder = QWidget()
        content.setContentsMargins(0, 0, 0, 0)
        holder.setLayout(content)
        return holder
    return content


class ScrollStrip(QScrollArea):
    """A row of controls that scrolls sideways when it does not fit; its
    height is the row's, plus the scroll bar's only while that is shown."""

    def __init__(
        self, content: QWidget | QLayout, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._content = _as_widget(content)
        self.setWidget(self._content)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def _overflows(self) -> bool:
        return self._content.minimumSizeHint().width() > self.viewport().width()

    def sizeHint(self) -> QSize:
        hint = self._content.sizeHint()
        height = hint.height()
        if self._overflows():
            height += self.horizontalScrollBar().sizeHint().height()
        return QSize(hint.width(), height)

    def minimumSizeHint(self) -> QSize:
        return QSize(STRIP_MIN_WIDTH, self.sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # The scroll bar comes or goes with the width: the height follows.
        if self.height() != self.sizeHint().height():
            self.updateGeometry()


def scroll_area(content: QWidget | QLayout) -> QScrollArea:
    """``content`` in a frameless scroll area that fills its width and
    scrolls (both ways) where the space is smaller than the content."""
    area = QScrollArea()
    area.setWidget(_as_widget(content))
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    return area


def redo_shortcuts() -> list[QKeySequence]:
    """The platform's Redo keys and Ctrl+Y, which users of every platform
    press (Linux's standard Redo is Ctrl+Shift+Z only)."""
    keys = QKeySequence.keyBindings(QKeySequence.StandardKey.Redo)
    ctrl_y = QKeySequence("Ctrl+Y")
    return keys if ctrl_y in keys else [*keys, ctrl_y]


def undo_redo_actions(stack: QUndoStack, parent: QObject) -> tuple[QAction, QAction]:
    """Undo and Redo actions of ``stack`` whose text stays "Undo" / "Redo"
    (a button showing "Undo Move 3 statuses" would widen the window with
    each edit); what they would undo or redo, or why they cannot, is in
    their tooltip."""
    undo = QAction("Undo", parent)
    redo = QAction("Redo", parent)
    undo.setShortcut(QKeySequence.StandardKey.Undo)
    redo.setShortcuts(redo_shortcuts())
    undo.triggered.connect(lambda *_: stack.undo())
    redo.triggered.connect(lambda *_: stack.redo())

    # The slots use what the signals carry, never the stack: it emits
    # while it is being destroyed.
    texts = {undo: stack.undoText(), redo: stack.redoText()}

    def show(action: QAction, verb: str) -> None:
        if action.isEnabled():
            keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            action.setToolTip(f"{verb} {texts[action]} ({keys})".replace("  ", " "))
        else:
            action.setToolTip(f"Nothing to {verb.lower()}: {NOTHING[verb]}")

    def on_can_changed(action: QAction, verb: str, can: bool) -> None:
        action.setEnabled(can)
        show(action, verb)

    def on_text_changed(action: QAction, verb: str, text: str) -> None:
        texts[action] = text
        show(action, verb)

    for action, verb, can_changed, text_changed, can in (
        (undo, "Undo", stack.canUndoChanged, stack.undoTextChanged, stack.canUndo()),
        (redo, "Redo", stack.canRedoChanged, stack.redoTextChanged, stack.canRedo()),
    ):
        can_changed.connect(lambda c, a=action, v=verb: on_can_changed(a, v, c))
        text_changed.connect(lambda t, a=action, v=verb: on_text_changed(a, v, t))
        on_can_changed(action, verb, can)
    return undo, redo


def make_room(splitter: QSplitter, index: int, size: int) -> None:
    """Give pane ``index`` of ``splitter`` at least ``size`` px, taken from
    the other panes (the largest first) down to their minimum sizes."""
    sizes = splitter.sizes()
    missing = size - sizes[index]
    vertical = splitter.orientation() == Qt.Orientation.Vertical
    for other in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if missing <= 0:
            break
        if other == index:
            continue
        pane = splitter.widget(other)
        floor = minimum_length(pane, vertical) if pane is not None else 0
        taken = max(0, min(missing, sizes[other] - floor))
        sizes[other] -= taken
        sizes[index] += taken
        missing -= taken
    splitter.setSizes(sizes)


def minimum_height(widget: QWidget, width: int | None = None) -> int:
    """The least height ``widget`` needs at ``width`` (default: its own):
    its minimum size hint, or more where its layout wraps (a flow layout,
    a word-wrapped label) and that width holds fewer items a line. Qt's
    minimum size hints assume nothing wraps."""
    height = widget.minimumSizeHint().height()
    if isinstance(widget, QSplitter):
        # a splitter's hint is its panes' hints, wrapping left out
        panes = [widget.widget(i) for i in range(widget.count())]
        needs = [minimum_height(p) for p in panes if p is not None and not p.isHidden()]
        if widget.orientation() == Qt.Orientation.Horizontal:
            height = max([height, *needs])
        else:
            height = max(height, sum(needs) + widget.handleWidth() * (len(needs) - 1))
    elif isinstance(widget, QTabWidget) and widget.currentWidget() is not None:
        page = widget.currentWidget()
        height = max(height, widget.height() - page.height() + minimum_height(page))
    layout = widget.layout()
    if layout is not None and layout.hasHeightForWidth():
        w = widget.width() if width is None else width
        height = max(height, layout.totalMinimumHeightForWidth(w))
    return max(0, height)


def wrapped_minimum(widget: QWidget, hint: QSize) -> QSize:
    """``hint`` (a widget's own minimum size hint) made as tall as the
    widget's wrapping layout needs at its present width: for a widget's
    ``minimumSizeHint`` override, so the layouts and splitters above it
    give it that much (with :func:`tell_width_changed` in its
    ``resizeEvent``)."""
    layout = widget.layout()
    if layout is None or not layout.hasHeightForWidth():
        return hint
    need = layout.totalMinimumHeightForWidth(widget.width())
    return QSize(hint.width(), max(hint.height(), need))


def tell_width_changed(widget: QWidget, event: QResizeEvent) -> None:
    """A new width may wrap ``widget``'s rows onto more lines: its minimum
    height (:func:`wrapped_minimum`) changed, so its layout asks again."""
    if event.size().width() != event.oldSize().width():
        widget.updateGeometry()


def minimum_length(widget: QWidget, vertical: bool) -> int:
    """The least height (``vertical``) or width ``widget`` needs."""
    if vertical:
        return minimum_height(widget)
    return max(0, widget.minimumSizeHint().width())


def room_for_form(area: QScrollArea) -> int:
    """The height (px) at which the form in ``area`` shows whole."""
    form = area.widget()
    need = form.minimumSizeHint().height() if form is not None else 0
    return need + area.height() - area.viewport().height()


def labelled(title: str, widget: QWidget) -> QWidget:
    """``widget`` after a label saying ``title``, as one item: in a
    ``FlowLayout`` the two wrap onto the next line together."""
    pair = QWidget()
    row = QHBoxLayout(pair)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(QLabel(title))
    row.addWidget(widget, 1)
    return pair
