"""The studio against the real engine: client restarts, the main window,
its workspaces, the screenshot and desktop commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QImage

from engine import protocol
from engine.store.project import Project
from studio.engine_client import READY, EngineClient
from studio.main_window import MainWindow
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )


@pytest.fixture
def client(qtbot) -> Iterator[EngineClient]:
    c = EngineClient()
    with qtbot.waitSignal(c.hello_received, timeout=20_000):
        c.start()
    yield c
    c.stop()


@pytest.fixture
def window(qtbot, client: EngineClient, settings: Settings, project_dir: Path):
    session = Session(client, ProjectState(), settings)
    win = MainWindow(session, settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    with qtbot.waitSignal(session.project_opened, timeout=20_000):
        session.open_project(str(project_dir), create=True)
    win.show()
    return win


def test_requests_are_answered_through_callbacks(qtbot, client: EngineClient) -> None:
    results = []
    client.request(protocol.Ping(payload="hi"), on_reply=results.append)
    qtbot.waitUntil(lambda: results == [{"payload": "hi"}], timeout=5000)
    errors = []
    client.request(
        protocol.OpenProject(path="/definitely/not/here"), on_error=errors.append
    )
    qtbot.waitUntil(lambda: len(errors) == 1, timeout=5000)
    assert (
        errors[0].message == "The project folder /definitely/not/here does not exist."
    )


def test_client_restarts_a_killed_engine_and_fails_pending_requests(
    qtbot, client: EngineClient
) -> None:
    first_pid = client.pid
    assert first_pid
    errors = []
    with qtbot.waitSignal(client.crashed, timeout=10_000) as crashed:
        # A request in flight when the engine dies gets an error, not silence.
        client.request(protocol.DetectHardware(), on_error=errors.append)
        os.kill(first_pid, signal.SIGKILL)
    assert "crashed" in crashed.args[0] or "exited" in crashed.args[0]
    qtbot.waitUntil(
        lambda: client.state == READY and client.pid not in (None, first_pid),
        timeout=20_000,
    )
    assert client.restarts == 1
    results = []
    client.request(protocol.Ping(payload="back"), on_reply=results.append)
    qtbot.waitUntil(lambda: results == [{"payload": "back"}], timeout=5000)
    assert errors and errors[0].error_type == "EngineGone"


def test_main_window_lists_what_the_project_holds(
    qtbot, tmp_path: Path, settings: Settings, client: EngineClient
) -> None:
    project_dir = tmp_path / "full"
    project = Project.open(project_dir, create=True)
    (project_dir / "envs" / "maze.env.json").write_text(
        '{"kind": "grid", "description": "a maze"}'
    )
    (project_dir / "envs" / "broken.env.json").write_text("{not json")
    (project_dir / "flows" / "demo.flow.json").write_text('{"nodes": []}')
    run = project.create_run("selftest", {"steps": 3}, name="old run")
    project.update_run(run.id, status="running")  # its process is long gone
    src = tmp_path / "policy.zip"
    src.write_bytes(b"zip")
    project.register_model(
        name="policy",
        kind="sb3-policy",
        files=[src],
        source_run=run.id,
        metrics={"eval/mean_reward": 12.5},
    )
    project.close()

    session = Session(client, ProjectState(), settings)
    win = MainWindow(session, settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    with qtbot.waitSignal(session.project_opened, timeout=20_000):
        session.open_project(str(project_dir))
    envs = win.workspaces["environments"].env_list.table.model.records
    assert {e["name"] for e in envs} == {"maze", "broken"}
    assert next(e for e in envs if e["name"] == "broken")["error"]
    flows = win.workspaces["workflows"].editor.flows_table.model.records
    assert [f["name"] for f in flows] == ["demo"]
    # The self-test trains nothing: it is listed as activity, not training.
    assert win.workspaces["training"].table.model.records == []
    runs = win.workspaces["training"].activity.model.records
    assert [(r["name"], r["status"]) for r in runs] == [("old run", "interrupted")]
    models = win.workspaces["models"].table.model.records
    assert models[0]["name"] == "policy"
    assert settings.recent_projects[0] == str(project_dir)


def test_selftest_from_the_menu_trains_and_shows_progress(
    qtbot, window: MainWindow
) -> None:
    window._on_run_selftest()
    assert window.current_workspace() == "training"
    training = window.workspaces["training"]
    assert training.current_table() is training.activity
    table = training.activity
    qtbot.waitUntil(
        lambda: any(r.get("status") == "completed" for r in table.model.records),
        timeout=30_000,
    )
    run = table.model.records[0]
    assert run["progress_done"] == run["progress_total"] == 300
    qtbot.waitUntil(
        lambda: "checkpoint at step" in window.log_console.text(), timeout=5000
    )


def test_stop_button_stops_a_run(qtbot, window: MainWindow) -> None:
    training = window.workspaces["training"]
    window.session.start_run("selftest", {"steps": 100_000, "step_seconds": 0.01})
    activity = training.activity
    qtbot.waitUntil(
        lambda: (
            bool(activity.model.records)
            and activity.model.records[0].get("progress_done", 0) > 0
        ),
        timeout=20_000,
    )
    training.show_run(activity.model.records[0]["id"])
    assert training.stop_button.isEnabled()
    training.stop_button.click()
    qtbot.waitUntil(
        lambda: activity.model.records[0]["status"] == "stopped", timeout=20_000
    )
    assert training.resume_button.isEnabled()


def test_engine_death_shows_a_banner_and_recovers(qtbot, window: MainWindow) -> None:
    client = window.session.client
    pid = client.pid
    with qtbot.waitSignal(client.crashed, timeout=10_000):
        os.kill(pid, signal.SIGKILL)
    assert window.banner.isVisible() and "Restarting" in window.banner.text()
    qtbot.waitUntil(
        lambda: client.state == READY and "restarted" in window.banner.text(),
        timeout=20_000,
    )
    # The project was re-opened on the new engine.
    results = []
    client.request(protocol.GetProjectSnapshot(), on_reply=results.append)
    qtbot.waitUntil(lambda: bool(results), timeout=5000)
    assert results[0]["path"] == window.session.state.path


def test_a_missing_project_shows_an_error_banner(
    qtbot, client: EngineClient, settings: Settings, tmp_path: Path
) -> None:
    session = Session(client, ProjectState(), settings)
    win = MainWindow(session, settings)
    qtbot.addWidget(win)
    with qtbot.waitSignal(session.project_failed, timeout=10_000):
        session.open_project(str(tmp_path / "gone"))
    assert win.banner.isVisibleTo(win) and win.banner.level == "error"
    assert (
        win.banner.text() == f"The project folder {tmp_path / 'gone'} does not exist."
    )


def test_unknown_workspace_is_refused(window: MainWindow) -> None:
    with pytest.raises(ValueError, match="Unknown workspace 'lab'"):
        window.set_workspace("lab")


def test_workspaces_are_built_when_first_needed(
    qtbot, client: EngineClient, settings: Settings, project_dir: Path
) -> None:
    """The window is shown with only its current workspace built; the others
    are built while it idles, or at once when asked for, and each then sits
    in the stack where the navigation shows it."""
    session = Session(client, ProjectState(), settings)
    win = MainWindow(session, settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    assert win.workspaces.built() == ["environments"]
    models = win.workspaces["models"]  # a script asks first: built now
    assert win.workspaces.built() == ["environments", "models"]
    win.set_workspace("models")
    assert win.stack.currentWidget() is models
    assert win.current_workspace() == "models"
    with qtbot.waitSignal(session.project_opened, timeout=20_000):
        session.open_project(str(project_dir), create=True)
    win.show()
    qtbot.waitUntil(lambda: len(win.workspaces.built()) == 4, timeout=30_000)
    assert win.stack.currentWidget() is models  # idle building moves nothing
    for name in ("environments", "workflows", "training", "models"):
        win.set_workspace(name)
        assert win.stack.currentWidget() is win.workspaces[name]
    # Built after the project opened, the Training list still shows its runs
    # and the flow editor its flows.
    assert win.training.table.model.records == list(session.state.runs.values())
    with pytest.raises(KeyError):
        win.workspaces["lab"]


def test_the_studio_starts_without_importing_what_it_does_not_show(
    tmp_path: Path,
) -> None:
    code = (
        "import os, sys\n"
        "os.environ['QT_QPA_PLATFORM'] = 'offscreen'\n"
        "from PySide6.QtWidgets import QApplication\n"
        "from PySide6.QtCore import QSettings\n"
        "app = QApplication([])\n"
        "from studio.engine_client import EngineClient\n"
        "from studio.main_window import MainWindow\n"
        "from studio.session import Session\n"
        "from studio.settings import Settings\n"
        "from studio.state.project_state import ProjectState\n"
        f"settings = Settings(QSettings({str(tmp_path / 's.ini')!r}, "
        "QSettings.Format.IniFormat))\n"
        "session = Session(EngineClient(), ProjectState(), settings)\n"
        "win = MainWindow(session, settings)\n"
        "print(sorted(m for m in sys.modules if m.endswith('.workspace')))\n"
        # read when first asked, not at launch (the protocol's 46 message
        # classes alone took about 25 ms of it; pyqtgraph, about 0.2 s, when
        # the first plot is built)
        "later = {'engine.protocol', 'engine.flow', 'torch', 'pyqtgraph'}\n"
        "print(sorted(later & set(sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    workspaces, read_later = proc.stdout.strip().splitlines()
    assert workspaces == "['studio.environments.workspace']"
    assert read_later == "[]"


@pytest.mark.parametrize("workspace", ["environments", "training"])
def test_screenshot_command_renders_the_window(tmp_path: Path, workspace: str) -> None:
    out = tmp_path / f"{workspace}.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "--project",
            str(tmp_path / "p"),
            "--screenshot",
            str(out),
            "--workspace",
            workspace,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(out))
    assert image.width() >= 800 and image.height() >= 500
    colors = {
        image.pixel(x, y)
        for x in range(0, image.width(), 37)
        for y in range(0, image.height(), 29)
    }
    assert len(colors) > 5  # a real picture, not a blank canvas


def test_screenshot_never_waits_for_a_restore_question(tmp_path: Path) -> None:
    """An untitled flow autosaved by a crashed session would ask "Restore
    unsaved changes?" when the project opens; a screenshot asks nothing,
    finishes, and leaves the autosave copy for the next session."""
    example = ROOT / "resources" / "examples" / "flows" / "cartpole_ppo.flow.json"
    auto = tmp_path / "p" / "flows" / ".autosave" / "untitled.flow.json"
    auto.parent.mkdir(parents=True)
    auto.write_bytes(example.read_bytes())
    out = tmp_path / "workflows.png"
    proc = subprocess.run(
        [sys.executable, "-m", "studio", "--project", str(tmp_path / "p"),
         "--screenshot", str(out), "--workspace", "workflows"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert QImage(str(out)).width() >= 800
    assert auto.read_bytes() == example.read_bytes()


def test_install_desktop_writes_a_launcher(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "share")}
    proc = subprocess.run(
        [sys.executable, "-m", "studio", "--install-desktop"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=True,
    )
    launcher = Path(proc.stdout.strip())
    assert launcher == tmp_path / "share" / "applications" / "rl-studio.desktop"
    text = launcher.read_text()
    assert f"Exec={sys.executable} -m studio" in text
    icon = (
        tmp_path / "share" / "icons" / "hicolor" / "scalable" / "apps" / "rl-studio.svg"
    )
    assert f"Icon={icon}" in text and icon.exists()


def test_hardware_command_prints_json_with_recommendations() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "hardware", "--compact"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    info = json.loads(proc.stdout)
    assert info["cpu_logical_cores"] >= 1 and info["ram_total_bytes"] > 0
    rec = info["recommendations"]
    assert (
        rec["device"] in ("cpu", "cuda", "mps")
        and rec["batch_size"] >= 1
        and rec["vec_envs"] >= 1
    )


def test_unknown_engine_command_exits_non_zero() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "fly"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode != 0 and "invalid choice: 'fly'" in proc.stderr


def test_models_command_lists_registered_models(tmp_path: Path) -> None:
    project = Project.open(tmp_path / "p", create=True)
    src = tmp_path / "policy.zip"
    src.write_bytes(b"zip")
    project.register_model(name="cart", kind="sb3-policy", files=[src], algo="PPO")
    project.close()
    cmd = [sys.executable, "-m", "engine", "models", "--project", str(tmp_path / "p")]
    out = subprocess.run(
        [*cmd, "--json"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert [m["name"] for m in json.loads(out.stdout)] == ["cart"]
    missing = subprocess.run(
        [sys.executable, "-m", "engine", "models", "--project", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("nope does not exist.")


LARGE_FILLS = (
    "import os, sys\n"
    "os.environ['QT_QPA_PLATFORM'] = 'offscreen'\n"
    "if sys.argv[1] == 'studio':\n"
    "    from studio.app import prepare_qt_environment\n"
    "    prepare_qt_environment()\n"
    "from PySide6.QtGui import (QColor, QGuiApplication, QImage, QLinearGradient,\n"
    "    QPainter)\n"
    "app = QGuiApplication([])\n"
    "canvas = QImage(800, 600, QImage.Format.Format_ARGB32_Premultiplied)\n"
    "painter = QPainter(canvas)\n"
    "gradient = QLinearGradient(0, 0, 800, 600)\n"
    "gradient.setColorAt(0, QColor('blue'))\n"
    "gradient.setColorAt(1, QColor('green'))\n"
    "painter.fillRect(0, 0, 800, 600, gradient)\n"
    "painter.end()\n"
    "tasks = os.listdir('/proc/self/task')\n"
    "print(sum(open(f'/proc/self/task/{t}/comm').read().strip() == 'Thread (pooled)'\n"
    "          for t in tasks))\n"
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc")
def test_the_studio_fills_large_areas_on_the_gui_thread() -> None:
    """Qt hands a large fill to a thread pool and waits; on busy cores each
    hand-off waited for a core (the GUI stall benchmark: 191 ms -> 55 ms
    without the pool). Started as the studio starts, Qt fills on its own
    thread; started bare, it spawns the pool for the same fill."""
    env = {k: v for k, v in os.environ.items() if k != "QT_NO_GUI_THREADPOOL"}

    def pooled_threads(how: str) -> int:
        proc = subprocess.run(
            [sys.executable, "-c", LARGE_FILLS, how],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.split()[-1])

    assert pooled_threads("studio") == 0
    assert pooled_threads("bare") > 0
