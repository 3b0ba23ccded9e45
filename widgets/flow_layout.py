"""A layout that lays its items out left to right and wraps onto the next
line where the width runs out, like words in a paragraph.

For rows of actions that must all stay visible (a scrolled-away button is a
button the user never finds): the row needs only its widest item's width,
and grows a line taller where the window is narrow.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QWidget


class FlowLayout(QLayout):
    def __init__(
        self, parent: QWidget | None = None, spacing: int = 6, line_spacing: int = 4
    ) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._heights: dict[int, int] = {}
        self._spacing = spacing
        self._line_spacing = line_spacing
        self.setContentsMargins(0, 0, 0, 0)

    # -- QLayout's item bookkeeping
    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)
        self.invalidate()

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        if not 0 <= index < len(self._items):
            return None
        self._heights.clear()
        return self._items.pop(index)

    def addSpacing(self, width: int) -> None:
        """A gap of ``width`` px before the next item (dropped at a line's
        start, so a wrapped line is not indented)."""
        from PySide6.QtWidgets import QSpacerItem

        self.addItem(
            QSpacerItem(width, 0, QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Minimum)
        )

    # -- geometry
    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        # Qt asks again and again during one layout pass: remembered until
        # the items change (invalidate).
        height = self._heights.get(width)
        if height is None:
            if len(self._heights) > 64:  # a window dragged wider and wider
                self._heights.clear()
            height = self._heights[width] = self._arrange(
                QRect(0, 0, width, 0), apply=False
            )
        return height

    def invalidate(self) -> None:
        self._heights.clear()
        super().invalidate()

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._arrange(rect, apply=True)

    def sizeHint(self) -> QSize:
        # One line: what the row wants where there is room.
        shown = [i for i in self._items if not i.isEmpty() or i.widget() is None]
        width = sum(i.sizeHint().width() for i in shown)
        width += self._spacing * max(0, len(shown) - 1)
        height = max((i.sizeHint().height() for i in shown), default=0)
        return _grow(QSize(width, height), self.contentsMargins())

    def minimumSize(self) -> QSize:
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        return _grow(size, self.contentsMargins())

    def _arrange(self, rect: QRect, apply: bool) -> int:
        """Place the items in ``rect`` (when ``apply``); returns the height used."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, line_height = area.x(), area.y(), 0
        for item in self._items:
            hint = item.sizeHint()
            spacer = item.widget() is None
            if item.isEmpty() and not spacer:
                continue  # a hidden widget takes no room
            if x > area.x() and x + hint.width() > area.right() + 1 and not spacer:
                x, y = area.x(), y + line_height + self._line_spacing
                line_height = 0
            if spacer and x == area.x():
                continue  # no gap at a line's start
            if apply:
                item.setGeometry(QRect(QPoint(x, y), hint))
            x += hint.width() + (0 if spacer else self._spacing)
            line_height = max(line_height, hint.height())
        return y + line_height - rect.y() + m.bottom()


def _grow(size: QSize, margins: QMargins) -> QSize:
    return size + QSize(
        margins.left() + margins.right(), margins.top() + margins.bottom()
    )
