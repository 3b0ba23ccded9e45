"""Dialogs of the model manager: chat; Export GGUF, Deploy to Ollama, the
one-click Export to Ollama, Hub download and Import dataset (with a preview
of the rows as they will be imported), each the engine's form for its job
kind (:class:`studio.run_form.RunFormDialog`); and the one-click progress
view."""

from __future__ import annotations

import html
import unicodedata
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from engine.contract import DEFAULT_OLLAMA_HOST
from studio.model_manager.controller import (
    ModelsController,
    OllamaExport,
    ollama_name_for,
)
from studio.run_form import RESHAPE_DELAY_MS, RunFormDialog
from studio.session import Session

HUB_DOWNLOAD_KIND = "hub.download"
HUB_PUSH_KIND = "rl.hub_push"
HUB_AGENT_KIND = "rl.hub_download"
IMPORT_KIND = "llm.import"


class ChatDialog(QDialog):
    """A transcript with one model: an Ollama model or a local HF folder."""

    def __init__(
        self,
        controller: ModelsController,
        model_ref: str,
        title: str,
        host: str = "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Chat with {title}")
        self.resize(620, 560)
        self._controller = controller
        self.model_ref = model_ref
        self.host = host
        self.messages: list[dict[str, str]] = []
        self._answered = False
        """An answer came: the model is loaded in the engine's chat worker."""
        self.transcript = QTextBrowser()
        self.system = QLineEdit(placeholderText="System prompt (optional)")
        self.input = QPlainTextEdit(placeholderText="Your message…")
        self.input.setFixedHeight(70)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.send)
        self.status = QLabel(wordWrap=True)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addWidget(self.send_button)
        layout = QVBoxLayout(self)
        where = "in the engine" if not host else f"on {host}"
        layout.addWidget(QLabel(f"<b>{html.escape(title)}</b> — answers {where}"))
        layout.addWidget(self.system)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(row)
        layout.addWidget(self.status)

    def send(self, text: str | None = None) -> None:
        text = (text if isinstance(text, str) else self.input.toPlainText()).strip()
        if not text:
            return
        self.input.clear()
        self.messages.append({"role": "user", "content": text})
        self._append("You", text, "#1f77b4")
        sent = list(self.messages)
        if self.system.text().strip():
            sent.insert(0, {"role": "system", "content": self.system.text().strip()})
        self.send_button.setEnabled(False)
        self.status.setText(
            "Answering…"
            if self._answered or self.host
            else "Loading the model and answering (the first answer waits for it)…"
        )
        self._controller.chat(
            self.model_ref,
            sent,
            self._on_reply,
            self._on_error,
            host=self.host or None,
        )

    def transcript_text(self) -> str:
        return self.transcript.toPlainText()

    def _append(self, who: str, text: str, color: str) -> None:
        body = html.escape(text).replace("\n", "<br>")
        self.transcript.append(f"<p><b style='color:{color}'>{who}:</b> {body}</p>")

    def _on_reply(self, result: dict[str, Any]) -> None:
        reply = str(result.get("reply", ""))
        self._answered = True
        self.messages.append({"role": "assistant", "content": reply})
        shown, note = printable(reply)
        self._append("Model", shown, "#2ca02c")
        self.status.setText(turn_cost(result) + (f" — {note}" if note else ""))
        self.send_button.setEnabled(True)

    def _on_error(self, message: str) -> None:
        self.messages.pop()  # the turn did not happen
        self.status.setText(
            f"<span style='color:#d62728'>{html.escape(message)}</span>"
        )
        self.send_button.setEnabled(True)


def printable(reply: str) -> tuple[str, str]:
    """The answer as the transcript shows it, and a note when it is not
    plain text: an empty answer, or control characters (shown as ``\\x07``)."""
    if not reply.strip():
        return "(no text)", "the model answered with nothing but white space"
    odd = [c for c in reply if unicodedata.category(c) in ("Cc", "Cf", "Co", "Cn")
           and c not in "\n\t"]  # fmt: skip
    if not odd:
        return reply, ""
    shown = "".join(
        c.encode("unicode_escape").decode() if c in odd else c for c in reply
    )
    return shown, f"the answer held {len(odd)} control character(s), shown escaped"


def turn_cost(result: dict[str, Any]) -> str:
    """``12 tokens in 0.80 s (15.0 tokens/s); loading the model took 3.1 s``."""
    tokens, seconds = int(result.get("tokens") or 0), float(result.get("seconds") or 0)
    text = f"{tokens} tokens in {seconds:.2f} s"
    if tokens and seconds > 0:
        text += f" ({tokens / seconds:.1f} tokens/s)"
    load = float(result.get("load_seconds") or 0)
    if load >= 0.05:
        text += f"; loading the model took {load:.1f} s"
    return text


def export_gguf_dialog(
    session: Session, model: dict[str, Any], parent: QWidget | None = None
) -> RunFormDialog:
    """Export GGUF: the engine's ``export.gguf`` form for this model (an
    adapter is offered the adapter types; calibration text K-quants only)."""
    name = str(model.get("name", ""))
    return RunFormDialog(
        session,
        "export.gguf",
        title=f"Export {name} to GGUF",
        ok_text="Export",
        fixed=ModelsController.gguf_source(model),
        # The adapter's base is the one its adapter_config.json names.
        hidden=("base_model_dir",),
        initial={"name": ollama_name_for(name)},
        run_name=f"Export GGUF {name}",
        shaping=("type",),
        parent=parent,
    )


def record_dialog(
    session: Session, model: dict[str, Any], parent: QWidget | None = None
) -> RunFormDialog:
    """Record video: the engine's ``rl.record`` form for this policy, in the
    env it was trained on."""
    name = str(model.get("name", ""))
    return RunFormDialog(
        session,
        "rl.record",
        title=f"Record {name}",
        ok_text="Record",
        fixed=ModelsController.record_source(model),
        run_name=f"Record {name}",
        parent=parent,
    )


def hub_push_dialog(
    session: Session, model: dict[str, Any], parent: QWidget | None = None
) -> RunFormDialog:
    """Push to the Hub: the engine's ``rl.hub_push`` form for this policy
    (evaluated, recorded and uploaded with its model card)."""
    name = str(model.get("name", ""))
    return RunFormDialog(
        session,
        HUB_PUSH_KIND,
        title=f"Push {name} to the Hugging Face Hub",
        ok_text="Push",
        fixed=ModelsController.hub_push_source(model),
        run_name=f"Push {name}",
        parent=parent,
    )


def hub_agent_dialog(session: Session, parent: QWidget | None = None) -> RunFormDialog:
    """Download agent: the engine's ``rl.hub_download`` form; the agent
    becomes a model of the project."""
    dialog = RunFormDialog(
        session,
        HUB_AGENT_KIND,
        title="Download an agent from the Hugging Face Hub",
        ok_text="Download",
        run_name="Download {repo_id}",
        parent=parent,
    )
    dialog.body.insertWidget(
        1,
        QLabel(
            "<span style='color:gray'>A stable-baselines3 agent in the "
            "huggingface_sb3 layout (&lt;algo&gt;-&lt;env&gt;.zip and a model "
            "card), from $HF_ENDPOINT with $HF_TOKEN when they are set.</span>",
            wordWrap=True,
        ),
    )
    return dialog


def deploy_dialog(
    session: Session, model: dict[str, Any], host: str, parent: QWidget | None = None
) -> RunFormDialog:
    """Deploy to Ollama: the engine's ``deploy.ollama`` form for this GGUF."""
    name = str(model.get("name", ""))
    return RunFormDialog(
        session,
        "deploy.ollama",
        title=f"Deploy to Ollama: {name}",
        ok_text="Deploy",
        fixed=ModelsController.deploy_source(model),
        # Set by a flow or the HTTP service, not by hand here.
        hidden=("adapter_gguf", "bundle_dir", "family"),
        initial={"name": ollama_name_for(name), "host": host or DEFAULT_OLLAMA_HOST},
        run_name="Deploy {name} to Ollama",
        parent=parent,
    )


def one_click_dialog(
    session: Session, model: dict[str, Any], host: str, parent: QWidget | None = None
) -> RunFormDialog:
    """Export to Ollama in one run: the engine's ``export.ollama`` form for
    this model (merge, GGUF, deploy)."""
    name = str(model.get("name", ""))
    return RunFormDialog(
        session,
        "export.ollama",
        title=f"Export to Ollama: {name}",
        ok_text="Export and deploy",
        fixed=ModelsController.one_click_source(model),
        hidden=("base",),
        initial={"name": ollama_name_for(name), "host": host or DEFAULT_OLLAMA_HOST},
        run_name="Export to Ollama: {name}",
        shaping=("type",),
        parent=parent,
    )


def hub_download_dialog(
    session: Session, parent: QWidget | None = None
) -> RunFormDialog:
    """Download from the Hugging Face Hub: the engine's ``hub.download``
    form, whose repository field is a picker (the HF cache and a Hub
    search); into the Hugging Face cache, resumed when stopped."""
    dialog = RunFormDialog(
        session,
        HUB_DOWNLOAD_KIND,
        title="Download from the Hugging Face Hub",
        ok_text="Download",
        run_name="Download {repo_id}",
        parent=parent,
    )
    dialog.body.insertWidget(
        1,
        QLabel(
            "<span style='color:gray'>Into the Hugging Face cache ($HF_HOME), "
            "from $HF_ENDPOINT with $HF_TOKEN when they are set. A stopped "
            "download resumes.</span>",
            wordWrap=True,
        ),
    )
    return dialog


class ImportDatasetDialog(RunFormDialog):
    """Import dataset…: the engine's ``llm.import`` form, and beside it the
    first rows as the import will write them (the engine's ``data.preview``:
    the detected format, the method it feeds, and a sentence for each bad
    row among them), asked again a moment after the source, its format or
    the column mapping changes."""

    PREVIEW_FIELDS = ("source", "format", "columns", "method", "split_name")
    """The settings that change what the preview shows."""

    PREVIEW_ROWS = 20

    def __init__(
        self,
        session: Session,
        initial: dict[str, Any] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(
            session,
            IMPORT_KIND,
            title="Import a dataset",
            ok_text="Import",
            initial=initial,
            parent=parent,
        )
        self.resize(900, 640)
        self.preview: dict[str, Any] | None = None
        """The last preview shown (None: none yet, or the source was refused)."""
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.problems = QLabel(wordWrap=True)
        self.problems.setStyleSheet("color: #d62728;")
        self.problems.hide()
        self.table = QTableWidget()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        # Bad rows are left out, so a table row number would not be the
        # file's: the problems name those.
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.Stretch
        )
        box = QGroupBox("Preview")
        inner = QVBoxLayout(box)
        inner.addWidget(self.summary)
        inner.addWidget(self.table, 1)
        inner.addWidget(self.problems)
        self.body.insertWidget(1, box, 2)
        self._asked: tuple[Any, ...] | None = None
        self._timer = QTimer(self, singleShot=True, interval=RESHAPE_DELAY_MS)
        self._timer.timeout.connect(self.request_preview)
        self._show_hint()

    def _preview_values(self) -> dict[str, Any]:
        values = self.to_config(self.values)
        return {
            k: values[k] for k in self.PREVIEW_FIELDS if values.get(k) not in (None, "")
        }

    def _key(self) -> tuple[Any, ...]:
        values = self._preview_values()
        return tuple(values.get(k) for k in self.PREVIEW_FIELDS)

    def schema_loaded(self, fields: list[dict[str, Any]]) -> None:
        if self._asked is None:
            self.request_preview()

    def values_edited(self) -> None:
        if self._key() != self._asked:
            self._timer.start()

    def run_name(self, config: dict[str, Any]) -> str:
        source = str(config.get("source") or "")
        return f"Import {source.rstrip('/').rsplit('/', 1)[-1]}" if source else ""

    def request_preview(self) -> None:
        """Ask the engine for the preview of the values typed so far."""
        values = self._preview_values()
        self._asked = key = self._key()
        if not values.get("source"):
            self._show_hint()
            return
        self.summary.setText("<span style='color:gray'>Reading the first rows…</span>")
        self._session.request_data_preview(
            values,
            lambda result: self._on_preview(key, result),
            lambda error: self._on_preview_error(key, error),
            rows=self.PREVIEW_ROWS,
        )

    def _show_hint(self) -> None:
        self.preview = None
        self.table.clear()
        self.table.setRowCount(0)
        self.table.setColumnCount(0)
        self.problems.hide()
        self.summary.setText(
            "<span style='color:gray'>Give a .jsonl, .json, .csv or .parquet file, "
            "a dataset folder or a Hub dataset id (org/name) to see its first "
            "rows as they will be imported.</span>"
        )

    def _on_preview(self, key: tuple[Any, ...], result: dict[str, Any]) -> None:
        if key != self._asked:
            return  # the values changed since: a newer preview is coming
        self.preview = result
        rows = list(result.get("rows") or [])
        columns = list(rows[0]) if rows else []
        self.table.clear()
        self.table.setColumnCount(len(columns))
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderLabels(columns)
        for r, row in enumerate(rows):
            for c, name in enumerate(columns):
                self.table.setItem(r, c, QTableWidgetItem(preview_cell(row.get(name))))
        self.table.resizeRowsToContents()
        source_columns = ", ".join(str(c) for c in result.get("columns") or [])
        self.summary.setText(
            f"Detected format <b>{html.escape(str(result.get('format')))}</b>, "
            f"rows for <b>{html.escape(str(result.get('method', '')).upper())}</b>"
            f" — the first {len(rows)} as they will be imported (source columns: "
            f"{html.escape(source_columns)}). Map other column names with "
            "<i>Column mapping</i> (field=column)."
        )
        problems = list(result.get("problems") or [])
        self.problems.setText("\n".join(problems))
        self.problems.setVisible(bool(problems))

    def _on_preview_error(self, key: tuple[Any, ...], error: protocol.Error) -> None:
        if key != self._asked:
            return
        self._show_hint()
        self.summary.setText(
            f"<span style='color:#d62728'>{html.escape(error.message)}</span>"
        )


def preview_cell(value: Any) -> str:
    """A preview cell: a message list as ``role: content`` lines."""
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in value)
    return "" if value is None else str(value)


def import_dataset_dialog(
    session: Session,
    initial: dict[str, Any] | None = None,
    parent: QWidget | None = None,
) -> ImportDatasetDialog:
    """Import dataset: a data file or Hub dataset into the project's
    datasets (``data/datasets/<name>``), checked row by row."""
    return ImportDatasetDialog(session, initial=initial, parent=parent)


class PipelineView(QWidget):
    """The one-click export's progress: the stage the engine reports, one
    bar over all stages, and the final line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.export: OllamaExport | None = None
        self.title = QLabel()
        self.stage = QLabel()
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.result = QLabel(wordWrap=True)
        self.result.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.result.setFont(mono)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Hide")
        self.close_button.clicked.connect(self.hide)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.stop_button)
        head.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(head)
        layout.addWidget(self.stage)
        layout.addWidget(self.bar)
        layout.addWidget(self.result)
        self.setStyleSheet(
            "PipelineView { border: 1px solid palette(mid); border-radius: 4px; }"
        )
        self.hide()

    def set_export(self, export: OllamaExport) -> None:
        self.export = export
        export.changed.connect(self.refresh)
        self.title.setText(
            f"<b>Export to Ollama</b>: {html.escape(str(export.model.get('name')))}"
            f" → {html.escape(export.name)}"
        )
        self.result.clear()
        self.show()
        self.refresh()

    def refresh(self) -> None:
        e = self.export
        if e is None:
            return
        self.stage.setText(e.stage_text() or ("" if e.done else "starting…"))
        done, total = e.progress()
        if e.done and e.ok:
            done = total = 1.0
        self.bar.setValue(int(1000 * min(done / total, 1.0)) if total else 0)
        self.stop_button.setEnabled(not e.done)
        if e.done:
            style = "" if e.ok else "color:#d62728"
            self.result.setText(
                f"<span style='{style}'>"
                f"{html.escape(e.message).replace(chr(10), '<br>')}</span>"
            )

    def result_text(self) -> str:
        return self.export.message if self.export else ""

    def _on_stop_clicked(self) -> None:
        if self.export is not None:
            self.export.stop()
