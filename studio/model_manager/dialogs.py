"""Dialogs of the model manager: chat, Export GGUF, Deploy to Ollama (also
the one-click Export to Ollama), and the one-click progress view."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from engine.contract import DEFAULT_OLLAMA_HOST
from engine.export.types import (
    ADAPTER_TYPES,
    GGUF_TYPES,
    OLLAMA_EXPORT_TYPES,
    imatrix_problem,
)
from studio.common import ok_cancel_buttons
from studio.model_manager.controller import (
    ModelsController,
    OllamaExport,
    ollama_name_for,
)
from studio.pickers import picker_sources
from studio.session import Session
from widgets.param_form import ParamForm

HUB_DOWNLOAD_KIND = "hub.download"

QUANTIZE = ("", "q4_K_M", "q4_K_S", "q8_0")


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
        self.status.setText("Thinking…")
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

    def _on_reply(self, reply: str) -> None:
        self.messages.append({"role": "assistant", "content": reply})
        self._append("Model", reply or "(empty answer)", "#2ca02c")
        self.status.clear()
        self.send_button.setEnabled(True)

    def _on_error(self, message: str) -> None:
        self.messages.pop()  # the turn did not happen
        self.status.setText(
            f"<span style='color:#d62728'>{html.escape(message)}</span>"
        )
        self.send_button.setEnabled(True)


class CalibrationRow(QWidget):
    """The calibration text of a full-model GGUF export (Export GGUF and the
    one-click Export to Ollama): a text file or project dataset with a
    browse button, enabled for K-quant types only."""

    LABEL = "Calibration text"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QLineEdit(placeholderText="none: no importance matrix")
        self.edit.setToolTip(
            "A text file, or a project dataset (folder, .jsonl, .parquet), "
            "the model runs over to weight the K-quants by the importance of each "
            "input column, as llama.cpp's imatrix does. With the logit error "
            "measured, the report also gives it without the importance matrix."
        )
        self.browse = QToolButton()
        self.browse.setText("…")
        self.browse.clicked.connect(self._on_browse_clicked)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.browse)

    def set_type(self, gguf_type: str) -> None:
        """Calibration text weights K-quants only: disabled, with the reason,
        for the other types."""
        problem = imatrix_problem(gguf_type)
        for w in (self.edit, self.browse):
            w.setEnabled(problem is None)
        self.edit.setPlaceholderText(
            "none: no importance matrix" if problem is None else "K-quant types only"
        )

    def value(self) -> str | None:
        """The path given, None when empty or not offered for the type."""
        return (self.edit.text().strip() if self.edit.isEnabled() else "") or None

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            self.LABEL,
            self.edit.text(),
            "Text or dataset (*.txt *.md *.jsonl *.parquet);;All files (*)",
        )
        if path:
            self.edit.setText(path)


class ExportGgufDialog(QDialog):
    """Type and output file of a GGUF export."""

    def __init__(self, model: dict[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Export {model.get('name', '')} to GGUF")
        adapter = model.get("kind") == "lora-adapter"
        self.type_box = QComboBox()
        # f16 first: the lossless default of a plain export.
        types = ADAPTER_TYPES if adapter else GGUF_TYPES
        self.type_box.addItems(["f16", *(t for t in types if t != "f16")])
        self.out = QLineEdit(placeholderText="in the run folder (default)")
        browse = QToolButton()
        browse.setText("…")
        browse.clicked.connect(self._on_browse_clicked)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out, 1)
        out_row.addWidget(browse)
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        self.logit_error = QCheckBox(
            "Measure the logit error against the source model (loads both)"
        )
        self.calibration_row = CalibrationRow()
        self.calibration = self.calibration_row.edit
        form = QFormLayout()
        form.addRow("Type", self.type_box)
        form.addRow("Output file", out_row)
        if not adapter:
            form.addRow(CalibrationRow.LABEL, self.calibration_row)
            form.addRow(self.logit_error)
            self.type_box.currentTextChanged.connect(self.calibration_row.set_type)
            self.calibration_row.set_type(self.type_box.currentText())
        if adapter:
            form.addRow(
                QLabel("A LoRA adapter exports as a GGUF adapter (ADAPTER line).")
            )
        buttons = ok_cancel_buttons(self, "Export", self._on_accepted)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addWidget(buttons)
        self.message.hide()

    def values(self) -> dict[str, Any]:
        return {
            "type": self.type_box.currentText(),
            "out": self.out.text().strip(),
            "logit_error": self.logit_error.isChecked(),
            "calibration_text": self.calibration_row.value(),
        }

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "GGUF file", self.out.text(), "GGUF (*.gguf)"
        )
        if path:
            self.out.setText(path if path.endswith(".gguf") else path + ".gguf")

    def _on_accepted(self) -> None:
        out = self.out.text().strip()
        if out and not out.endswith(".gguf"):
            self.message.setText("The output file name must end in .gguf.")
            self.message.show()
            return
        self.accept()


class HubDownloadDialog(QDialog):
    """Repository and revision of a download from the Hugging Face Hub: the
    engine's form for ``hub.download``, whose repository field is a picker
    (the HF cache and a Hub search)."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download from the Hugging Face Hub")
        self.form = ParamForm()
        picker_sources(session).attach(self.form)
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        note = QLabel(
            "<span style='color:gray'>Into the Hugging Face cache ($HF_HOME), "
            "from $HF_ENDPOINT with $HF_TOKEN when they are set. A stopped "
            "download resumes.</span>",
            wordWrap=True,
        )
        self.buttons = buttons = ok_cancel_buttons(self, "Download", self._on_accepted)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addWidget(note)
        layout.addWidget(self.message)
        layout.addWidget(buttons)
        self.message.hide()
        session.request_run_schema(
            HUB_DOWNLOAD_KIND, {}, self._on_schema, self._on_schema_error
        )

    def is_ready(self) -> bool:
        return bool(self.form.values())

    def values(self) -> tuple[str, str]:
        values = self.form.values()
        repo = str(values.get("repo_id") or "").strip()
        return repo, str(values.get("revision") or "").strip() or "main"

    def _on_schema(self, fields: list[dict[str, Any]]) -> None:
        self.form.set_schema(fields)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)

    def _on_schema_error(self, error: protocol.Error) -> None:
        self.message.setText(error.message)
        self.message.show()

    def _on_accepted(self) -> None:
        parts = self.values()[0].split("/")
        if len(parts) != 2 or not all(parts):
            self.message.setText("Name the repository as org/name.")
            self.message.show()
            return
        self.accept()


class DeployOllamaDialog(QDialog):
    """Name, host, system prompt and quantization of an Ollama model; with
    ``one_click`` also the GGUF type of the export it starts with."""

    def __init__(
        self,
        model: dict[str, Any],
        host: str = DEFAULT_OLLAMA_HOST,
        one_click: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        title = "Export to Ollama" if one_click else "Deploy to Ollama"
        self.setWindowTitle(f"{title}: {model.get('name', '')}")
        self.resize(480, 300)
        self.name = QLineEdit(ollama_name_for(str(model.get("name", ""))))
        self.host = QLineEdit(host or DEFAULT_OLLAMA_HOST)
        self.system = QPlainTextEdit(placeholderText="optional")
        self.system.setFixedHeight(60)
        self.quantize = QComboBox()
        for q in QUANTIZE:
            self.quantize.addItem(q or "none (keep the GGUF's type)", q)
        self.type_box = QComboBox()
        self.type_box.addItems(list(OLLAMA_EXPORT_TYPES))
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        self.message.hide()
        form = QFormLayout()
        form.addRow("Ollama name", self.name)
        form.addRow("Host", self.host)
        form.addRow("System prompt", self.system)
        self.calibration_row = CalibrationRow()
        # A .gguf file is deployed as it is; models and adapters are exported.
        self.calibrated = one_click and model.get("kind") != "gguf"
        if one_click:
            # The type covers quantizing on the server (ollama-q4_k_*).
            form.addRow("Type", self.type_box)
            if self.calibrated:
                form.addRow(CalibrationRow.LABEL, self.calibration_row)
                self.type_box.currentTextChanged.connect(self.calibration_row.set_type)
                self.calibration_row.set_type(self.type_box.currentText())
        else:
            form.addRow("Quantize on server", self.quantize)
        buttons = ok_cancel_buttons(
            self, "Export and deploy" if one_click else "Deploy", self._on_accepted
        )
        layout = QVBoxLayout(self)
        if one_click:
            layout.addWidget(
                QLabel(
                    "Merges the adapter, exports a GGUF, writes the Modelfile and "
                    "creates the Ollama model, in one engine run.",
                    wordWrap=True,
                )
            )
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addWidget(buttons)

    def values(self) -> dict[str, Any]:
        return {
            "name": self.name.text().strip(),
            "host": self.host.text().strip(),
            "system": self.system.toPlainText().strip() or None,
            "quantize": self.quantize.currentData() or None,
            "type": self.type_box.currentText(),
            "calibration_text": (
                self.calibration_row.value() if self.calibrated else None
            ),
        }

    def _on_accepted(self) -> None:
        name = self.name.text().strip()
        if not name or ollama_name_for(name) != name.lower():
            self.message.setText(
                "The Ollama name may hold letters, digits, '.', '-' and '_' only."
            )
            self.message.show()
            return
        self.accept()


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
