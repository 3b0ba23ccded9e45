"""User settings (QSettings) and the Settings dialog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine.contract import (
    ALLOW_UNCONFINED_ENV,
    TRACKING_URI_ENV,
    default_projects_root,
)
from studio.common import ok_cancel_buttons

MAX_RECENT = 8
THEMES = ("system", "light", "dark")

T = TypeVar("T")


class Settings:
    """Typed access to the studio's persistent settings."""

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self._s = qsettings or QSettings("RLStudio", "RL Studio")

    def _get(self, key: str, default: T, kind: Callable[[Any], T]) -> T:
        value = self._s.value(key, default)
        try:
            return kind(value)
        except (TypeError, ValueError):
            return default

    def _strings(self, key: str) -> list[str]:
        """A list setting: QSettings gives a one-entry list back as a string
        and an empty one as None (on some platforms)."""
        value = self._s.value(key, [])
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
        return []

    @property
    def projects_root(self) -> Path:
        return Path(str(self._get("projects_root", str(default_projects_root()), str)))

    @projects_root.setter
    def projects_root(self, value: Path) -> None:
        self._s.setValue("projects_root", str(value))

    @property
    def default_project(self) -> Path:
        return self.projects_root / "default"

    @property
    def last_project(self) -> str:
        return str(self._get("last_project", "", str))

    @last_project.setter
    def last_project(self, value: str) -> None:
        self._s.setValue("last_project", value)

    @property
    def recent_projects(self) -> list[str]:
        return self._strings("recent_projects")

    def add_recent_project(self, path: str) -> None:
        recent = [p for p in self.recent_projects if p != path]
        self._s.setValue("recent_projects", [path, *recent][:MAX_RECENT])

    def remove_recent_project(self, path: str) -> None:
        self._s.setValue(
            "recent_projects", [p for p in self.recent_projects if p != path]
        )

    @property
    def recent_flows(self) -> list[str]:
        """Flow files the user opened or saved last, newest first."""
        return self._strings("recent_flows")

    def add_recent_flow(self, path: str) -> None:
        recent = [p for p in self.recent_flows if p != path]
        self._s.setValue("recent_flows", [path, *recent][:MAX_RECENT])

    def remove_recent_flow(self, path: str) -> None:
        self._s.setValue("recent_flows", [p for p in self.recent_flows if p != path])

    @property
    def stop_timeout_s(self) -> float:
        return self._get("stop_timeout_s", 10.0, float)

    @stop_timeout_s.setter
    def stop_timeout_s(self, value: float) -> None:
        self._s.setValue("stop_timeout_s", float(value))

    @property
    def log_max_lines(self) -> int:
        return self._get("log_max_lines", 5000, int)

    @log_max_lines.setter
    def log_max_lines(self, value: int) -> None:
        self._s.setValue("log_max_lines", int(value))

    @property
    def allow_unconfined(self) -> bool:
        """Run untrusted code (code rewards, python env files) unconfined
        where neither bubblewrap nor unshare works; off by default."""
        return str(self._s.value("allow_unconfined", "false")).lower() == "true"

    @allow_unconfined.setter
    def allow_unconfined(self, value: bool) -> None:
        self._s.setValue("allow_unconfined", "true" if value else "false")

    @property
    def mlflow_uri(self) -> str:
        """The MLflow tracking server every run logs to; empty: none (then
        ``MLFLOW_TRACKING_URI`` from the studio's own environment applies)."""
        return str(self._get("mlflow_uri", "", str)).strip()

    @mlflow_uri.setter
    def mlflow_uri(self, value: str) -> None:
        self._s.setValue("mlflow_uri", value.strip())

    @property
    def theme(self) -> str:
        """ "light", "dark" or "system" (the desktop's choice)."""
        value = str(self._get("theme", "system", str))
        return value if value in THEMES else "system"

    @theme.setter
    def theme(self, value: str) -> None:
        if value not in THEMES:
            raise ValueError(
                f"The theme must be one of {', '.join(THEMES)}, not {value!r}."
            )
        self._s.setValue("theme", value)

    @property
    def show_welcome(self) -> bool:
        """Show the welcome page when the studio starts."""
        return str(self._s.value("show_welcome", "true")).lower() == "true"

    @show_welcome.setter
    def show_welcome(self, value: bool) -> None:
        self._s.setValue("show_welcome", "true" if value else "false")

    @property
    def last_workspace(self) -> str:
        """The workspace shown when the window last closed."""
        return str(self._get("window/last_workspace", "", str))

    @last_workspace.setter
    def last_workspace(self, value: str) -> None:
        self._s.setValue("window/last_workspace", value)

    def window_layout(self, key: str) -> QByteArray | None:
        """A saved Qt state (``saveGeometry`` / ``saveState``) of the window
        or one of its splitters; None when there is none."""
        value = self._s.value(f"window/{key}")
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def set_window_layout(self, key: str, value: QByteArray) -> None:
        self._s.setValue(f"window/{key}", value)

    def engine_environment(self) -> dict[str, str]:
        """What the engine process (and the jobs it starts) are told."""
        env = {ALLOW_UNCONFINED_ENV: "1" if self.allow_unconfined else "0"}
        if self.mlflow_uri:
            env[TRACKING_URI_ENV] = self.mlflow_uri
        return env

    def sync(self) -> None:
        self._s.sync()


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._settings = settings
        self.projects_root = QLineEdit(str(settings.projects_root))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        row = QHBoxLayout()
        row.addWidget(self.projects_root, 1)
        row.addWidget(browse)
        self.stop_timeout = QDoubleSpinBox(
            minimum=1, maximum=600, decimals=0, suffix=" s"
        )
        self.stop_timeout.setValue(settings.stop_timeout_s)
        self.stop_timeout.setToolTip(
            "How long a run may take to stop by itself before it is terminated."
        )
        self.log_lines = QSpinBox(minimum=500, maximum=200_000, singleStep=500)
        self.log_lines.setValue(settings.log_max_lines)
        self.allow_unconfined = QCheckBox(
            "Run untrusted code unconfined where no sandbox works"
        )
        self.allow_unconfined.setChecked(settings.allow_unconfined)
        self.allow_unconfined.setToolTip(
            "Code-execution rewards and python env files run confined by "
            "bubblewrap or unshare (no network, read-only files, limits). Where "
            "neither works they are refused; check this only if you trust the "
            "code. Applies when the engine next starts (Engine → Restart engine)."
        )
        self.mlflow_uri = QLineEdit(settings.mlflow_uri)
        self.mlflow_uri.setPlaceholderText("http://127.0.0.1:5000 (none: no MLflow)")
        self.mlflow_uri.setToolTip(
            "Every run logs its settings, metrics, files and models that reach "
            "their target to this MLflow tracking server (needs "
            "rl-studio[mlflow]). Applies when the engine next starts."
        )
        form = QFormLayout(self)
        form.addRow("Projects folder", row)
        form.addRow("Stop timeout", self.stop_timeout)
        form.addRow("Log lines kept", self.log_lines)
        form.addRow("Untrusted code", self.allow_unconfined)
        form.addRow("MLflow tracking URI", self.mlflow_uri)
        buttons = ok_cancel_buttons(self)
        form.addRow(buttons)

    def _on_browse_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Projects folder", self.projects_root.text()
        )
        if folder:
            self.projects_root.setText(folder)

    def accept(self) -> None:
        self._settings.projects_root = Path(self.projects_root.text()).expanduser()
        self._settings.stop_timeout_s = self.stop_timeout.value()
        self._settings.log_max_lines = self.log_lines.value()
        self._settings.allow_unconfined = self.allow_unconfined.isChecked()
        self._settings.mlflow_uri = self.mlflow_uri.text()
        self._settings.sync()
        super().accept()
