"""The Models workspace's actions on the selected model: a row of buttons
enabled by its kind (evaluate, play, chat, export, deploy, the one-click
export to Ollama, delete, show in folder), Download from the Hub and Import
dataset, and the dialogs and the one-click export's progress they open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QMessageBox, QPushButton, QWidget

from studio.common import fmt_bytes, open_folder
from studio.model_manager.controller import ModelsController, model_folder
from studio.model_manager.dialogs import (
    IMPORT_KIND,
    ChatDialog,
    PipelineView,
    deploy_dialog,
    export_gguf_dialog,
    hub_agent_dialog,
    hub_download_dialog,
    hub_push_dialog,
    import_dataset_dialog,
    one_click_dialog,
    record_dialog,
)
from studio.run_form import RunFormDialog
from studio.session import Session
from studio.state.model_catalog import (
    NOT_ON_SERVER,
    ollama_ref,
    on_server,
    server_status,
)
from widgets.flow_layout import FlowLayout

HF_KINDS = ("lora-adapter", "hf-merged", "hf-model")


def enabled_actions(m: dict[str, Any] | None) -> dict[str, bool]:
    """Which action each button may start on the model ``m`` (None: none)."""
    kind = (m or {}).get("kind", "")
    policy = kind == "sb3-policy" and bool((m or {}).get("env"))
    return {
        "evaluate": policy,
        "play": policy,
        "record": policy,
        "continue": policy,
        "push": policy and bool((m or {}).get("algo")),
        "chat": kind in ("ollama", *HF_KINDS)
        and server_status(m or {}) != NOT_ON_SERVER,
        "gguf": kind in HF_KINDS,
        "onnx": kind == "sb3-policy",
        "deploy": kind == "gguf"
        and (m or {}).get("metrics", {}).get("gguf_kind") != "adapter",
        "one_click": kind in (*HF_KINDS, "gguf"),
        "delete": m is not None,
        "folder": bool((m or {}).get("path")),
    }


def _confirm_with_box(parent: QWidget, title: str, text: str) -> bool:
    answer = QMessageBox.question(parent, title, text)
    return answer == QMessageBox.StandardButton.Yes


class ModelActions(QWidget):
    """The buttons of the actions on the model ``selected`` returns."""

    models_changed = Signal()
    """A one-click export ended: the server's models may have changed."""
    train_requested = Signal(dict)
    """Continue training…: the host opens its New run dialog with these
    ``rl.train`` values (env, algorithm, ``start_from``)."""

    def __init__(
        self,
        session: Session,
        controller: ModelsController,
        selected: Callable[[], dict[str, Any] | None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._session = session
        self._controller = controller
        self._selected = selected
        self.confirm: Callable[[str, str], bool] = lambda title, text: (
            _confirm_with_box(self, title, text)
        )
        """Asks before deleting; tests replace it."""
        self.open_folder: Callable[[str], None] = open_folder
        self.dialogs: list[QWidget] = []
        """Dialogs opened from here (kept so tests can drive them)."""
        self.pipeline_view = PipelineView()
        """The one-click export's stages (laid out by the workspace)."""
        self.hub_button = QPushButton("Download from the Hub…")
        """Download from the Hub (in the workspace's header: it needs no model)."""
        self.hub_button.setToolTip(
            "Download a model from the Hugging Face Hub ($HF_ENDPOINT, "
            "$HF_TOKEN) into the Hugging Face cache, to use as a base model"
        )
        self.hub_button.clicked.connect(lambda: self.download_from_hub())
        self.agent_button = QPushButton("Download agent…")
        """Download an SB3 agent from the Hub into the project (header)."""
        self.agent_button.setToolTip(
            "Download a stable-baselines3 agent in the huggingface_sb3 layout "
            "(RL Zoo's, or one pushed from here) as a model of the project"
        )
        self.agent_button.clicked.connect(lambda: self.download_agent())
        self.import_button = QPushButton("Import dataset…")
        """Import a dataset (in the header, beside Download from the Hub)."""
        self.import_button.setToolTip(
            "Import a JSONL, JSON, CSV or Parquet file or a Hub dataset (chat, "
            "alpaca, prompt/completion, preference or KTO rows) as a training "
            "dataset of the project"
        )
        self.import_button.clicked.connect(lambda: self.import_dataset())
        self.buttons: dict[str, QPushButton] = {}
        # Wraps instead of scrolling: every action stays in sight at 1,024 px.
        row = FlowLayout(self)
        for key, text, tip, slot in (
            ("evaluate", "Evaluate", "Roll the policy out in its env", self.evaluate),
            ("play", "Play", "One episode: step trace and frames", self.play),
            (
                "record",
                "Record video…",
                "Play the policy and save its frames as an MP4 or GIF",
                self.record_video,
            ),
            (
                "continue",
                "Continue training…",
                "A new training run that starts from this policy's weights",
                self.continue_training,
            ),
            (
                "push",
                "Push to the Hub…",
                "Evaluate, record and upload the policy with a model card "
                "(the huggingface_sb3 layout)",
                self.push_to_hub,
            ),
            ("chat", "Chat…", "Talk to the model", self.chat),
            ("gguf", "Export GGUF…", "Convert to GGUF", self.export_gguf),
            ("onnx", "Export ONNX", "Export the SB3 policy to ONNX", self.export_onnx),
            ("deploy", "Deploy to Ollama…", "Create an Ollama model", self.deploy),
            (
                "one_click",
                "Export to Ollama…",
                "Merge, export GGUF, write the Modelfile and deploy in one go",
                self.export_to_ollama,
            ),
            ("delete", "Delete", "Delete the model", self.delete_selected),
            ("folder", "Show in folder", "Open the model's folder", self.show_folder),
        ):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(lambda *_, s=slot: s())
            self.buttons[key] = button
            row.addWidget(button)
            if key in ("push", "chat", "one_click"):
                row.addSpacing(10)
        self.buttons["one_click"].setStyleSheet("font-weight: bold;")
        controller.failed.connect(self._on_controller_failed)

    def update_for(self, model: dict[str, Any] | None) -> None:
        """Enable the actions ``model`` (None: none selected) allows."""
        enabled = enabled_actions(model)
        for key, button in self.buttons.items():
            button.setEnabled(enabled[key])

    def _on_controller_failed(self, message: str) -> None:
        self.update_for(self._selected())

    def evaluate(self, episodes: int = 10) -> None:
        model = self._selected()
        if model:
            self._controller.evaluate(model, episodes)

    def play(self) -> None:
        model = self._selected()
        if model:
            self._controller.play(model)

    def chat(self) -> ChatDialog | None:
        model = self._selected()
        if model is None:
            return None
        if model["kind"] == "ollama":
            ref, host = ollama_ref(model)
        else:
            ref, host = model_folder(model), ""
        dialog = ChatDialog(self._controller, ref, model["name"], host, parent=self)
        self._open(dialog)
        return dialog

    def _adopt(
        self, dialog: RunFormDialog, purpose: str, model: dict[str, Any]
    ) -> None:
        """Follow the run ``dialog`` starts as the action ``purpose``."""
        dialog.run_started.connect(
            lambda run_id: self._controller.adopt_action(
                run_id, purpose, model, dialog.config()
            )
        )
        self._open(dialog)

    def export_gguf(self) -> RunFormDialog | None:
        model = self._selected()
        if model is None:
            return None
        dialog = export_gguf_dialog(self._session, model, parent=self)
        self._adopt(dialog, "export.gguf", model)
        return dialog

    def record_video(self) -> RunFormDialog | None:
        model = self._selected()
        if model is None:
            return None
        dialog = record_dialog(self._session, model, parent=self)
        self._adopt(dialog, "record", model)
        return dialog

    def continue_training(self) -> None:
        """Ask the host for a New run dialog that starts from the policy."""
        model = self._selected()
        if model:
            self.train_requested.emit(ModelsController.continue_source(model))

    def push_to_hub(self) -> RunFormDialog | None:
        model = self._selected()
        if model is None:
            return None
        dialog = hub_push_dialog(self._session, model, parent=self)
        self._adopt(dialog, "hub.push", model)
        return dialog

    def download_agent(self) -> RunFormDialog:
        """Open Download agent (an SB3 agent into the project)."""
        dialog = hub_agent_dialog(self._session, self)
        self._adopt(dialog, "hub.agent", {"id": ""})
        return dialog

    def export_onnx(self) -> None:
        model = self._selected()
        if model:
            self._controller.export_onnx(model)

    def deploy(self) -> RunFormDialog | None:
        model = self._selected()
        if model is None:
            return None
        dialog = deploy_dialog(
            self._session, model, self._controller.ollama_host, parent=self
        )
        self._adopt(dialog, "deploy", model)
        return dialog

    def export_to_ollama(self) -> RunFormDialog | None:
        """The one-click export (one engine run), after a dialog for its name,
        type and server."""
        model = self._selected()
        if model is None:
            return None
        dialog = one_click_dialog(
            self._session, model, self._controller.ollama_host, parent=self
        )

        def follow(run_id: str) -> None:
            export = self._controller.follow_export(model, run_id, dialog.config())
            self.pipeline_view.set_export(export)
            export.finished.connect(lambda ok, _msg: self.models_changed.emit())

        dialog.run_started.connect(follow)
        self._open(dialog)
        return dialog

    def download_from_hub(self, repo_id: str | None = None, revision: str = "") -> None:
        """Download ``repo_id`` (asked in a dialog when None)."""
        if repo_id is not None:
            self._controller.download_from_hub(repo_id, revision)
            return
        dialog = hub_download_dialog(self._session, self)
        self._adopt(dialog, "hub.download", {"id": ""})

    def import_dataset(self, initial: dict[str, Any] | None = None) -> RunFormDialog:
        """Open Import dataset (its form filled with ``initial``)."""
        dialog = import_dataset_dialog(self._session, initial, self)
        self._adopt(dialog, IMPORT_KIND, {"id": ""})
        return dialog

    def delete_selected(self) -> None:
        model = self._selected()
        if model is None:
            return
        if on_server(model):
            text = (
                f"Delete {model['name']} from the Ollama server at "
                f"{model.get('host')}? This cannot be undone."
            )
        elif model["kind"] == "ollama":
            text = (
                f"Forget the deployed model {model['name']} in this project? "
                f"The Ollama server at {ollama_ref(model)[1]} keeps it."
            )
        else:
            text = (
                f"Delete the model {model['name']} and its files "
                f"({fmt_bytes(model.get('size_bytes')) or 'empty'})? "
                "This cannot be undone."
            )
        if not self.confirm("Delete model", text):
            return
        self.buttons["delete"].setEnabled(False)
        self._controller.delete_model(model)

    def show_folder(self) -> None:
        model = self._selected()
        if model and model.get("path"):
            path = Path(model["path"])
            self.open_folder(str(path if path.is_dir() else path.parent))

    def _open(self, dialog: QWidget) -> None:
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        # Closed dialogs delete themselves; asking a deleted one isVisible()
        # raises, so each one leaves the list when Qt destroys it.
        self.dialogs.append(dialog)
        dialog.destroyed.connect(
            lambda _obj=None, d=dialog: (
                self.dialogs.remove(d) if d in self.dialogs else None
            )
        )
        dialog.open() if hasattr(dialog, "open") else dialog.show()
