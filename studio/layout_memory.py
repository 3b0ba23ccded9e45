"""What of a window's layout comes back at the next start: each built
workspace's splitter sizes and the column widths of its named tables, by
keys that stay the same from one start to the next."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtWidgets import QHeaderView, QSplitter, QTableView, QWidget

from studio.settings import Settings
from widgets.record_table import RecordTable

Part = QSplitter | QHeaderView


def layout_parts(
    workspaces: Mapping[str, QWidget], built: list[str]
) -> dict[str, Part]:
    """The splitters (``name/splitterN``, by their place in the workspace)
    and the headers of tables with an object name (``name/OBJECT/header``)
    of the ``built`` workspaces."""
    found: dict[str, Part] = {}
    for name in built:
        workspace = workspaces[name]
        for i, splitter in enumerate(workspace.findChildren(QSplitter)):
            found[f"{name}/splitter{i}"] = splitter
        for view in workspace.findChildren(QTableView):
            if view.objectName():
                found[f"{name}/{view.objectName()}/header"] = view.horizontalHeader()
    return found


def restore_parts(settings: Settings, parts: Mapping[str, Part], prefix: str) -> None:
    """The saved states of the ``parts`` whose keys start with ``prefix``. A
    table whose widths come back keeps them (records no longer fit them)."""
    for key, part in parts.items():
        saved = settings.window_layout(key) if key.startswith(prefix) else None
        if saved is None or not part.restoreState(saved):
            continue
        if isinstance(part, QHeaderView):
            table = part.parentWidget()
            while table is not None and not isinstance(table, RecordTable):
                table = table.parentWidget()
            if table is not None:
                table.user_sized.update(range(part.count() - 1))


def save_parts(settings: Settings, parts: Mapping[str, Part]) -> None:
    for key, part in parts.items():
        settings.set_window_layout(key, part.saveState())
