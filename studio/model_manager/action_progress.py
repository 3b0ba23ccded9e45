"""The Models workspace's run line: the last action run in the engine
(evaluate, play, export, deploy, download, retrain), its progress and
Stop while it runs, and how it ended."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from studio.lifetime import subscribe
from studio.model_manager.controller import ModelsController
from studio.session import Session
from studio.state.job_kinds import JOB_KINDS
from widgets.run_progress import RunProgressBar

PURPOSE_TITLES = {
    "evaluate": "Evaluation",
    "play": "Play",
    "record": "Recording",
    "export.onnx": "ONNX export",
    "export.gguf": "GGUF export",
    "deploy": "Ollama deployment",
    "hub.download": "Download from the Hub",
    "hub.push": "Push to the Hub",
    "hub.agent": "Agent download",
    "llm.import": "Dataset import",
    "retrain": "Reward model retraining",
}
"""What the run line calls each purpose of the controller's actions."""


def purpose_title(purpose: str) -> str:
    return PURPOSE_TITLES.get(purpose, purpose)


class ActionProgress(QWidget):
    """The run of the last action the controller started; hidden until one."""

    def __init__(
        self,
        session: Session,
        controller: ModelsController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self.run_id = ""
        """The run followed (the last action's)."""
        self.label = QLabel()
        self.bar = RunProgressBar()
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop this run")
        self.stop_button.clicked.connect(self._on_stop_button_clicked)
        self.stop_button.hide()
        row = QHBoxLayout(self)
        row.addWidget(self.label)
        row.addWidget(self.bar, 1)
        row.addWidget(self.stop_button)
        self.hide()
        controller.action_started.connect(self._on_action_started)
        controller.action_ended.connect(self._on_action_ended)
        controller.failed.connect(self._on_controller_failed)
        subscribe(self._state, self, self._on_state_changed)

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "run" and key == self.run_id:
            run = self._state.run(self.run_id) or {}
            total = int(run.get("progress_total") or 0) or None
            self.bar.set_progress(
                float(run.get("progress_done") or 0),
                total,
                run.get("rate") or None,
                run.get("eta_s"),
                JOB_KINDS.unit(str(run.get("kind") or "")),
                str(run.get("progress_message") or ""),
            )

    def _on_action_started(self, run_id: str, purpose: str) -> None:
        self.run_id = run_id
        self.show()
        self.label.setText(f"{purpose_title(purpose)}:")
        self.bar.set_state("running")
        self.bar.set_progress(0, None)
        self.bar.show()
        self.stop_button.setEnabled(True)
        self.stop_button.setVisible(purpose == "hub.download")

    def _on_stop_button_clicked(self) -> None:
        if self.run_id:
            self._session.stop_run(self.run_id)
            self.stop_button.setEnabled(False)

    def _on_action_ended(
        self, run_id: str, purpose: str, status: str, reason: str
    ) -> None:
        if run_id == self.run_id:
            self.bar.hide()  # the label says how it ended
            self.stop_button.hide()
        title = purpose_title(purpose)
        if purpose == "hub.download":
            self._show_download(run_id, status, reason)
        elif status != "completed":
            self.label.setText(f"{title} {status}.")
        elif purpose == "deploy":
            self._show_deploy(run_id)
        elif purpose == "llm.import":
            self._show_import(run_id)
        else:
            self.label.setText(f"{title} done.")

    def _show_deploy(self, run_id: str) -> None:
        summary = (self._state.run(run_id) or {}).get("summary") or {}
        deploy = summary.get("deploy") or {}
        self.label.setText(
            html.escape(str(deploy.get("message") or "Deployed."))
            + (
                f"  <code>ollama run {html.escape(str(deploy.get('name')))}</code>"
                if deploy.get("deployed")
                else ""
            )
        )

    def _show_import(self, run_id: str) -> None:
        summary = (self._state.run(run_id) or {}).get("summary") or {}
        stats = summary.get("stats") or {}
        fmt = html.escape(str(summary.get("format")))
        method = html.escape(str(summary.get("method", "")).upper())
        self.label.setText(
            f"Imported {stats.get('rows', 0):,} {fmt} rows for {method} "
            f"({stats.get('train', 0):,} train, {stats.get('validation', 0):,} "
            f"validation) into {html.escape(str(summary.get('dataset')))}."
        )

    def _show_download(self, run_id: str, status: str, reason: str) -> None:
        summary = (self._state.run(run_id) or {}).get("summary") or {}
        repo = html.escape(str(summary.get("repo_id") or ""))
        if status == "completed":
            self.label.setText(
                f"Downloaded <b>{repo}</b> to {html.escape(str(summary.get('path')))}"
                f"; name it <code>{repo}</code> as a base model."
            )
        elif status == "stopped":
            self.label.setText(
                "Download stopped: downloading it again resumes where it stopped."
            )
        else:
            self.label.setText(
                f"<span style='color:#d62728'>{html.escape(reason)}</span>"
            )

    def _on_controller_failed(self, message: str) -> None:
        self.show()
        self.label.setText(f"<span style='color:#d62728'>{html.escape(message)}</span>")
