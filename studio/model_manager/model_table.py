"""The Models workspace's table: the project's models and the Ollama
server's, one row each, with their kind, source and key metric."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget

from studio.common import fmt_bytes, fmt_time
from studio.state.model_catalog import (
    KIND_LABELS,
    NOT_ON_SERVER,
    key_metric,
    server_status,
    table_records,
)
from widgets.record_table import Column, RecordTable


def _kind_text(m: dict[str, Any]) -> str:
    """The kind, and for a registered deployment whether its server has it."""
    label = KIND_LABELS.get(m["kind"], m["kind"])
    status = server_status(m)
    return f"{label} · {status}" if status else label


def _kind_color(m: dict[str, Any]) -> str | None:
    if m["kind"] != "ollama":
        return None
    return "gray" if server_status(m) == NOT_ON_SERVER else "#d62728"


MODEL_COLUMNS = [
    Column("Name", lambda m: m["name"]),
    Column(
        "Kind",
        lambda m: m["kind"],
        display=_kind_text,
        color=_kind_color,
        tooltip=lambda m: (
            f"{server_status(m).capitalize()} {m.get('host')}"
            if server_status(m)
            else ""
        ),
    ),
    Column("Env", lambda m: m.get("env", "")),
    Column("Algorithm / base", lambda m: m.get("algo") or Path(m.get("base", "")).name),
    Column("Key metric", key_metric),
    Column("Size", lambda m: m.get("size_bytes", 0), fmt_bytes),
    Column("Created", lambda m: m.get("created", 0), fmt_time),
    Column("Source run", lambda m: m.get("source_run") or ""),
]


class ModelTable(RecordTable):
    """Every model of the project and of the listed Ollama server."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(
            MODEL_COLUMNS,
            empty_text="No models in this project yet. Models appear here when a "
            "training run finishes.",
            parent=parent,
        )

    def show_models(
        self,
        models: Iterable[Mapping[str, Any]],
        ollama: Iterable[Mapping[str, Any]],
        listed_host: str | None,
    ) -> None:
        """The project's ``models`` and the server's ``ollama`` records (listed
        from ``listed_host``; None when the server did not answer)."""
        self.set_records(table_records(models, ollama, listed_host))

    def selected(self) -> dict[str, Any] | None:
        keys = self.selected_keys()
        return next((m for m in self.model.records if m["id"] in keys), None)
