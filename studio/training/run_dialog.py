"""New run / Duplicate with changes: the engine's form for ``rl.train``
(:class:`studio.run_form.RunFormDialog`), whose environment, algorithm and
preset shape the rest: rollout sizes fitted to the step budget and the
hardware stay the engine's choice unless the user changes them.

New run also fine-tunes a language model: "What to train" switches the form
to ``llm.train``'s (the same generic form, from the engine's catalog), with
the data one of the project's datasets (``data/datasets/<name>``, as Import
dataset and Build dataset write them), a dataset folder typed in, or a data
file, imported first by an ``llm.import`` run (its checks, its sentence on
refusal) as ``rl-studio-engine llm-train --data FILE`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from studio.lifetime import subscribe
from studio.run_form import RunFormDialog
from studio.session import Session

HP_PREFIX = "hyperparameters."
# Changing these changes which fields exist and their presets.
SHAPING_FIELDS = ("env", "algo", "preset")
PROFILE_FIELD = "hardware_profile"
SOURCE_TEXT = {
    "profile": "the profile",
    "preset": "the preset",
    "hardware": "the hardware",
    "default": "the default",
    "form": "this form",
}
"""Where a setting shown under the hardware profile comes from, as the
preview's last column says it."""
RL_KIND, LLM_KIND = "rl.train", "llm.train"
KIND_TEXT = {RL_KIND: "Train an RL agent", LLM_KIND: "Fine-tune a language model"}
"""What New run can start, as "What to train" offers it."""
DATASET_FIELD = "dataset"
"""llm.train's data, chosen beside its form."""
IMPORT_KIND = "llm.import"
"""The job that imports a data file given as the dataset, before training
(as ``rl-studio-engine llm-train --data FILE`` does)."""
TRAIN_SPLITS = ("train.jsonl", "train.parquet")


def project_datasets(project_dir: str) -> list[Path]:
    """The project's dataset folders (those holding a training split), by
    name; the half-written ones an import hides (``.import-*``) left out."""
    folder = Path(project_dir) / contract.DATASETS_FOLDER
    if not project_dir or not folder.is_dir():
        return []
    return sorted(
        d
        for d in folder.iterdir()
        if not d.name.startswith(".") and any((d / f).is_file() for f in TRAIN_SPLITS)
    )


def flatten_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run config as form values (``hyperparameters.x`` keys)."""
    values = {k: v for k, v in config.items() if k != "hyperparameters"}
    for name, value in (config.get("hyperparameters") or {}).items():
        values[HP_PREFIX + name] = value
    return values


def nest_values(values: dict[str, Any]) -> dict[str, Any]:
    """Form values as a run config; empty optional fields are left out so the
    engine fills in its own default (a preset, the hardware's choice)."""
    config: dict[str, Any] = {}
    hyper: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key.startswith(HP_PREFIX):
            hyper[key[len(HP_PREFIX) :]] = value
        else:
            config[key] = value
    if hyper:
        config["hyperparameters"] = hyper
    return config


class ProfilePreview(QWidget):
    """What the chosen hardware profile sets, read-only: a line naming it
    (or why it cannot be used here) and a table of each setting's value and
    where it comes from. The rows are the engine's (``run.schema`` gives
    every profile's), so choosing a profile asks the engine nothing."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hardware-profile-preview")
        self.summary = QLabel(wordWrap=True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Setting", "Value", "From"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(200)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(self.table)

    def show_profile(
        self, name: str, preview: dict[str, Any], own: dict[str, Any]
    ) -> None:
        """Show ``preview`` (one profile of the schema's ``profiles``);
        ``own`` holds the settings this form gives itself, which win."""
        problem = str(preview.get("problem") or "")
        text = f"Hardware profile {name!r}: {preview.get('description', '')}"
        self.summary.setText(f"{text}. {problem}" if problem else text)
        self.summary.setStyleSheet("color: #d62728;" if problem else "")
        rows = list(preview.get("settings", []))
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            key = str(row.get("name", ""))
            value, source = row.get("value"), str(row.get("source", ""))
            if key in own:
                value, source = own[key], "form"
            for column, cell in enumerate(
                (key, str(value), SOURCE_TEXT.get(source, source))
            ):
                self.table.setItem(i, column, QTableWidgetItem(cell))

    def rows(self) -> dict[str, tuple[str, str]]:
        """Setting -> (value, where from) as shown."""

        def text(row: int, column: int) -> str:
            item = self.table.item(row, column)
            return item.text() if item is not None else ""

        return {
            text(i, 0): (text(i, 1), text(i, 2)) for i in range(self.table.rowCount())
        }


class RunDialog(RunFormDialog):
    """New training run / Duplicate with changes (``rl.train`` and the
    sweep's trials): the form nests hyperparameters as
    ``hyperparameters.x`` fields and previews the hardware profile."""

    profile_preview_changed = Signal(str)
    """The hardware profile preview now shows this profile."""

    shaping_fields: tuple[str, ...] = SHAPING_FIELDS
    keeps_edits = False  # a new algorithm or preset brings its own settings

    def __init__(
        self,
        session: Session,
        kind: str = "rl.train",
        initial: dict[str, Any] | None = None,
        parent: QWidget | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(
            session,
            kind,
            title=title
            or ("Duplicate run with changes" if initial else "New training run"),
            ok_text="Train",
            initial=initial,
            parent=parent,
        )
        # The engine's form arrives later, through the event loop.
        self._profiles: dict[str, dict[str, Any]] = {}
        self.profile_preview = ProfilePreview()
        self.profile_preview.hide()
        self.resize(560, 720)
        self.body.insertWidget(0, self.profile_preview)
        self.kind_box = QComboBox()
        for value, text in KIND_TEXT.items():
            self.kind_box.addItem(text, value)
        self.kind_box.setCurrentIndex(max(self.kind_box.findData(kind), 0))
        self.kind_box.activated.connect(self._on_kind_box_activated)
        # Editable: a dataset folder outside the project can be typed in.
        self.dataset_box = QComboBox(editable=True)
        self.dataset_box.setToolTip(
            "A dataset of this project (Models → Import dataset… or a flow's "
            "Build dataset writes them), a dataset folder, or a data file "
            "(.jsonl, .json, .csv, .parquet) to import first."
        )
        self.import_status = QLabel(wordWrap=True)
        self._import_run = ""
        choose = QWidget()
        self._choose_rows = QFormLayout(choose)
        self._choose_rows.setContentsMargins(0, 0, 0, 0)
        self._choose_rows.addRow("What to train", self.kind_box)
        self._choose_rows.addRow("Dataset", self.dataset_box)
        self._choose_rows.addRow("", self.import_status)
        self._choose_rows.setRowVisible(self.import_status, False)
        subscribe(session.state, self, self._on_state_changed)
        # A duplicate keeps its run's kind.
        self._choose_rows.setRowVisible(self.kind_box, not initial)
        self.body.insertWidget(0, choose)
        self._title = self.windowTitle()
        self._show_kind()

    @property
    def kind(self) -> str:
        """The job kind the form is for."""
        return self._kind

    def _on_kind_box_activated(self, _index: int) -> None:
        kind = str(self.kind_box.currentData())
        if kind == self._kind:
            return
        # A new form, from the engine's catalog, at its own defaults.
        self._kind = kind
        self._values, self._defaults = {}, {}
        self._shape = self._shaping({})
        self._show_kind()
        self._set_busy(True)
        self._request_schema()

    def _show_kind(self) -> None:
        llm = self._kind == LLM_KIND
        self.shaping_fields = () if llm else SHAPING_FIELDS
        self._hidden.discard(DATASET_FIELD)
        if llm:
            self._hidden.add(DATASET_FIELD)
            self.profile_preview.hide()
            self.dataset_box.clear()
            for folder in project_datasets(self._session.state.path):
                self.dataset_box.addItem(folder.name, str(folder))
        self._choose_rows.setRowVisible(self.dataset_box, llm)
        self.setWindowTitle(KIND_TEXT[LLM_KIND] if llm else self._title)

    def dataset(self) -> str:
        """The chosen dataset folder: a project dataset's, or as typed."""
        text = self.dataset_box.currentText().strip()
        index = self.dataset_box.findText(text)
        return str(self.dataset_box.itemData(index)) if index >= 0 else text

    def config(self) -> dict[str, Any]:
        config = super().config()
        if self._kind == LLM_KIND:
            config[DATASET_FIELD] = self.dataset()
        return config

    # ------------------------------------------- a data file, imported first
    def _on_buttons_accepted(self) -> None:
        source = self.dataset()
        if self._kind != LLM_KIND or not Path(source).is_file():
            super()._on_buttons_accepted()
            return
        # The engine's llm.import checks the file (one sentence on refusal);
        # training starts when its run has written the dataset.
        values = self.values
        self._set_busy(True)
        self._session.start_run(
            IMPORT_KIND,
            {
                "source": source,
                "method": values.get("method"),
                "base_model": values.get("model") or "",
                "max_length": values.get("max_length"),
            },
            name=f"Import {Path(source).name}",
            on_started=self._on_import_started,
            on_error=self._on_error,
        )

    def _on_import_started(self, run_id: str) -> None:
        self._import_run = run_id
        self.import_status.setText(f"Importing {Path(self.dataset()).name}…")
        self._choose_rows.setRowVisible(self.import_status, True)

    def _on_state_changed(self, what: str, key: str) -> None:
        run = self._session.state.run(self._import_run) if self._import_run else None
        if run is None or run.get("status") not in contract.FINAL_STATUSES:
            return
        self._import_run = ""
        self._choose_rows.setRowVisible(self.import_status, False)
        folder = str((run.get("summary") or {}).get("dataset") or "")
        if run.get("status") != "completed" or not folder:
            self._set_busy(False)
            self.message.setText(str(run.get("reason") or "The import failed."))
            self.message.show()
            return
        self.dataset_box.addItem(Path(folder).name, folder)
        self.dataset_box.setCurrentIndex(self.dataset_box.count() - 1)
        super()._on_buttons_accepted()

    def to_form(self, config: dict[str, Any]) -> dict[str, Any]:
        return flatten_config(config)

    def to_config(self, values: dict[str, Any]) -> dict[str, Any]:
        return nest_values(values)

    def schema_loaded(self, fields: list[dict[str, Any]]) -> None:
        self._profiles = next(
            (f.get("profiles", {}) for f in fields if f["name"] == PROFILE_FIELD), {}
        )
        self._show_profile()

    def values_edited(self) -> None:
        self._show_profile()

    def _show_profile(self) -> None:
        """The chosen hardware profile's settings, with those this form sets
        itself in their place."""
        values = self.values
        name = str(values.get(PROFILE_FIELD) or "")
        preview = self._profiles.get(name)
        self.profile_preview.setVisible(preview is not None)
        if preview is None:
            return
        own = {
            key: value
            for key, value in self.config().items()
            if key not in SHAPING_FIELDS and key != PROFILE_FIELD
        }
        self.profile_preview.show_profile(name, preview, own)
        self.profile_preview_changed.emit(name)
