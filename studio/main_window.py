"""The main window: navigation between the four workspaces, the engine and
project status, the log console, and the application menus."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, qVersion
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QDesktopServices,
    QDragEnterEvent,
    QDropEvent,
    QIcon,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from resources import resource_path
from studio.engine_client import CRASHED, FAILED, READY, STARTING
from studio.layout_memory import Part, layout_parts, restore_parts, save_parts
from studio.notices import Notifier, ask_quit
from studio.pickers import cached_models
from studio.session import Session
from studio.settings import THEMES, Settings, SettingsDialog
from studio.shortcuts import ShortcutsDialog, shortcut_rows
from studio.state.project_state import is_training
from studio.theme import apply_theme
from studio.welcome import WelcomeDialog, ask_base_model_download, missing_base_models
from widgets.banner import Banner
from widgets.fit import fit_window, screen_capped
from widgets.hardware_meter import HardwareMeter, Usage
from widgets.log_console import LogConsole

if TYPE_CHECKING:
    from studio.docs_viewer import DocsDialog
    from studio.environments.workspace import EnvironmentsWorkspace
    from studio.training.workspace import TrainingWorkspace

WORKSPACES = ("environments", "workflows", "training", "models")
ENGINE_STATE_TEXT = {
    STARTING: ("#b8860b", "Engine starting…"),
    READY: ("#2ca02c", "Engine ready"),
    CRASHED: ("#d62728", "Engine crashed — restarting"),
    FAILED: ("#d62728", "Engine stopped"),
    "stopped": ("#7f7f7f", "Engine stopped"),
}
STANDARD_KEY_FALLBACK = {
    QKeySequence.StandardKey.New: "Ctrl+N",
    QKeySequence.StandardKey.Open: "Ctrl+O",
    QKeySequence.StandardKey.Preferences: "Ctrl+,",
    QKeySequence.StandardKey.Quit: "Ctrl+Q",
    QKeySequence.StandardKey.HelpContents: "F1",
}
LLM_EXAMPLE = "jira_llm_grpo.flow.json"
SELFTEST_CONFIG = {"steps": 300, "step_seconds": 0.01}
IDLE_BUILD_MS = 200
"""After the window is shown, a workspace not built yet is built this often."""
DEFAULT_SIZE = QSize(1280, 800)
"""The first window's size where the screen has room for it (its frame too)."""
MINIMUM_HEIGHT = 720
"""The lowest the window goes (px): at its narrowest (970 px) the Models
header, its actions and the trace filters wrap a line taller each, and the
Traces tab's panes (episodes beside steps, the prompt under them) need room
under them; at the 595 px Qt worked out (as if nothing wrapped) the Models tabs, the env
Preview's lists and the runs list were cut. With its frame it fits a 768-px
screen; on a screen with less room (a panel) the minimum is that room
(``widgets.fit.screen_capped``), so the window still fits."""


def app_icon() -> QIcon:
    return QIcon(str(resource_path("icons", "rl-studio.svg")))


def build_workspace(name: str, session: Session) -> QWidget:
    """One workspace, its module imported only now (a third of the launch
    time was the workspaces nobody had looked at yet)."""
    if name == "environments":
        from studio.environments.workspace import EnvironmentsWorkspace

        return EnvironmentsWorkspace(session)
    if name == "workflows":
        from studio.workflows.workspace import WorkflowsWorkspace

        return WorkflowsWorkspace(session)
    if name == "training":
        from studio.training.workspace import TrainingWorkspace

        return TrainingWorkspace(session)
    if name == "models":
        from studio.model_manager.workspace import ModelsWorkspace

        return ModelsWorkspace(session)
    raise KeyError(name)


class LazyWorkspaces(Mapping[str, QWidget]):
    """The workspaces by name, each built the first time it is asked for:
    the one shown at start, the others while the window idles after it is
    shown (or at once when a user or a script asks first)."""

    def __init__(
        self,
        build: Callable[[str], QWidget],
        built: Callable[[str, QWidget], None],
    ) -> None:
        self._build = build
        self._on_built = built
        self._widgets: dict[str, QWidget] = {}

    def __getitem__(self, name: str) -> QWidget:
        widget = self._widgets.get(name)
        if widget is None:
            if name not in WORKSPACES:
                raise KeyError(name)
            widget = self._widgets[name] = self._build(name)
            self._on_built(name, widget)
            if len(self._widgets) == len(WORKSPACES) and not gc.get_freeze_count():
                # What the window keeps for its life is built: the collector's
                # full passes (40-50 ms on the GUI thread) stop walking it.
                # Once a process (tests build many windows in one).
                gc.collect()
                gc.freeze()
        return widget

    def __iter__(self) -> Iterator[str]:
        return iter(WORKSPACES)

    def __len__(self) -> int:
        return len(WORKSPACES)

    def built(self) -> list[str]:
        """The names of the workspaces built so far."""
        return [name for name in WORKSPACES if name in self._widgets]


OPENERS = (
    (".flow.json", "workflows", "open_file"),
    (".env.json", "environments", "open_env"),
)
"""The files the studio opens (by name ending): the workspace that edits
each, and its method that opens one."""


def openable(url: QUrl) -> bool:
    """Whether ``url`` is a local file the studio opens (``OPENERS``)."""
    name = url.toLocalFile()
    return url.isLocalFile() and any(name.endswith(s) for s, _, _ in OPENERS)


class MainWindow(QMainWindow):
    def __init__(self, session: Session, settings: Settings) -> None:
        super().__init__()
        self.session = session
        self.settings = settings
        self.setWindowTitle("RL Studio")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)  # a .flow.json or .env.json opens in its editor
        self._restarting = False
        self.confirm_quit = True
        """Ask before quitting while runs train (off for scripted use)."""
        self.notifier = Notifier(self, self.windowIcon())
        self.notify: Callable[[str, str], None] = self.notifier.notify
        """Tells the desktop ``(title, text)``: a training run ended while
        the window was not the one looked at; tests replace it."""
        self.keep_runs_on_quit = False
        """The user chose to let the runs train on after the studio quits."""
        self.ask_quit: Callable[[int], str] = lambda n: ask_quit(self, n)
        """Asks what quitting does to ``n`` training runs: ``keep`` (they
        train on headless), ``stop`` or ``cancel``; tests replace it."""
        self.ask_download: Callable[[str], bool] = functools.partial(
            ask_base_model_download, self
        )
        self.open_url: Callable[[QUrl], object] = QDesktopServices.openUrl
        """Opens a link in the desktop's browser; tests replace it."""
        self.docs_dialog: DocsDialog | None = None  # Help → Documentation
        self.workspaces = LazyWorkspaces(
            lambda name: build_workspace(name, session), self._on_workspace_built
        )
        self.nav = QListWidget()
        self.nav.setIconSize(QSize(28, 28))
        self.nav.setFixedWidth(170)
        self.nav.setSpacing(2)
        self.stack = QStackedWidget()
        for name in WORKSPACES:
            item = QListWidgetItem(
                QIcon(str(resource_path("icons", f"{name}.svg"))), name.title()
            )
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setSizeHint(QSize(160, 44))
            self.nav.addItem(item)
            self.stack.addWidget(QWidget())  # until the workspace is built
        self.nav.currentRowChanged.connect(self._on_nav_current_row_changed)
        # The other workspaces are built once the window has painted, one
        # per timer tick so that input is handled between them.
        self._idle_build = QTimer(self, singleShot=True, interval=IDLE_BUILD_MS)
        self._idle_build.timeout.connect(self._on_idle_build_timeout)

        self.banner = Banner()
        self.banner.action_requested.connect(self._on_banner_action_requested)
        self._banner_action = ""
        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.stack, 1)
        self.banner.overlay_on(content, at_bottom=True)  # off New run, Stop
        central = QWidget()
        row = QHBoxLayout(central)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.nav)
        row.addWidget(content, 1)
        self.setCentralWidget(central)

        self.log_console = LogConsole(max_lines=settings.log_max_lines)
        self.log_dock = QDockWidget("Studio log", self)
        self.log_dock.setObjectName("log_dock")
        self.log_dock.setWidget(self.log_console)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.log_dock)
        self.resizeDocks([self.log_dock], [110], Qt.Orientation.Vertical)

        self.engine_label = QLabel()
        self.project_label = QLabel()
        self.hardware_meter = HardwareMeter()
        bar = self.statusBar()
        bar.addWidget(self.engine_label)
        bar.addWidget(self.project_label, 1)
        bar.addPermanentWidget(self.hardware_meter)
        self._gpu: dict[str, Any] = {}
        self._cpu_ram: tuple[float, int, int] = (0.0, 0, 1)
        self._cpu_primed = False
        self._usage_timer = QTimer(self, interval=1500)
        self._usage_timer.timeout.connect(self._on_usage_timer_timeout)
        self._usage_timer.start()

        self._build_menus()
        client = session.client
        client.state_changed.connect(self._on_client_state_changed)
        client.crashed.connect(self._on_client_crashed)
        session.project_opened.connect(self._on_session_project_opened)
        session.project_failed.connect(self._on_session_project_failed)
        session.message_posted.connect(self._on_session_message_posted)
        session.run_log_received.connect(self._on_session_run_log_received)
        session.run_ended.connect(self._on_session_run_ended)
        session.hardware_changed.connect(self._on_session_hardware_changed)
        session.gpu_usage_changed.connect(self._on_session_gpu_usage_changed)
        self._on_client_state_changed(client.state)
        last = settings.last_workspace
        self.set_workspace(last if last in WORKSPACES else "environments")
        self._fit_to_screen()
        self._restore_layout()

    def _fit_to_screen(self) -> None:
        """The first size and place, and a minimum the screen has room for."""
        screen = self.screen()
        self.setMinimumHeight(
            MINIMUM_HEIGHT
            if screen is None
            else screen_capped(MINIMUM_HEIGHT, screen.availableGeometry())
        )
        fit_window(self, DEFAULT_SIZE)

    # --------------------------------------------------------------- API
    def set_workspace(self, name: str) -> None:
        if name not in self.workspaces:
            raise ValueError(
                f"Unknown workspace {name!r}; choose one of {', '.join(WORKSPACES)}."
            )
        self.nav.setCurrentRow(WORKSPACES.index(name))

    def current_workspace(self) -> str:
        return WORKSPACES[self.stack.currentIndex()]

    def _on_nav_current_row_changed(self, row: int) -> None:
        if 0 <= row < len(WORKSPACES):
            self.workspaces[WORKSPACES[row]]  # built on first visit
            self.stack.setCurrentIndex(row)

    def _on_workspace_built(self, name: str, widget: QWidget) -> None:
        index = WORKSPACES.index(name)
        placeholder = self.stack.widget(index)
        current = self.stack.currentIndex()
        self.stack.insertWidget(index, widget)
        if placeholder is not None:
            self.stack.removeWidget(placeholder)
            placeholder.deleteLater()
        self.stack.setCurrentIndex(current)
        if name == "environments":
            widget.train_requested.connect(  # type: ignore[attr-defined]
                self._on_environments_train_requested
            )
        elif name == "models":
            widget.train_requested.connect(  # type: ignore[attr-defined]
                self._on_models_train_requested
            )
        self._restore_splitters(name)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._cpu_primed:
            # The first reading soon after the window has painted (psutil is
            # imported then, not at launch).
            QTimer.singleShot(IDLE_BUILD_MS, self._on_usage_timer_timeout)
        if len(self.workspaces.built()) < len(WORKSPACES):
            self._idle_build.start()

    def _on_idle_build_timeout(self) -> None:
        """Build one more workspace, then yield to the event loop."""
        missing = [n for n in WORKSPACES if n not in self.workspaces.built()]
        if missing:
            self.workspaces[missing[0]]
        if len(missing) > 1:
            self._idle_build.start()

    @property
    def environments(self) -> EnvironmentsWorkspace:
        return self.workspaces["environments"]  # type: ignore[return-value]

    @property
    def training(self) -> TrainingWorkspace:
        return self.workspaces["training"]  # type: ignore[return-value]

    def _on_environments_train_requested(self, values: dict[str, Any]) -> None:
        """The designer's "Train this environment": the Training workspace,
        its New run dialog filled in with the env and the algorithm that
        fits it."""
        self.set_workspace("training")
        self.training.open_run_dialog(
            dict(values), title=f"Train {values.get('env', 'this environment')}"
        )

    def _on_models_train_requested(self, values: dict[str, Any]) -> None:
        """Models' "Continue training…": the Training workspace, its New run
        dialog filled in to start from the policy."""
        self.set_workspace("training")
        self.training.open_run_dialog(
            dict(values), title=f"Continue training {values.get('start_from', '')}"
        )

    # ------------------------------------------------------------- menus
    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._add_action(
            file_menu,
            "&New Project…",
            self._on_new_project,
            QKeySequence.StandardKey.New,
        )
        self._add_action(
            file_menu,
            "&Open Project…",
            self._on_open_project,
            QKeySequence.StandardKey.Open,
        )
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._on_recent_menu_about_to_show)
        file_menu.addSeparator()
        self._add_action(
            file_menu,
            "&Settings…",
            self._on_settings,
            QKeySequence.StandardKey.Preferences,
        )
        file_menu.addSeparator()
        self._add_action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        view_menu = self.menuBar().addMenu("&View")
        for i, name in enumerate(WORKSPACES):
            self._add_action(
                view_menu,
                name.title(),
                functools.partial(self.set_workspace, name),
                f"Ctrl+{i + 1}",
            )
        view_menu.addSeparator()
        view_menu.addAction(self.log_dock.toggleViewAction())
        theme_menu = view_menu.addMenu("&Theme")
        self.theme_actions: dict[str, QAction] = {}
        group = QActionGroup(self)
        for name in THEMES:
            action = theme_menu.addAction(name.title())
            action.setCheckable(True)
            action.setChecked(name == self.settings.theme)
            action.triggered.connect(lambda *_, n=name: self.set_theme(n))
            group.addAction(action)
            self.theme_actions[name] = action

        engine_menu = self.menuBar().addMenu("&Engine")
        self._add_action(engine_menu, "Run &self-test", self._on_run_selftest)
        self._add_action(engine_menu, "&Restart engine", self._on_restart_engine)

        help_menu = self.menuBar().addMenu("&Help")
        self._add_action(
            help_menu,
            "&Documentation",
            self.open_documentation,
            QKeySequence.StandardKey.HelpContents,
        )
        self._add_action(
            help_menu, "&Keyboard shortcuts", self.show_shortcuts, "Ctrl+/"
        )
        self._add_action(help_menu, "&Welcome", self.show_welcome)
        help_menu.addSeparator()
        self._add_action(help_menu, "&About RL Studio", self._on_about)

    def _add_action(
        self,
        menu: QMenu,
        text: str,
        slot: Callable[[], object],
        shortcut: QKeySequence.StandardKey | str | None = None,
    ) -> QAction:
        action = QAction(text, self)
        if isinstance(shortcut, QKeySequence.StandardKey):
            # Some platforms (and desktops) bind no key to Quit or
            # Preferences; the usual one then.
            keys = QKeySequence.keyBindings(shortcut)
            action.setShortcuts(keys or [QKeySequence(STANDARD_KEY_FALLBACK[shortcut])])
        elif shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda *_: slot())
        menu.addAction(action)
        return action

    def _on_new_project(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "New project folder", str(self.settings.projects_root / "untitled")
        )
        if path:
            self.session.open_project(path, create=True)

    def _on_open_project(self) -> None:
        path = QFileDialog.getExistingDirectory(
            self, "Open project folder", str(self.settings.projects_root)
        )
        if path:
            self.session.open_project(path)

    def _on_recent_menu_about_to_show(self) -> None:
        self.recent_menu.clear()
        recent = self.settings.recent_projects
        for path in recent:
            action = self.recent_menu.addAction(path)
            action.triggered.connect(lambda *_, p=path: self.session.open_project(p))
        if not recent:
            self.recent_menu.addAction("No recent projects").setEnabled(False)

    def _on_settings(self) -> None:
        if SettingsDialog(self.settings, self).exec():
            self.session.client.environment = self.settings.engine_environment()

    def _on_run_selftest(self) -> None:
        self.session.start_run(
            "selftest", dict(SELFTEST_CONFIG), name="Engine self-test"
        )
        self.set_workspace("training")
        self.training.show_activity()  # the self-test trains nothing to keep

    def _on_restart_engine(self) -> None:
        self.session.client.restart()

    # ----------------------------------------------------------- welcome
    def show_welcome(self) -> WelcomeDialog:
        dialog = WelcomeDialog(self.settings.show_welcome, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.start_requested.connect(self.start_journey)
        dialog.finished.connect(
            lambda *_: setattr(
                self.settings, "show_welcome", dialog.show_at_start.isChecked()
            )
        )
        dialog.open()
        return dialog

    def start_journey(self, kind: str) -> None:
        """The first step of a welcome page start (see studio/welcome.py)."""
        if kind == "design":
            self.set_workspace("environments")
            envs_dir = self.environments.envs_dir()
            name, n = "my_env", 1
            while (envs_dir / f"{name}.env.json").exists():
                n += 1
                name = f"my_env_{n}"
            self.environments.new_env("workflow", name)
        elif kind == "cartpole":
            self.set_workspace("training")
            self.training.open_run_dialog(
                {"env": "CartPole-v1", "algo": "PPO"}, title="Train CartPole"
            )
        elif kind == "llm":
            self.set_workspace("workflows")
            flows = self.workspaces["workflows"].project_flows_dir()  # type: ignore[attr-defined]
            path = (flows or Path()) / LLM_EXAMPLE
            if flows is None or not path.is_file():
                path = resource_path("examples", "flows", LLM_EXAMPLE)
            self.workspaces["workflows"].open_file(str(path))  # type: ignore[attr-defined]
            for repo in missing_base_models(path, cached_models()):
                if self.ask_download(repo):
                    models = self.workspaces["models"]
                    models.action_bar.download_from_hub(repo)  # type: ignore[attr-defined]
        else:
            raise ValueError(f"Unknown start {kind!r}; choose design, cartpole or llm.")

    def set_theme(self, theme: str) -> None:
        """Show ``theme`` ("light", "dark", "system") and remember it."""
        self.settings.theme = theme
        self.theme_actions[theme].setChecked(True)
        apply_theme(theme)

    def shortcuts_dialog(self) -> ShortcutsDialog:
        # Imported here: the trace viewer is built with the Models workspace,
        # which launch does not wait for.
        from studio.model_manager import trace_viewer

        groups = {name.title(): w for name, w in self.workspaces.items()}
        keys = {"Models": trace_viewer.shortcut_rows()}
        return ShortcutsDialog(shortcut_rows(self, groups, keys), self)

    def show_shortcuts(self) -> None:
        self.shortcuts_dialog().exec()

    def open_documentation(self) -> None:
        """The README and the documents of ``docs/``, read in the app."""
        from studio.docs_viewer import DocsDialog, documents, not_installed

        if self.docs_dialog is None:
            if not (paths := documents()):
                self._show_banner(not_installed(), "warning", auto_hide_ms=10_000)
                return
            self.docs_dialog = DocsDialog(paths, self, open_external=self.open_url)
        self.docs_dialog.show()
        self.docs_dialog.raise_()
        self.docs_dialog.activateWindow()

    def _on_about(self) -> None:
        from platform import python_version  # 30 ms at launch otherwise

        from engine import protocol

        info = self.session.client.engine_info
        hw = self.session.hardware
        gpus = ", ".join(g["name"] for g in hw.get("gpus", [])) or "none"
        QMessageBox.about(
            self,
            "About RL Studio",
            "<h3>RL Studio 0.1.0</h3>"
            "<p>Design environments, train agents with reinforcement learning, "
            "and ship them.</p>"
            f"<p>Python {python_version()} · Qt {qVersion()}<br>"
            f"Engine {info.get('engine_version', '?')} (protocol "
            f"{info.get('protocol_version', protocol.PROTOCOL_VERSION)}, "
            f"pid {info.get('pid', '?')})<br>"
            f"CPU: {hw.get('cpu_model', '?')}<br>GPUs: {gpus}</p>",
        )

    # ------------------------------------------------------------ engine
    def _on_client_state_changed(self, state: str) -> None:
        color, text = ENGINE_STATE_TEXT.get(state, ("#7f7f7f", state))
        self.engine_label.setText(f"<span style='color:{color}'>●</span> {text}")
        if state == READY and self._restarting:
            self._restarting = False
            self._show_banner(
                "The engine was restarted. Runs that were active are shown as "
                "interrupted and can be resumed.",
                "success",
                auto_hide_ms=10_000,
            )
        elif state == FAILED:
            self._show_banner(
                "The engine is not running and could not be restarted "
                "automatically; see the log for why.",
                "error",
                action="restart",
            )

    def _on_client_crashed(self, reason: str) -> None:
        self._restarting = self.session.client.auto_restart
        self.log_console.append_line(reason, "engine", "error")
        self._show_banner(f"{reason} Restarting the engine…", "warning")

    def _show_banner(
        self, text: str, level: str, action: str = "", auto_hide_ms: int = 0
    ) -> None:
        self._banner_action = action
        labels = {"restart": "Restart engine", "open": "Open project…"}
        self.banner.show_message(text, level, labels.get(action, ""), auto_hide_ms)

    def _on_banner_action_requested(self) -> None:
        if self._banner_action == "restart":
            self.session.client.restart()
        elif self._banner_action == "open":
            self._on_open_project()
        self.banner.dismiss()

    # ------------------------------------------------------------- files
    def open_file(self, path: Path) -> bool:
        """Open a workflow (``.flow.json``) or an environment (``.env.json``)
        in its editor; anything else is refused on the banner in one
        sentence."""
        if not path.is_file():
            self._show_banner(f"The file {path} does not exist.", "error")
            return False
        for suffix, workspace, opener in OPENERS:
            if path.name.endswith(suffix):
                self.set_workspace(workspace)
                return bool(getattr(self.workspaces[workspace], opener)(str(path)))
        self._show_banner(
            f"{path.name} is neither a workflow (.flow.json) nor an "
            "environment (.env.json).",
            "error",
        )
        return False

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(openable(url) for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [Path(url.toLocalFile()) for url in event.mimeData().urls()]
        opened = [p for p in paths if openable(QUrl.fromLocalFile(str(p)))]
        for path in opened:
            self.open_file(path)
        if opened:
            event.acceptProposedAction()

    # ----------------------------------------------------------- project
    def _on_session_project_opened(self, path: str) -> None:
        state = self.session.state
        self.setWindowTitle(f"{state.name} — RL Studio")
        self.project_label.setText(f"Project: {path}")
        self.project_label.setToolTip(path)
        if self.banner.level == "error" and self._banner_action == "open":
            self.banner.dismiss()

    def _on_session_project_failed(self, message: str) -> None:
        self._show_banner(message, "error", action="open")

    def _on_session_message_posted(self, level: str, source: str, text: str) -> None:
        self.log_console.append_line(text, source, level)

    def _on_session_run_ended(self, run_id: str, status: str, reason: str) -> None:
        """A training run that finished or failed while the user looked
        elsewhere is announced (one stopped by the user is not)."""
        run = self.session.state.run(run_id) or {}
        if self.isActiveWindow() or status not in ("completed", "failed"):
            return
        if not is_training(run):
            return
        text = f"{run.get('name') or run_id} {status}"
        self.notify("RL Studio", f"{text}: {reason}" if reason else f"{text}.")

    def _on_session_run_log_received(self, run_id: str, lines: list[str]) -> None:
        self.log_console.append_lines(lines, run_id[-4:])

    # ----------------------------------------------------------- hardware
    def _on_session_hardware_changed(self, info: dict[str, Any]) -> None:
        gpus = info.get("gpus") or []
        self._gpu = gpus[0] if gpus else {}
        self._show_usage()

    def _on_session_gpu_usage_changed(self, gpus: list[dict[str, Any]]) -> None:
        # Live readings of the first GPU (the one trainers pick by default).
        if gpus:
            self._gpu = {**self._gpu, **gpus[0]}
        self._show_usage()

    def _on_usage_timer_timeout(self) -> None:
        # CPU and RAM are read here (psutil is cheap); GPU load comes from the
        # engine (no torch or NVML in the GUI) and updates the meter on reply.
        import psutil  # imported after the window shows, not at launch

        if not self._cpu_primed:
            psutil.cpu_percent(None)  # prime the counter; the first reading is 0
            self._cpu_primed = True
        if self.session.has_nvidia_gpu():
            self.session.request_gpu_usage()
        mem = psutil.virtual_memory()
        # cpu_percent(None) is the load since its previous call: read it once
        # per tick, never from the GPU reply in between.
        self._cpu_ram = (
            psutil.cpu_percent(None),
            int(mem.total - mem.available),
            int(mem.total),
        )
        self._show_usage()

    def _show_usage(self) -> None:
        cpu, ram_used, ram_total = self._cpu_ram
        self.hardware_meter.set_usage(
            Usage(
                cpu_percent=cpu,
                ram_used_bytes=ram_used,
                ram_total_bytes=ram_total,
                gpu_name=self._gpu.get("name", ""),
                gpu_memory_used_bytes=self._gpu.get("memory_used_bytes"),
                gpu_memory_total_bytes=self._gpu.get("memory_total_bytes"),
                gpu_util_percent=self._gpu.get("util_percent"),
            )
        )

    # ------------------------------------------------------------ layout
    def splitters(self) -> dict[str, Part]:
        """The built workspaces' splitters and named tables' headers, by a
        key that stays the same from one start to the next."""
        return layout_parts(self.workspaces, self.workspaces.built())

    def _restore_splitters(self, workspace: str) -> None:
        """A workspace's splitter sizes and column widths of the last
        session, once it is built (one not built this session keeps what
        was saved for it)."""
        restore_parts(self.settings, self.splitters(), f"{workspace}/")

    def _restore_layout(self) -> None:
        """The geometry, dock and splitter sizes of the last session."""
        geometry = self.settings.window_layout("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = self.settings.window_layout("state")
        if state is not None:
            self.restoreState(state)
        for name in self.workspaces.built():
            self._restore_splitters(name)

    def save_layout(self) -> None:
        settings = self.settings
        settings.last_workspace = self.current_workspace()
        settings.set_window_layout("geometry", self.saveGeometry())
        settings.set_window_layout("state", self.saveState())
        save_parts(settings, self.splitters())
        settings.sync()

    # ------------------------------------------------------------- close
    def closeEvent(self, event: QCloseEvent) -> None:
        active = [
            r for r in self.session.state.runs.values() if r.get("status") == "running"
        ]
        if active and self.confirm_quit and self.isVisible():
            choice = self.ask_quit(len(active))
            if choice == "cancel":
                event.ignore()
                return
            self.keep_runs_on_quit = choice == "keep"
        self._usage_timer.stop()
        self.save_layout()
        event.accept()
