"""Help → Documentation: the Markdown documents that come with the studio
(the README and ``docs/*.md``), read inside the app.

Handing the folder to the desktop did nothing where no file manager is set
up, and a Markdown file opened so shows its source. Here each document is
rendered (Qt's own Markdown), a link to another of them opens it in place,
one to an image or a section of the same document follows, and any other
link goes to the desktop's browser.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSize, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from widgets.fit import fit_window

ROOT = Path(__file__).resolve().parents[1]
DOCS_DIR = ROOT / "docs"
README = ROOT / "README.md"
TITLES = {
    "README.md": "Getting started (README)",
    "design.md": "Design",
    "style.md": "Code style",
    "benchmarks.md": "Benchmarks",
}
"""Names the list gives the documents it knows; others show their file name."""


def documents(readme: Path = README, docs_dir: Path = DOCS_DIR) -> list[Path]:
    """The README, then ``docs/*.md`` in :data:`TITLES`' order, then the rest
    by name; those that exist."""
    order = list(TITLES)

    def rank(path: Path) -> tuple[int, str]:
        known = order.index(path.name) if path.name in order else len(order)
        return known, path.name

    found = sorted(docs_dir.glob("*.md"), key=rank)
    return [path for path in [readme, *found] if path.is_file()]


def not_installed() -> str:
    return (
        f"The documentation folder {DOCS_DIR} is not installed with this copy "
        "of RL Studio."
    )


class DocsDialog(QDialog):
    """The documents listed on the left, the chosen one rendered on the
    right. ``open_external`` is how a link that is no document of the list
    leaves the app (the desktop's browser by default)."""

    def __init__(
        self,
        paths: list[Path],
        parent: QWidget | None = None,
        open_external: Callable[[QUrl], object] = QDesktopServices.openUrl,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("RL Studio documentation")
        self.paths = [path.resolve() for path in paths]
        self.open_external = open_external
        self.list = QListWidget()
        for path in self.paths:
            item = QListWidgetItem(TITLES.get(path.name, path.name))
            item.setToolTip(str(path))
            self.list.addItem(item)
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)  # each link is decided here
        self.browser.anchorClicked.connect(self._on_anchor_clicked)
        split = QSplitter()
        split.addWidget(self.list)
        split.addWidget(self.browser)
        split.setStretchFactor(1, 1)
        split.setSizes([200, 700])
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(split)
        layout.addWidget(buttons)
        self.list.currentRowChanged.connect(self._on_list_current_row_changed)
        fit_window(self, QSize(960, 680))
        if self.paths:
            self.list.setCurrentRow(0)

    @property
    def shown(self) -> Path | None:
        row = self.list.currentRow()
        return self.paths[row] if 0 <= row < len(self.paths) else None

    def _on_list_current_row_changed(self, row: int) -> None:
        if not 0 <= row < len(self.paths):
            return
        path = self.paths[row]
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            self.browser.setPlainText(f"{path} cannot be read ({exc.strerror}).")
            return
        # Images and links of the document are relative to its folder.
        self.browser.document().setBaseUrl(QUrl.fromLocalFile(f"{path.parent}/"))
        self.browser.setSearchPaths([str(path.parent)])
        self.browser.setMarkdown(text)

    def _on_anchor_clicked(self, url: QUrl) -> None:
        shown = self.shown
        target: Path | None = None
        if url.isRelative() and shown is not None:
            if not url.path():  # "#section" of this document
                self.browser.scrollToAnchor(url.fragment())
                return
            target = (shown.parent / url.path()).resolve()
            url = QUrl.fromLocalFile(str(target))
        elif url.isLocalFile():
            target = Path(url.toLocalFile()).resolve()
        if target is not None and target in self.paths:
            self.list.setCurrentRow(self.paths.index(target))
            return
        self.open_external(url)
