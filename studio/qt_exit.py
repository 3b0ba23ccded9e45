"""Orderly Qt teardown while Python is still alive.

Qt's C++ exit handlers destroy what the application still owns — notably
the ``QMimeData`` we put on the clipboard (copy of flow nodes) — and the
Python wrappers of those objects then call into a finalized interpreter:
the process dies with SIGSEGV after a clean run. Releasing them here, before
the interpreter ends, makes exit quiet. The studio and the test suite both
call it.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtGui import QClipboard
from PySide6.QtWidgets import QApplication


def _ours(formats: list[str]) -> bool:
    return any(f.startswith("application/x-rlstudio") for f in formats)


def shutdown_qt() -> None:
    app = QApplication.instance()
    if app is None:
        return
    clipboard = QApplication.clipboard()
    # Some platforms (offscreen) never report ownership; data of our own
    # making is recognised by its text, set by whoever put it there.
    mime = clipboard.mimeData()
    if clipboard.ownsClipboard() or (mime is not None and _ours(mime.formats())):
        clipboard.clear(QClipboard.Mode.Clipboard)
    # Windows are left to Qt and pyqtgraph's own exit cleanup: deleting them
    # here tears pyqtgraph scenes down in an order that crashes.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app.processEvents()
    gc.collect()
