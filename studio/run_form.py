"""A run of one job kind, set up in the engine's form for that kind.

The engine publishes each kind's form (``run.schema``: derived from the
kind's config dataclass, so the fields, defaults, choices and help always
match what its validator accepts). :class:`RunFormDialog` shows it, leaves
out the settings its caller fixes (the model an export starts from, its
lineage), and sends only what the user changed, so the engine keeps choosing
the rest. A change to a field that shapes the form (an algorithm, a tensor
type) asks the engine for the form again. The dialog stays open until the
engine accepts the config; a refused config shows the engine's sentence on
the field it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from studio.common import ok_cancel_buttons
from studio.pickers import picker_sources
from studio.session import Session
from widgets.param_form import ParamForm

RESHAPE_DELAY_MS = 400
"""How long typing in a shaping field waits before the form is asked again."""


class RunFormDialog(QDialog):
    run_started = Signal(str)
    """The engine accepted the config and started this run (its id)."""

    shaping_fields: tuple[str, ...] = ()
    """Fields whose value changes which fields the form has, or their
    choices and presets: a change asks the engine for the form again, and
    their values are always sent."""

    keeps_edits = True
    """Whether what the user typed outlives a new form (False: the fields
    start again at the new form's defaults, a new preset's)."""

    def __init__(
        self,
        session: Session,
        kind: str,
        *,
        title: str,
        ok_text: str,
        initial: Mapping[str, Any] | None = None,
        fixed: Mapping[str, Any] | None = None,
        hidden: Iterable[str] = (),
        run_name: str = "",
        shaping: Iterable[str] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """``initial``: form values over the engine's defaults; ``fixed``:
        settings sent as they are and not shown; ``hidden``: fields not
        shown (the engine's default or ``fixed`` applies); ``run_name``: a
        ``str.format`` template over the config."""
        super().__init__(parent)
        self.setWindowTitle(title)
        self.resize(520, 380)
        self._session = session
        self._kind = kind
        self._fixed = dict(fixed or {})
        self._hidden = set(hidden) | set(self._fixed)
        self._run_name = run_name
        if shaping is not None:
            self.shaping_fields = tuple(shaping)
        self._values = self.to_form(dict(initial or {}))
        self._shape = self._shaping(self._values)
        self._defaults: dict[str, Any] = {}
        self.started_run_id = ""
        self.form = ParamForm()
        picker_sources(session).attach(self.form)
        self.form.values_changed.connect(self._on_form_values_changed)
        self.form.validity_changed.connect(self._on_form_validity_changed)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.form)
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        self.message.hide()
        self.buttons = ok_cancel_buttons(self, ok_text, self._on_buttons_accepted)
        self.body = QVBoxLayout(self)
        self.body.addWidget(scroll, 1)
        self.body.addWidget(self.message)
        self.body.addWidget(self.buttons)
        self._reshape_timer = QTimer(self, singleShot=True, interval=RESHAPE_DELAY_MS)
        self._reshape_timer.timeout.connect(self._request_schema)
        self._set_busy(True)
        self._request_schema()

    # ----------------------------------------------------- for subclasses
    def to_form(self, config: dict[str, Any]) -> dict[str, Any]:
        """A config as form values (the form's field names)."""
        return config

    def to_config(self, values: dict[str, Any]) -> dict[str, Any]:
        """Form values as a config; empty optional fields are left out so
        the engine fills in its own default."""
        return {k: v for k, v in values.items() if v is not None}

    def schema_loaded(self, fields: list[dict[str, Any]]) -> None:
        """The engine's form for the values so far is shown."""

    def values_edited(self) -> None:
        """The user changed a value (:attr:`values` holds them all)."""

    # ------------------------------------------------------------ schema
    @property
    def values(self) -> dict[str, Any]:
        """The form's values (with the fields not loaded yet as given)."""
        return dict(self._values)

    def is_loaded(self) -> bool:
        """Whether the engine's form arrived."""
        return bool(self._defaults)

    def _shaping(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values.get(k) for k in self.shaping_fields)

    def _request_schema(self) -> None:
        if any(p.is_open() for p in self.form.pickers().values()):
            self._reshape_timer.start()  # the user is still searching
            return
        self._session.request_run_schema(
            self._kind,
            {**self.to_config(self._values), **self._fixed},
            self._on_schema,
            self._on_error,
        )

    def _on_schema(self, fields: list[dict[str, Any]]) -> None:
        keep = {k: v for k, v in self._values.items() if k in self.shaping_fields}
        if not self.is_loaded():
            keep = dict(self._values)
        elif self.keeps_edits:
            keep.update(self._edited())
        shown = [f for f in fields if f["name"] not in self._hidden]
        self.form.set_schema(shown, keep)
        self._defaults = {f["name"]: f.get("default") for f in shown}
        self._values = self.form.values()
        self._shape = self._shaping(self._values)
        self.schema_loaded(fields)
        self._set_busy(False)

    # ------------------------------------------------------------- input
    def _on_form_values_changed(self, values: dict[str, Any]) -> None:
        self._values = values
        self.message.hide()
        if self._shaping(values) != self._shape:
            self._reshape_timer.start()
        self.values_edited()

    def _on_form_validity_changed(self, valid: bool) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(valid)

    def _set_busy(self, busy: bool) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(
            not busy and self.form.is_valid()
        )

    # ------------------------------------------------------------ submit
    def _edited(self) -> dict[str, Any]:
        """The values the user changed from the form's defaults."""
        return {
            k: v
            for k, v in self._values.items()
            if k not in self._defaults or self._defaults[k] != v
        }

    def config(self) -> dict[str, Any]:
        """The config to send: the fields the user changed from the form's
        defaults, the shaping fields, and the fixed settings."""
        changed = self._edited()
        for key in self.shaping_fields:
            if self._values.get(key) not in (None, ""):
                changed[key] = self._values[key]
        return {**self.to_config(changed), **self._fixed}

    def _on_buttons_accepted(self) -> None:
        self._set_busy(True)
        config = self.config()
        self._session.start_run(
            self._kind,
            config,
            name=self.run_name(config),
            on_started=self._on_started,
            on_error=self._on_error,
        )

    def run_name(self, config: dict[str, Any]) -> str:
        """The run's name: ``run_name`` filled in from the config's settings
        (``"Deploy {name}"``), else the config's own name, else the kind's
        default (empty)."""
        if self._run_name:
            try:
                return self._run_name.format_map(config)
            except (KeyError, IndexError, ValueError):
                return self._run_name
        return str(config.get("name") or "")

    def _on_started(self, run_id: str) -> None:
        self.started_run_id = run_id
        self.run_started.emit(run_id)
        self.accept()

    def _on_error(self, error: protocol.Error) -> None:
        self._set_busy(False)
        self.message.setText(error.message)
        self.message.show()
        if error.field:
            self.form.set_external_errors({error.field: error.message})
