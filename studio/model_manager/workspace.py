"""Models: the model manager.

Every model of the project (SB3 policies, base models, adapters, merged
models, GGUF and ONNX files) and of the connected Ollama server in one
table; the selected model's lineage as a chain, its metrics and details;
actions that run in the engine (evaluate, play, export, deploy, one-click
export to Ollama) with their progress; the language-model trace viewer and
the before/after evaluation report.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from studio.common import fmt_bytes, fmt_time, open_folder
from studio.lifetime import subscribe
from studio.model_manager.controller import ModelsController, model_folder
from studio.model_manager.dialogs import (
    ChatDialog,
    PipelineView,
    deploy_dialog,
    export_gguf_dialog,
    hub_download_dialog,
    one_click_dialog,
)
from studio.model_manager.eval_report import ComparisonReport
from studio.model_manager.trace_viewer import TraceViewer
from studio.run_form import RunFormDialog
from studio.session import Session
from studio.state.model_catalog import (
    KIND_LABELS,
    NOT_ON_SERVER,
    OLLAMA_PREFIX,
    ChainNode,
    evaluation_reports,
    key_metric,
    lineage_chain,
    ollama_record,
    ollama_ref,
    on_server,
    server_status,
    table_records,
)
from widgets.chain_view import ChainItem, ChainView
from widgets.flow_layout import FlowLayout
from widgets.frame_viewer import FrameViewer
from widgets.record_table import Column, RecordTable
from widgets.run_progress import RunProgressBar

__all__ = ["ModelsWorkspace", "key_metric"]

HF_KINDS = ("lora-adapter", "hf-merged", "hf-model")
PURPOSE_TITLES = {
    "evaluate": "Evaluation",
    "play": "Play",
    "export.onnx": "ONNX export",
    "export.gguf": "GGUF export",
    "deploy": "Ollama deployment",
    "hub.download": "Download from the Hub",
    "retrain": "Reward model retraining",
}


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
TRACE_COLUMNS = [
    Column("Step", lambda r: r["step"]),
    Column("Action", lambda r: r["action"]),
    Column("Reward", lambda r: r["reward"], lambda v: f"{v:+.3g}"),
    Column("Breakdown", lambda r: r["breakdown"]),
    Column("Status", lambda r: r["status"]),
    Column("Observation", lambda r: r["observation"]),
]


def _confirm_with_box(parent: QWidget, title: str, text: str) -> bool:
    answer = QMessageBox.question(parent, title, text)
    return answer == QMessageBox.StandardButton.Yes


def _short(value: Any, limit: int = 60) -> str:
    text = (
        ", ".join(f"{v:.3g}" for v in value) if isinstance(value, list) else str(value)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ModelsWorkspace(QWidget):
    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self.controller = ModelsController(session, self)
        self.confirm: Callable[[str, str], bool] = lambda title, text: (
            _confirm_with_box(self, title, text)
        )
        """Asks before deleting; tests replace it."""
        self.open_folder: Callable[[str], None] = open_folder
        self._records: list[dict[str, Any]] = []
        self._links: dict[str, list[list[str]]] = {}
        self._action_run = ""
        self._shown_once = False
        self.dialogs: list[QWidget] = []
        """Dialogs opened from here (kept so tests can drive them)."""

        # -- header: title and the Ollama server
        self.host_edit = QLineEdit(self.controller.ollama_host)
        self.host_edit.setPlaceholderText("Ollama host")
        self.host_edit.setFixedWidth(220)
        self.host_edit.returnPressed.connect(self.refresh_ollama)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("List the models of the Ollama server")
        self.refresh_button.clicked.connect(self.refresh_ollama)
        self.ollama_status = QLabel(wordWrap=True)
        header = QHBoxLayout()
        header.addWidget(QLabel("<h2 style='margin:0'>Models</h2>"))
        header.addStretch(1)
        header.addWidget(QLabel("Ollama:"))
        header.addWidget(self.host_edit)
        header.addWidget(self.refresh_button)
        self.hub_button = QPushButton("Download from the Hub…")
        self.hub_button.setToolTip(
            "Download a model from the Hugging Face Hub ($HF_ENDPOINT, "
            "$HF_TOKEN) into the Hugging Face cache, to use as a base model"
        )
        self.hub_button.clicked.connect(lambda: self.download_from_hub())
        header.addWidget(self.hub_button)

        # -- actions
        self.buttons: dict[str, QPushButton] = {}
        # Wraps instead of scrolling: every action stays in sight at 1,024 px.
        actions = FlowLayout()
        for key, text, tip, slot in (
            ("evaluate", "Evaluate", "Roll the policy out in its env", self.evaluate),
            ("play", "Play", "One episode: step trace and frames", self.play),
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
            actions.addWidget(button)
            if key in ("play", "chat", "one_click"):
                actions.addSpacing(10)
        self.buttons["one_click"].setStyleSheet("font-weight: bold;")

        # -- table
        self.table = RecordTable(
            MODEL_COLUMNS,
            empty_text="No models in this project yet. Models appear here when a "
            "training run finishes.",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)

        # -- details
        self.chain = ChainView()
        self.chain.item_clicked.connect(self._on_chain_item_clicked)
        self.details = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.details.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        details_scroll = QScrollArea(widgetResizable=True)
        details_scroll.setWidget(self.details)
        details_page = QWidget()
        details_layout = QVBoxLayout(details_page)
        details_layout.addWidget(QLabel("<b>Lineage</b>"))
        details_layout.addWidget(self.chain)
        details_layout.addWidget(details_scroll, 1)

        self.result_label = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.result_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.frames = FrameViewer()
        self.trace_table = RecordTable(
            TRACE_COLUMNS, empty_text="Press Play to roll the policy out."
        )
        play_split = QSplitter(Qt.Orientation.Horizontal)
        play_split.addWidget(self.trace_table)
        play_split.addWidget(self.frames)
        play_split.setSizes([520, 300])
        self.frames.hide()  # until an episode with frames is played
        run_page = QWidget()
        run_layout = QVBoxLayout(run_page)
        run_layout.addWidget(self.result_label)
        run_layout.addWidget(play_split, 1)

        self.trace_viewer = TraceViewer()
        self.trace_viewer.retrain_requested.connect(self._on_retrain_requested)
        self.report_box = QComboBox()
        self.report_box.currentIndexChanged.connect(self._on_report_box_changed)
        self.report = ComparisonReport()
        report_page = QWidget()
        report_layout = QVBoxLayout(report_page)
        row = QHBoxLayout()
        row.addWidget(QLabel("Report:"))
        row.addWidget(self.report_box, 1)
        report_layout.addLayout(row)
        report_layout.addWidget(self.report, 1)

        self.tabs = QTabWidget()
        self.tabs.addTab(details_page, "Details")
        self.tabs.addTab(run_page, "Evaluate / Play")
        self.tabs.addTab(self.trace_viewer, "Traces")
        self.tabs.addTab(report_page, "Evaluation report")
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([600, 680])

        # -- progress of the last action and the one-click chain
        self.action_label = QLabel()
        self.action_progress = RunProgressBar()
        action_row = QHBoxLayout()
        action_row.addWidget(self.action_label)
        action_row.addWidget(self.action_progress, 1)
        self.action_stop = QPushButton("Stop")
        self.action_stop.setToolTip("Stop this run")
        self.action_stop.clicked.connect(self._on_action_stop_clicked)
        self.action_stop.hide()
        action_row.addWidget(self.action_stop)
        self.action_box = QWidget()
        self.action_box.setLayout(action_row)
        self.action_box.hide()
        self.pipeline_view = PipelineView()

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.ollama_status)
        actions_row = QWidget()
        actions_row.setLayout(actions)
        layout.addWidget(actions_row)
        layout.addWidget(split, 1)
        layout.addWidget(self.action_box)
        layout.addWidget(self.pipeline_view)

        self.controller.ollama_models_changed.connect(self._on_ollama_models_changed)
        self.controller.ollama_failed.connect(self._on_ollama_failed)
        self.controller.action_started.connect(self._on_action_started)
        self.controller.action_ended.connect(self._on_action_ended)
        self.controller.failed.connect(self._on_controller_failed)
        subscribe(self._state, self, self._on_state_changed)
        self._on_state_changed("reset", "")

    # ------------------------------------------------------------ queries
    def records(self) -> list[dict[str, Any]]:
        return list(self._records)

    def selected(self) -> dict[str, Any] | None:
        keys = self.table.selected_keys()
        return next((m for m in self._records if m["id"] in keys), None)

    def select(self, model_id: str) -> None:
        self.table.select_keys([model_id])

    # ------------------------------------------------------------- model
    def _rebuild(self) -> None:
        listed = self.controller.ollama_listed_host
        host = listed or self.controller.ollama_host
        ollama = [ollama_record(o, host) for o in self.controller.ollama_models]
        self._records = table_records(self._state.models, ollama, listed)
        self.table.set_records(self._records)
        self._show_selection()

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self._links.clear()
            self._rebuild()
            if not self.table.selected_keys() and self._state.models:
                self.select(self._state.models[-1]["id"])  # the newest
            self.trace_viewer.set_project(self._state.path)
            self._refresh_reports()
        elif what == "run" and key == self._action_run:
            self._update_action_progress()

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.refresh_ollama()

    # ------------------------------------------------------------ Ollama
    def refresh_ollama(self) -> None:
        self.ollama_status.setText("<span style='color:gray'>Asking Ollama…</span>")
        self.controller.refresh_ollama(self.host_edit.text())

    def _on_ollama_models_changed(self, models: list[dict[str, Any]]) -> None:
        if not self.controller.ollama_error:
            version = getattr(self.controller, "ollama_version", "")
            self.ollama_status.setText(
                f"<span style='color:#2ca02c'>●</span> Ollama {html.escape(version)}: "
                f"{len(models)} model(s)"
            )
            self.ollama_status.setToolTip(self.controller.ollama_host)
        self._rebuild()

    def _on_ollama_failed(self, message: str) -> None:
        self.ollama_status.setText(
            f"<span style='color:#d62728'>●</span> {html.escape(message)}"
        )
        self.ollama_status.setToolTip(message)

    # --------------------------------------------------------- selection
    def _on_table_selection_changed(self, keys: list[str]) -> None:
        self._show_selection()

    def _show_selection(self) -> None:
        model = self.selected()
        self._update_buttons(model)
        if model is None:
            self.chain.set_items([], "Select a model to see where it came from.")
            self.details.setText(
                "<i style='color:gray'>Select a model to see its details.</i>"
            )
            return
        self.details.setText(self._details_html(model))
        if on_server(model):
            self._show_ollama_chain(model)
        elif model["id"] in self._links:
            self._show_chain(model["id"])
        else:
            # Until the engine answers, draw what the state knows: the model's
            # run and what was made from it.
            if model.get("source_run"):
                self._links[model["id"]] = [
                    [model["source_run"], model["id"], "trained"]
                ]
            self._show_chain(model["id"])
            self._links.pop(model["id"], None)
            self.controller.request_lineage(
                model["id"], functools.partial(self._on_links, model["id"])
            )

    def _on_links(self, model_id: str, links: list[list[str]]) -> None:
        self._links[model_id] = links
        current = self.selected()
        if current is not None and current["id"] == model_id:
            self._show_chain(model_id)

    def _show_chain(self, model_id: str, ollama_name: str = "") -> None:
        nodes = lineage_chain(
            model_id,
            self._links.get(model_id, []),
            self._state.models,
            self._state.runs,
        )
        items = [
            ChainItem(
                n.key,
                n.kind,
                n.title,
                n.subtitle,
                n.current if not ollama_name else n.title == ollama_name,
            )
            for n in nodes
        ]
        self.chain.set_items(items)

    def _show_ollama_chain(self, model: dict[str, Any]) -> None:
        """An Ollama model deployed from this project: the chain of its GGUF.
        Until the engine answers (or when it was deployed from elsewhere),
        the model alone, never the chain of what was selected before."""
        name = model["name"]
        bare = name.removesuffix(":latest")
        node = ChainNode(model["id"], "ollama", name, "Ollama", current=True)
        self.chain.set_items(
            [ChainItem(node.key, node.kind, node.title, node.subtitle, True)]
        )
        # Deployed from this project: the chain of its registered model.
        for r in self._records:
            if (
                r["kind"] == "ollama"
                and not on_server(r)
                and ollama_ref(r)[0].removesuffix(":latest") == bare
            ):

                def show_registered(
                    links: list[list[str]], rid: str = str(r["id"])
                ) -> None:
                    self._links[rid] = links
                    if (self.selected() or {}).get("id") == model["id"]:
                        self._show_chain(rid)

                self.controller.request_lineage(str(r["id"]), show_registered)
                return
        for run in reversed(list(self._state.runs.values())):
            config = run.get("config") or {}
            if run.get("kind") == "deploy.ollama" and config.get("name") in (
                name,
                bare,
            ):
                parents = config.get("parents") or []
                if parents:
                    gguf_id = str(parents[0])

                    def show(
                        links: list[list[str]],
                        gid: str = gguf_id,
                        deployed: str = str(config["name"]),
                    ) -> None:
                        self._links[gid] = links
                        if (self.selected() or {}).get("id") == model["id"]:
                            self._show_chain(gid, ollama_name=deployed)

                    self.controller.request_lineage(gguf_id, show)
                    return

    def _on_chain_item_clicked(self, key: str) -> None:
        if any(r["id"] == key for r in self._records):
            self.select(key)
        elif key.startswith(OLLAMA_PREFIX):
            for r in self._records:
                if r["kind"] == "ollama" and r["name"].removesuffix(":latest") == (
                    key[len(OLLAMA_PREFIX) :].removesuffix(":latest")
                ):
                    self.select(r["id"])

    def _details_html(self, m: dict[str, Any]) -> str:
        def row(label: str, value: Any) -> str:
            if value in (None, "", {}, []):
                return ""
            return (
                f"<tr><td style='color:gray; padding-right:10px'>{label}</td>"
                f"<td>{html.escape(str(value))}</td></tr>"
            )

        kind = KIND_LABELS.get(m["kind"], m["kind"])
        parts = [
            f"<h3 style='margin-bottom:2px'>{html.escape(m['name'])}</h3>"
            f"<span style='color:gray'>{kind}</span><table>",
            row("Id", m["id"] if not on_server(m) else ""),
            row("Environment", m.get("env")),
            row("Algorithm", m.get("algo")),
            row("Base", m.get("base")),
            row("Size", fmt_bytes(m.get("size_bytes"))),
            row("Created", fmt_time(m.get("created"))),
            row("Source run", self._run_name(m.get("source_run"))),
            row("Path", m.get("path")),
            row("Server", m.get("host")),
            row("Status", server_status(m).capitalize()),
            row("Digest", str(m.get("digest", ""))[:19]),
            "</table>",
        ]
        metrics = m.get("metrics") or {}
        if metrics:
            parts.append("<h4 style='margin-bottom:2px'>Metrics</h4><table>")
            for k, v in metrics.items():
                value = f"{v:.5g}" if isinstance(v, float) else v
                parts.append(row(k, value))
            parts.append("</table>")
        sb3 = m.get("sb3")
        if sb3:
            parts.append(
                "<h4 style='margin-bottom:2px'>Policy (from the zip)</h4><table>"
            )
            parts += [
                row("Algorithm", sb3.get("algo")),
                row("Policy class", sb3.get("policy_class")),
                row("Timesteps", f"{sb3.get('num_timesteps', 0):,}"),
                row("Observation space", sb3.get("observation_space")),
                row("Action space", sb3.get("action_space")),
                row("Vector envs", sb3.get("n_envs")),
                row("SB3 version", sb3.get("sb3_version")),
            ]
            for k, v in (sb3.get("hyperparameters") or {}).items():
                parts.append(row(k, v))
            parts.append("</table>")
        if m.get("sb3_error"):
            parts.append(
                f"<p style='color:#d62728'>{html.escape(str(m['sb3_error']))}</p>"
            )
        details = m.get("details") or {}
        if details:
            parts.append("<h4 style='margin-bottom:2px'>Ollama details</h4><table>")
            parts += [row(k, _short(v)) for k, v in details.items()]
            parts.append("</table>")
        return "".join(parts)

    def _run_name(self, run_id: str | None) -> str:
        if not run_id:
            return ""
        run = self._state.run(run_id) or {}
        name = run.get("name")
        return f"{name} ({run_id})" if name else run_id

    def _update_buttons(self, m: dict[str, Any] | None) -> None:
        kind = (m or {}).get("kind", "")
        policy = kind == "sb3-policy" and bool((m or {}).get("env"))
        enabled = {
            "evaluate": policy,
            "play": policy,
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
        for key, button in self.buttons.items():
            button.setEnabled(enabled[key])

    # ----------------------------------------------------------- actions
    def evaluate(self, episodes: int = 10) -> None:
        model = self.selected()
        if model:
            self.controller.evaluate(model, episodes)

    def play(self) -> None:
        model = self.selected()
        if model:
            self.controller.play(model)

    def chat(self) -> ChatDialog | None:
        model = self.selected()
        if model is None:
            return None
        if model["kind"] == "ollama":
            ref, host = ollama_ref(model)
        else:
            ref, host = model_folder(model), ""
        dialog = ChatDialog(self.controller, ref, model["name"], host, parent=self)
        self._open(dialog)
        return dialog

    def export_gguf(self) -> RunFormDialog | None:
        model = self.selected()
        if model is None:
            return None
        dialog = export_gguf_dialog(self._session, model, parent=self)
        dialog.run_started.connect(
            lambda run_id: self.controller.adopt_action(
                run_id, "export.gguf", model, dialog.config()
            )
        )
        self._open(dialog)
        return dialog

    def export_onnx(self) -> None:
        model = self.selected()
        if model:
            self.controller.export_onnx(model)

    def deploy(self) -> RunFormDialog | None:
        model = self.selected()
        if model is None:
            return None
        dialog = deploy_dialog(
            self._session, model, self.controller.ollama_host, parent=self
        )
        dialog.run_started.connect(
            lambda run_id: self.controller.adopt_action(
                run_id, "deploy", model, dialog.config()
            )
        )
        self._open(dialog)
        return dialog

    def export_to_ollama(self) -> RunFormDialog | None:
        """The one-click export (one engine run), after a dialog for its name,
        type and server."""
        model = self.selected()
        if model is None:
            return None
        dialog = one_click_dialog(
            self._session, model, self.controller.ollama_host, parent=self
        )

        def follow(run_id: str) -> None:
            export = self.controller.follow_export(model, run_id, dialog.config())
            self.pipeline_view.set_export(export)
            export.finished.connect(lambda ok, _msg: self._rebuild())

        dialog.run_started.connect(follow)
        self._open(dialog)
        return dialog

    def delete_selected(self) -> None:
        model = self.selected()
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
        self.controller.delete_model(model)

    def show_folder(self) -> None:
        model = self.selected()
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

    # ------------------------------------------------------ action runs
    def _on_action_started(self, run_id: str, purpose: str) -> None:
        self._action_run = run_id
        self.action_box.show()
        self.action_label.setText(f"{PURPOSE_TITLES.get(purpose, purpose)}:")
        self.action_progress.set_state("running")
        self.action_progress.set_progress(0, None)
        self.action_progress.show()
        self.action_stop.setEnabled(True)
        self.action_stop.setVisible(purpose == "hub.download")
        if purpose in ("evaluate", "play"):
            self.tabs.setCurrentIndex(1)
            self.result_label.setText(
                f"<i>{PURPOSE_TITLES[purpose]} running in the engine…</i>"
            )

    def download_from_hub(self, repo_id: str | None = None, revision: str = "") -> None:
        """Download ``repo_id`` (asked in a dialog when None)."""
        if repo_id is not None:
            self.controller.download_from_hub(repo_id, revision)
            return
        dialog = hub_download_dialog(self._session, self)
        dialog.run_started.connect(
            lambda run_id: self.controller.adopt_action(
                run_id, "hub.download", {"id": ""}, dialog.config()
            )
        )
        self._open(dialog)

    def _on_action_stop_clicked(self) -> None:
        if self._action_run:
            self._session.stop_run(self._action_run)
            self.action_stop.setEnabled(False)

    def _update_action_progress(self) -> None:
        run = self._state.run(self._action_run) or {}
        total = int(run.get("progress_total") or 0) or None
        self.action_progress.set_progress(
            int(run.get("progress_done") or 0),
            total,
            run.get("rate") or None,
            run.get("eta_s"),
        )

    def _on_action_ended(
        self, run_id: str, purpose: str, status: str, reason: str
    ) -> None:
        if run_id == self._action_run:
            self.action_progress.hide()  # the label says how it ended
            self.action_stop.hide()
        title = PURPOSE_TITLES.get(purpose, purpose)
        if purpose == "hub.download":
            self._show_download(run_id, status, reason)
            return
        if status != "completed":
            self.result_label.setText(
                f"<span style='color:#d62728'>{title} {status}: "
                f"{html.escape(reason)}</span>"
            )
            self.action_label.setText(f"{title} {status}.")
            return
        self.action_label.setText(f"{title} done.")
        if purpose == "retrain":
            self.trace_viewer.reload_suggestions()
        elif purpose == "evaluate":
            self._show_evaluation(run_id)
        elif purpose == "play":
            self._show_play(run_id)
        elif purpose == "deploy":
            summary = (self._state.run(run_id) or {}).get("summary") or {}
            deploy = summary.get("deploy") or {}
            self.action_label.setText(
                html.escape(str(deploy.get("message") or "Deployed."))
                + (
                    f"  <code>ollama run {html.escape(str(deploy.get('name')))}</code>"
                    if deploy.get("deployed")
                    else ""
                )
            )
            self.refresh_ollama()

    def _on_retrain_requested(self, config: dict[str, Any]) -> None:
        self.controller.start_action(
            "retrain", "reward.train", config, {"id": ""}, name="Retrain reward model"
        )

    def _show_download(self, run_id: str, status: str, reason: str) -> None:
        summary = (self._state.run(run_id) or {}).get("summary") or {}
        repo = html.escape(str(summary.get("repo_id") or ""))
        if status == "completed":
            self.action_label.setText(
                f"Downloaded <b>{repo}</b> to {html.escape(str(summary.get('path')))}"
                f"; name it <code>{repo}</code> as a base model."
            )
        elif status == "stopped":
            self.action_label.setText(
                "Download stopped: downloading it again resumes where it stopped."
            )
        else:
            self.action_label.setText(
                f"<span style='color:#d62728'>{html.escape(reason)}</span>"
            )

    def _show_evaluation(self, run_id: str) -> None:
        data = self.controller.read_preview(run_id)
        if data is None:
            self.result_label.setText("The evaluation wrote no results.")
            return
        eps = data.get("episodes") or []
        returns = [e["return"] for e in eps]
        lengths = [e["length"] for e in eps]
        success = data.get("success_rate")
        env_id = str(data.get("env_id") or "")
        # Only designed envs say what success is; elsewhere 0 % would mislead.
        designed = contract.env_name(env_id) is not None or env_id.endswith(
            contract.SPEC_SUFFIX
        )
        self.result_label.setText(
            f"<b>Evaluation</b> on {html.escape(str(data.get('env_id')))}: "
            f"{len(eps)} episodes<br>"
            f"mean return <b>{np.mean(returns):.4g}</b> ± {np.std(returns):.3g} "
            f"(min {min(returns, default=0):.4g}, max {max(returns, default=0):.4g}),"
            f" mean length {np.mean(lengths):.4g}"
            + (
                f", success rate {success:.0%}"
                if success is not None and designed
                else ""
            )
        )
        # The trace and frames of an episode played alongside stay: an
        # evaluation has no single episode to show in their place.

    def _show_play(self, run_id: str) -> None:
        data = self.controller.read_preview(run_id)
        if data is None:
            self.result_label.setText("The episode wrote no results.")
            return
        names = data.get("action_names") or []
        rows = []
        for i, step in enumerate(data.get("trace") or []):
            action = step.get("action_name") or step.get("action")
            if step.get("action_name") is None and isinstance(action, int) and names:
                action = names[action] if action < len(names) else action
            breakdown = step.get("reward_breakdown") or {}
            rows.append(
                {
                    "id": str(i),
                    "step": step.get("step", i + 1),
                    "action": _short(action, 30),
                    "reward": float(step.get("reward") or 0.0),
                    "breakdown": ", ".join(
                        f"{k} {v:+.3g}"
                        for k, v in breakdown.items()
                        if isinstance(v, int | float)
                    ),
                    "status": "terminated"
                    if step.get("terminated")
                    else ("truncated" if step.get("truncated") else "")
                    + (f" {step['status']}" if step.get("status") else ""),
                    "observation": _short(step.get("observation"), 80),
                }
            )
        self.trace_table.set_records(rows)
        ep = (data.get("episodes") or [{}])[0]
        note = str(data.get("frames_note") or "")
        self.result_label.setText(
            f"<b>Play</b> on {html.escape(str(data.get('env_id')))}: return "
            f"<b>{ep.get('return', 0):.4g}</b> in {ep.get('length', 0)} steps"
            + (" — success" if ep.get("success") else "")
            + (
                f"<br><span style='color:gray'>{html.escape(note)}</span>"
                if note
                else ""
            )
        )
        frames_path = data.get("frames")
        if frames_path and Path(frames_path).is_file():
            with np.load(frames_path) as npz:
                self.frames.set_frames(npz["frames"])
        else:
            # The viewer stays, with the sentence where the picture would be.
            self.frames.set_frames(
                np.zeros((0, 1, 1, 3), np.uint8), note or "This episode has no frames."
            )
        self.frames.show()

    def _on_controller_failed(self, message: str) -> None:
        self.action_box.show()
        self.action_label.setText(
            f"<span style='color:#d62728'>{html.escape(message)}</span>"
        )
        self._update_buttons(self.selected())

    # ------------------------------------------------------------ reports
    def _on_tabs_current_changed(self, index: int) -> None:
        if self.tabs.widget(index) is self.trace_viewer:
            self.trace_viewer.refresh()
        elif index == 3:
            self._refresh_reports()

    def evaluation_reports(self) -> list[tuple[str, str]]:
        """(title, report path) of every evaluation report of the project's
        runs (``llm.evaluate`` runs and flows' Evaluate nodes)."""
        return evaluation_reports(self._state.runs.values())

    def _refresh_reports(self) -> None:
        reports = self.evaluation_reports()
        current = self.report_box.currentData()
        self.report_box.blockSignals(True)
        self.report_box.clear()
        for title, path in reports:
            self.report_box.addItem(title, path)
        index = max(0, self.report_box.findData(current))
        self.report_box.blockSignals(False)
        if reports:
            self.report_box.setCurrentIndex(index)
            self._on_report_box_changed(index)
        else:
            self.report.clear(
                "No evaluation reports yet: run llm.evaluate, or a flow's "
                "Evaluate node, with a baseline to compare a model before and "
                "after training."
            )

    def _on_report_box_changed(self, index: int) -> None:
        path = self.report_box.itemData(index)
        if path:
            self.report.load(path)

    def show_report(self, path: str) -> bool:
        """Show a report file (also one not made by a run of this project)."""
        self.tabs.setCurrentIndex(3)
        return self.report.load(path)
