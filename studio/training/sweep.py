"""Sweep: an Optuna study over a training run's settings, started and
watched from the Training workspace.

The form comes from the engine (the ``rl.tune`` job's schema, generated from
its config dataclass); the search space is typed one item a line as on the
command line (``learning_rate=1e-5:1e-2:log``, ``gamma``, ``n_epochs=5,10,20``;
empty: every setting that declares a range). Start sends an ``rl.tune`` run;
its trials appear in the run list as ordinary runs, and each finished trial
arrives as a metrics row of the sweep run (``sweep/value``, ``sweep/best``),
drawn as an optimization history on the panel's own timer. Once it has
ended, "Save best as preset" saves its best trial's settings as a project
preset (an ``rl.tune.preset`` run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from studio.lifetime import subscribe
from studio.pickers import picker_sources
from studio.session import Session
from widgets.history_plot import HistoryPlot
from widgets.param_form import ParamForm

KIND = "rl.tune"
PRESET_KIND = "rl.tune.preset"
VALUE = "sweep/value"
BEST = "sweep/best"
REDRAW_MS = 40


def text_items(text: str) -> list[str]:
    """One item a line, blank lines and surrounding spaces dropped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def objective_label(config: dict[str, Any]) -> str:
    """The history's value axis for a sweep started with ``config``: what
    its objective measures (the ``rl.tune`` job's ``objective``)."""
    if config.get("objective") != "time_to_target":
        return "eval reward (last evaluation)"
    targets = [
        item.partition("=")[2].strip()
        for item in config.get("settings", [])
        if item.partition("=")[0].strip() == "target_eval_reward"
    ]
    return f"CPU seconds to eval reward {targets[-1]}" if targets else "CPU seconds"


class SweepPanel(QWidget):
    sweep_started = Signal(str)
    """The run id of the sweep just started."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._store = session.metrics
        self.run_id = ""
        self._preset_run_id = ""
        """The rl.tune.preset run saving the shown sweep's best, if any."""
        self._dirty = False
        self._starting_axis = objective_label({})
        """The history's value axis for the sweep being started."""

        self.form = ParamForm()
        self.form.validity_changed.connect(self._on_form_validity_changed)
        picker_sources(session).attach(self.form)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.form)
        self.search_edit = QPlainTextEdit(
            placeholderText="one setting a line: learning_rate=1e-5:1e-2:log, "
            "gamma, n_epochs=5,10,20 (empty: every setting with a declared range)"
        )
        self.settings_edit = QPlainTextEdit(
            placeholderText="fixed for every trial, one a line: eval_episodes=5"
        )
        for edit in (self.search_edit, self.settings_edit):
            edit.setMaximumHeight(70)
        extra = QFormLayout()
        extra.addRow("Search", self.search_edit)
        extra.addRow("Fixed", self.settings_edit)

        self.start_button = QPushButton("Start sweep")
        self.stop_button = QPushButton("Stop sweep")
        self.start_button.setEnabled(False)
        self.stop_button.setEnabled(False)
        self.start_button.clicked.connect(self._on_start_clicked)
        self.stop_button.clicked.connect(self._on_stop_clicked)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        self.message.hide()

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(scroll, 1)
        left_layout.addLayout(extra)
        left_layout.addLayout(buttons)
        left_layout.addWidget(self.message)

        self.status = QLabel("No sweep started.")
        self.history = HistoryPlot(
            x_label="finished trials", y_label=objective_label({})
        )
        self.preset_name = QLineEdit(placeholderText="preset name")
        self.save_preset_button = QPushButton("Save best as preset")
        self.save_preset_button.setToolTip(
            "Save the best trial's settings as a project preset: the run "
            "dialog offers it for this env, with the sweep as its provenance."
        )
        self.save_preset_button.setEnabled(False)
        self.save_preset_button.clicked.connect(self._on_save_preset_clicked)
        self.preset_message = QLabel(wordWrap=True)
        self.preset_message.hide()
        save = QHBoxLayout()
        save.addWidget(self.preset_name, 1)
        save.addWidget(self.save_preset_button)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.status)
        right_layout.addWidget(self.history, 1)
        right_layout.addLayout(save)
        right_layout.addWidget(self.preset_message)

        layout = QHBoxLayout(self)
        layout.addWidget(left, 2)
        layout.addWidget(right, 3)

        unsubscribe = self._store.add_append_listener(self._on_store_appended)
        self.destroyed.connect(lambda *_: unsubscribe())
        subscribe(session.state, self, self._on_state_changed)
        self._redraw = QTimer(self, interval=REDRAW_MS)
        self._redraw.timeout.connect(self._on_redraw_timeout)
        self._redraw.start()
        session.project_opened.connect(self._on_session_project_opened)
        if session.state.is_open:
            self._request_schema()

    # ------------------------------------------------------------- form
    def _on_session_project_opened(self, _path: str) -> None:
        self._request_schema()

    def _request_schema(self) -> None:
        self._session.request_run_schema(KIND, {}, self._on_schema, self._on_error)

    def _on_schema(self, fields: list[dict[str, Any]]) -> None:
        self.form.set_schema(fields, self.form.values() or None)
        self.start_button.setEnabled(self.form.is_valid() and not self._running())

    def _on_form_validity_changed(self, valid: bool) -> None:
        self.start_button.setEnabled(valid and not self._running())

    def config(self) -> dict[str, Any]:
        """The ``rl.tune`` config the form and the two lists make."""
        config = {k: v for k, v in self.form.values().items() if v is not None}
        search = text_items(self.search_edit.toPlainText())
        if search:
            config["search"] = search
        fixed = text_items(self.settings_edit.toPlainText())
        if fixed:
            config["settings"] = fixed
        return config

    # ---------------------------------------------------------- actions
    def _on_start_clicked(self) -> None:
        self.start_button.setEnabled(False)
        self.message.hide()
        config = self.config()
        self._starting_axis = objective_label(config)
        self._session.start_run(
            KIND, config, on_started=self._on_started, on_error=self._on_error
        )

    def _on_started(self, run_id: str) -> None:
        self.run_id = run_id
        self.history.clear()
        self.history.set_y_label(self._starting_axis)
        self._dirty = True
        self._update_status()
        self.sweep_started.emit(run_id)

    def _on_error(self, error: protocol.Error) -> None:
        self.start_button.setEnabled(self.form.is_valid() and not self._running())
        self.message.setText(error.message)
        self.message.show()
        if error.field and error.field in self.form.values():
            self.form.set_external_errors({error.field: error.message})

    def _on_stop_clicked(self) -> None:
        if self.run_id:
            self.stop_button.setEnabled(False)
            self._session.stop_run(self.run_id)

    def _on_save_preset_clicked(self) -> None:
        run = self._session.state.run(self.run_id) or {}
        config = run.get("config") or {}
        self.save_preset_button.setEnabled(False)
        self._show_preset_message("")
        self._session.start_run(
            PRESET_KIND,
            {
                "study": config.get("study", ""),
                "storage": config.get("storage", ""),
                "name": self.preset_name.text().strip(),
            },
            on_started=self._on_preset_started,
            on_error=self._on_preset_error,
        )

    def _on_preset_started(self, run_id: str) -> None:
        self._preset_run_id = run_id
        self._preset_ended()  # it may have ended before this reply came

    def _on_preset_error(self, error: protocol.Error) -> None:
        self._show_preset_message(error.message, error=True)
        self._update_status()

    def _show_preset_message(self, text: str, *, error: bool = False) -> None:
        self.preset_message.setStyleSheet("color: #d62728;" if error else "")
        self.preset_message.setText(text)
        self.preset_message.setVisible(bool(text))

    def _preset_ended(self) -> None:
        """Say how the preset run ended, once."""
        run = self._session.state.run(self._preset_run_id) or {}
        status = run.get("status")
        if status in ("queued", "running", None):
            return
        self._preset_run_id = ""
        summary = run.get("summary") or {}
        if status == "completed" and summary.get("preset"):
            self._show_preset_message(
                f"Saved trial #{summary['best_trial']} (value "
                f"{summary['best_value']:.4g}) as the preset "
                f"{(run.get('config') or {}).get('name')!r}: {summary['preset']}"
            )
        else:
            self._show_preset_message(
                str(run.get("reason") or f"The preset was not saved ({status})."),
                error=True,
            )
        self._update_status()

    # ------------------------------------------------------------- live
    def _running(self) -> bool:
        run = self._session.state.run(self.run_id) if self.run_id else None
        return bool(run and run.get("status") in ("queued", "running"))

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset" or key == self.run_id:
            self._update_status()
        if self._preset_run_id and (what == "reset" or key == self._preset_run_id):
            self._preset_ended()

    def _update_status(self) -> None:
        run = self._session.state.run(self.run_id) if self.run_id else None
        running = self._running()
        self.stop_button.setEnabled(running)
        self.start_button.setEnabled(self.form.is_valid() and not running)
        # The best of a sweep that has ended, one save at a time.
        self.save_preset_button.setEnabled(
            run is not None
            and not running
            and not self._preset_run_id
            and self._store.last(self.run_id, BEST) is not None
        )
        if run is None:
            return
        done = int(run.get("progress_done") or 0)
        total = int(run.get("progress_total") or 0)
        best = self._store.last(self.run_id, BEST)
        best_text = f", best {best[2]:.4g}" if best else ""
        status = run.get("status", "")
        self.status.setText(
            f"{run.get('name') or self.run_id}: {status}, "
            f"{done}/{total or '?'} trials{best_text}"
        )

    def _on_store_appended(self, run_id: str, keys: list[str]) -> None:
        if run_id == self.run_id:
            self._dirty = True

    def _on_redraw_timeout(self) -> None:
        if not self._dirty or not self.run_id:
            return
        self._dirty = False
        steps, _times, values = self._store.series(self.run_id, VALUE)
        best_steps, _t, best = self._store.series(self.run_id, BEST)
        # One x per finished trial; a trial without a value has no point.
        x = np.union1d(steps, best_steps)
        ys = np.full(len(x), np.nan)
        ys[np.searchsorted(x, steps)] = values
        bs = np.full(len(x), np.nan)
        bs[np.searchsorted(x, best_steps)] = best
        self.history.set_history(x, ys, bs)
        self._update_status()
