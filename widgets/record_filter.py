"""A search box and a combo box per facet over a list of records (dicts):
what a user types and picks, as a predicate for
:meth:`widgets.record_table.RecordTable.set_filter`.

The search matches every word typed, in any order and case, anywhere in
the text the host gives for a record; a facet (status, env, tag) passes the
records that have the value picked, and "Any …" passes all. Typing settles
for :data:`SETTLE_MS` before ``filter_changed``, so a few thousand records
are filtered once per pause, not once per key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QSize, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QComboBox, QLineEdit, QVBoxLayout, QWidget

from widgets.fit import tell_width_changed, wrapped_minimum
from widgets.flow_layout import FlowLayout

SETTLE_MS = 150
"""How long typing pauses before the records are filtered."""

Record = dict[str, Any]


@dataclass(frozen=True)
class Facet:
    title: str
    """Names the facet in its combo box: "Any <title>"."""
    values: Callable[[Record], Iterable[str]]
    """A record's values of the facet (a run has one status, several tags)."""


class RecordFilter(QWidget):
    """Emits ``filter_changed`` when what passes changed; :meth:`predicate`
    says what passes."""

    filter_changed = Signal()

    def __init__(
        self,
        facets: Sequence[Facet],
        text: Callable[[Record], Iterable[str]],
        placeholder: str = "Search",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.facets = list(facets)
        self._text = text
        self.search = QLineEdit(placeholderText=placeholder)
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._on_search_text_changed)
        self.search.returnPressed.connect(self._on_settle_timeout)
        self._settle = QTimer(self, singleShot=True, interval=SETTLE_MS)
        self._settle.timeout.connect(self._on_settle_timeout)
        self.combos: dict[str, QComboBox] = {}
        self._choices: dict[str, set[str]] = {}
        row = FlowLayout()
        for facet in self.facets:
            combo = QComboBox()
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.addItem(f"Any {facet.title}", None)
            combo.setToolTip(f"Show only the records of this {facet.title}")
            combo.currentIndexChanged.connect(self._on_combo_current_index_changed)
            self.combos[facet.title] = combo
            self._choices[facet.title] = set()
            row.addWidget(combo)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.search)
        layout.addLayout(row)
        self._applied = self._wanted()

    def minimumSizeHint(self) -> QSize:
        # The combo boxes wrap onto more lines in a narrow list: as tall as
        # that, or the list under them is cut.
        return wrapped_minimum(self, super().minimumSizeHint())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        tell_width_changed(self, event)

    # ------------------------------------------------------------ choices
    def set_records(self, records: Iterable[Record]) -> None:
        """Offer in each combo box the values these records have; a value
        picked stays offered even when no record has it any more."""
        found: dict[str, set[str]] = {f.title: set() for f in self.facets}
        for record in records:
            for facet in self.facets:
                found[facet.title].update(_values(facet, record))
        for facet in self.facets:
            picked = self.combos[facet.title].currentData()
            if picked is not None:
                found[facet.title].add(picked)
            if found[facet.title] != self._choices[facet.title]:
                self._set_choices(facet.title, found[facet.title])

    def add_record(self, record: Record) -> None:
        """Offer the values of one more (or a changed) record too."""
        for facet in self.facets:
            values = set(_values(facet, record))
            if not values <= self._choices[facet.title]:
                self._set_choices(facet.title, self._choices[facet.title] | values)

    def _set_choices(self, title: str, values: set[str]) -> None:
        combo = self.combos[title]
        picked = combo.currentData()
        combo.blockSignals(True)  # what passes does not change
        try:
            while combo.count() > 1:
                combo.removeItem(1)
            for value in sorted(values, key=str.casefold):
                combo.addItem(value, value)
            combo.setCurrentIndex(max(combo.findData(picked), 0))
        finally:
            combo.blockSignals(False)
        self._choices[title] = values

    # ----------------------------------------------------------- queries
    def choose(self, title: str, value: str | None) -> None:
        """Pick ``value`` in the facet ``title`` (None: any)."""
        combo = self.combos[title]
        combo.setCurrentIndex(max(combo.findData(value), 0))

    def clear(self) -> None:
        """Pass every record again: the search emptied, every facet "Any"."""
        for combo in self.combos.values():
            combo.blockSignals(True)
            combo.setCurrentIndex(0)
            combo.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self._settle.stop()
        self._apply()

    def is_active(self) -> bool:
        words, picked = self._applied
        return bool(words or picked)

    def predicate(self) -> Callable[[Record], bool] | None:
        """What passes (None when everything does), as of the last
        ``filter_changed``."""
        words, picked = self._applied
        if not words and not picked:
            return None
        facets = [(f, picked[f.title]) for f in self.facets if f.title in picked]
        text = self._text

        def accept(record: Record) -> bool:
            for facet, value in facets:
                if value not in _values(facet, record):
                    return False
            if not words:
                return True
            haystack = " ".join(text(record)).casefold()
            return all(w in haystack for w in words)

        return accept

    # ----------------------------------------------------------- changes
    def _wanted(self) -> tuple[tuple[str, ...], dict[str, str]]:
        words = tuple(self.search.text().casefold().split())
        picked = {
            title: combo.currentData()
            for title, combo in self.combos.items()
            if combo.currentData() is not None
        }
        return words, picked

    def _apply(self) -> None:
        wanted = self._wanted()
        if wanted != self._applied:
            self._applied = wanted
            self.filter_changed.emit()

    def _on_search_text_changed(self, text: str) -> None:
        if text:
            self._settle.start()
        else:  # cleared: everything comes back at once
            self._settle.stop()
            self._apply()

    def _on_settle_timeout(self) -> None:
        self._settle.stop()
        self._apply()

    def _on_combo_current_index_changed(self, index: int) -> None:
        self._apply()


def _values(facet: Facet, record: Record) -> list[str]:
    return [v for v in facet.values(record) if v]
