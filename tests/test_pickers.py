"""Pick, don't type: the searchable picker (search, pick, unknown values),
pickers derived from the ``picker`` a setting declares, the entries of the
env and base-model pickers, dragging an env onto the Workflows canvas, and
the base-model picker searching the local Hub stand-in (tests/hub_server.py,
pointed at by HF_ENDPOINT) through a real engine, offline included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hub_server import FakeHub
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QLineEdit, QVBoxLayout, QWidget

from engine import contract, flow
from engine.llm.hub import HubDownloadConfig
from engine.llm.train import TrainConfig as LlmTrainConfig
from engine.nodes import catalog
from engine.rl.config import TrainConfig
from engine.settings import fields_of, form_field
from studio.pickers import (
    BASE_MODEL,
    CACHE_SECTION,
    ENV,
    HUB_SECTION,
    PROJECT_SECTION,
    base_model_entries,
    cached_models,
    env_entries,
    picker_sources,
)
from widgets.param_form import ParamForm
from widgets.picker import PickerEntry, SearchPicker

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = [
    PickerEntry("rlstudio/maze-v0", label="maze", section=PROJECT_SECTION),
    PickerEntry("CartPole-v1", section="Gymnasium"),
    PickerEntry("Acrobot-v1", section="Gymnasium"),
]


def test_search_filters_and_enter_picks_the_first(qtbot) -> None:
    picker = SearchPicker(strict=True, unknown_message="{value} is unknown.")
    qtbot.addWidget(picker)
    picker.set_entries(ENTRIES)
    picker.show()
    qtbot.keyClicks(picker.edit, "cart")
    assert picker.is_open()
    assert picker.visible_values() == ["CartPole-v1"]
    with qtbot.waitSignal(picker.value_changed) as changed:
        qtbot.keyClick(picker.edit, Qt.Key.Key_Return)
    assert changed.args == ["CartPole-v1"]
    assert picker.value() == "CartPole-v1" and not picker.is_open()
    assert picker.status() == ""
    # A designed env shows by name; its id is the value, never typed.
    picker.edit.clear()
    qtbot.keyClicks(picker.edit, "maz")
    item = picker.list.findItems("maze", Qt.MatchFlag.MatchStartsWith)[0]
    rect = picker.list.visualItemRect(item)
    with qtbot.waitSignal(picker.value_changed) as changed:
        qtbot.mouseClick(
            picker.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center()
        )
    assert changed.args == ["rlstudio/maze-v0"]
    assert picker.edit.text() == "maze"
    # The search matches labels, ids and details alike, case-insensitively.
    picker.edit.clear()
    qtbot.keyClicks(picker.edit, "RLSTUDIO")
    assert picker.visible_values() == ["rlstudio/maze-v0"]


def test_leaving_the_field_ends_the_search(qtbot) -> None:
    box = QWidget()
    qtbot.addWidget(box)
    picker = SearchPicker(box)
    other = QLineEdit(box)
    layout = QVBoxLayout(box)
    layout.addWidget(picker)
    layout.addWidget(other)
    picker.set_entries(ENTRIES)
    box.show()
    qtbot.waitExposed(box)
    picker.edit.setFocus()
    qtbot.keyClicks(picker.edit, "acro")
    assert picker.is_open() and picker.value() == "acro"
    # Down walks into the list; the search stays open there.
    qtbot.keyClick(picker.edit, Qt.Key.Key_Down)
    qtbot.waitUntil(picker.list.hasFocus)
    assert picker.is_open()
    other.setFocus()
    qtbot.waitUntil(lambda: not picker.is_open())
    assert picker.value() == "acro"  # typed text stays the value


def test_an_unknown_value_is_kept_and_said_in_one_sentence(qtbot) -> None:
    picker = SearchPicker(strict=True, unknown_message="{value} is unknown.")
    qtbot.addWidget(picker)
    picker.set_entries(ENTRIES)
    picker.set_value("Nope-v9")
    assert picker.value() == "Nope-v9" and picker.edit.text() == "Nope-v9"
    assert picker.status() == "Nope-v9 is unknown."
    picker.set_value("Acrobot-v1")
    assert picker.status() == ""
    # Typed text that names no entry is the value (a path, a new id).
    with qtbot.waitSignal(picker.value_changed) as changed:
        qtbot.keyClicks(picker.edit, "x")
    assert changed.args == ["Acrobot-v1x"]
    assert picker.status() == "Acrobot-v1x is unknown."
    # A failed search's sentence wins; the entries stay offered.
    picker.set_status("The Hub could not be searched.")
    assert picker.status() == "The Hub could not be searched."
    assert len(picker.entries()) == 3


def test_forms_derive_pickers_from_the_settings_metadata(qtbot) -> None:
    env_field = form_field(fields_of(TrainConfig)["env"])
    assert env_field["picker"] == "env"
    assert form_field(fields_of(LlmTrainConfig)["model"])["picker"] == "base_model"
    assert fields_of(HubDownloadConfig)["repo_id"].picker == "base_model"
    specs = {s["type"]: s for s in catalog()}
    env_param = next(
        p for p in specs["env.environment"]["params"] if p["name"] == "env"
    )
    assert env_param["picker"] == "env"
    base = specs["llm.base_model"]["params"]
    assert [p["picker"] for p in base if p["name"] == "model"] == ["base_model"]
    assert flow.ParamSpec.from_dict(env_param).picker == "env"

    form = ParamForm()
    qtbot.addWidget(form)
    form.configure_picker("env", strict=True, unknown_message="{value} is unknown.")
    form.set_picker_entries("env", ENTRIES)
    form.set_schema([env_field], {"env": "Nope-v9"})
    picker = form.editor("env")
    assert isinstance(picker, SearchPicker)
    assert form.pickers("env") == {"env": picker}
    assert picker.status() == "Nope-v9 is unknown."
    with qtbot.waitSignal(form.values_changed) as changed:
        picker.pick("rlstudio/maze-v0")
    assert changed.args[0]["env"] == "rlstudio/maze-v0"
    # Entries given later reach the pickers already shown.
    form.set_picker_entries("env", [PickerEntry("Hub-v0", section="Other")], "Other")
    assert [e.value for e in picker.entries()] == [
        *(e.value for e in ENTRIES),
        "Hub-v0",
    ]


def test_env_and_base_model_entries(tmp_path: Path) -> None:
    envs = env_entries(
        [{"id": "CartPole-v1"}, {"id": contract.env_id("maze")}, {"id": ""}],
        [
            {"name": "maze", "kind": "grid"},
            {"name": "broken", "error": "The file is not valid JSON."},
        ],
    )
    assert [(e.value, e.shown, e.section) for e in envs] == [
        (contract.env_id("maze"), "maze", PROJECT_SECTION),
        ("CartPole-v1", "CartPole-v1", "Gymnasium"),
    ]
    cache = tmp_path / "hub"
    snap = cache / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (cache / "models--org--partial" / "snapshots" / "abc").mkdir(parents=True)
    (cache / "datasets--org--data").mkdir()
    assert cached_models(cache) == ["org/tiny"]
    assert cached_models(tmp_path / "absent") == []
    models = base_model_entries(
        [
            {"name": "merged", "kind": "hf-merged", "path": "/p/models/m"},
            {"name": "adapter", "kind": "lora-adapter", "path": "/p/models/a"},
        ],
        ["org/tiny"],
    )
    assert [(e.value, e.shown, e.section) for e in models] == [
        ("/p/models/m", "merged", PROJECT_SECTION),
        ("org/tiny", "org/tiny", CACHE_SECTION),
    ]


# ------------------------------------------------------------ the studio


def send_drop(target, mime, view_pos: QPoint) -> None:  # type: ignore[no-untyped-def]
    args = (Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier)  # fmt: skip
    enter = QDragEnterEvent(view_pos, *args)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(target, QDropEvent(QPointF(view_pos), *args))


@pytest.fixture
def hub_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A Hub stand-in and an HF cache holding one model, for the engine the
    test starts (it inherits the environment)."""
    files = {"config.json": b"{}"}
    with FakeHub({"org/tiny-chat": files, "org/tiny-base": files}) as hub:
        hub.downloads = {"org/tiny-chat": 50, "org/tiny-base": 900}
        home = tmp_path / "hf"
        snap = home / "hub" / "models--local--cached" / "snapshots" / "c0ffee"
        snap.mkdir(parents=True)
        (snap / "config.json").write_text("{}")
        for key in list(os.environ):
            if key.startswith(("HF_", "HUGGINGFACE_")):
                monkeypatch.delenv(key)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(home))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield hub


def open_studio(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    from studio_harness import build_main_window, start_on_project

    project = tmp_path / "project"
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, project, create=True)
    spec = {"format": 1, "kind": "grid", "name": "maze"}
    (project / "envs").mkdir(exist_ok=True)
    (project / "envs" / "maze.env.json").write_text(json.dumps(spec))
    win.session.refresh_project()
    win.show()
    win.set_workspace("workflows")
    ws = win.workspaces["workflows"]
    sources = picker_sources(win.session)
    maze = contract.env_id("maze")
    qtbot.waitUntil(
        lambda: (
            sources.catalog_received
            and bool(ws.editor.catalog)
            and any(e.value == maze for e in sources.entries(ENV))
        ),
        timeout=60_000,
    )
    return win, ws, sources


def test_envs_are_picked_and_dragged_onto_the_canvas(qtbot, tmp_path: Path) -> None:
    win, ws, sources = open_studio(qtbot, tmp_path)
    try:
        maze = contract.env_id("maze")
        entries = {e.value: e for e in sources.entries(ENV)}
        assert entries[maze].shown == "maze" and "CartPole-v1" in entries
        ws.editor.left_tabs.setCurrentWidget(ws.editor.env_list)
        qtbot.keyClicks(ws.editor.env_list.edit, "maze")
        assert ws.editor.env_list.visible_values() == [maze]
        # Drag it from the Environments list onto the canvas: a new node.
        mime = ws.editor.env_list.drag_data(entries[maze])
        send_drop(ws.editor.canvas.viewport(), mime, QPoint(200, 200))
        assert ws.editor.node_ids() == ["environment"]
        assert ws.model.node("environment").params["env"] == maze
        # Onto that node: it is set, as one undo step.
        send_drop(
            ws.editor.canvas.viewport(),
            ws.editor.env_list.drag_data(entries["CartPole-v1"]),
            ws.editor.canvas.mapFromScene(
                ws.editor.canvas.nodes["environment"].sceneBoundingRect().center()
            ),
        )
        assert ws.editor.node_ids() == ["environment"]
        assert ws.model.node("environment").params["env"] == "CartPole-v1"
        ws.undo_stack.undo()
        assert ws.model.node("environment").params["env"] == maze
        # The inspector's field is a picker showing the name.
        ws.editor.canvas.select_nodes(["environment"])
        picker = ws.editor.inspector.param_form.editor("env")
        assert isinstance(picker, SearchPicker)
        assert picker.edit.text() == "maze" and picker.status() == ""
        picker.pick("Acrobot-v1")
        assert ws.model.node("environment").params["env"] == "Acrobot-v1"
        # Double-click in the list adds a node.
        ws.editor.env_list.activation_requested.emit("CartPole-v1")
        assert ws.model.node("environment_2").params["env"] == "CartPole-v1"

        # An old flow naming an env nobody knows still loads; the field says so.
        old = tmp_path / "project" / "flows" / "old.flow.json"
        old.parent.mkdir(exist_ok=True)
        doc = flow.FlowDocument(name="old")
        doc.nodes.append(flow.Node("env", "env.environment", {"env": "Gone-v7"}))
        old.write_text(json.dumps(doc.to_dict()))
        ws.undo_stack.setClean()
        assert ws.open_file(old)
        assert ws.editor.node_ids() == ["env"]
        ws.editor.canvas.select_nodes(["env"])
        picker = ws.editor.inspector.param_form.editor("env")
        assert isinstance(picker, SearchPicker)
        assert picker.value() == "Gone-v7"
        assert picker.status() == (
            "Gone-v7 is unknown: it is neither a Gymnasium env installed here nor "
            "a designed env of this project."
        )
    finally:
        win.session.client.stop()


def test_base_models_from_folders_the_cache_and_a_hub_search(
    qtbot, tmp_path: Path, hub_home: FakeHub
) -> None:
    win, ws, sources = open_studio(qtbot, tmp_path)
    try:
        node_id = ws.editor.add_node_of_type("llm.base_model")
        assert node_id
        ws.editor.canvas.select_nodes([node_id])
        picker = ws.editor.inspector.param_form.editor("model")
        assert isinstance(picker, SearchPicker)
        assert picker.browse.isVisibleTo(picker)
        cached = picker.entries(CACHE_SECTION)
        assert [e.value for e in cached] == ["local/cached"]
        # Typing searches the Hub; the answers join the local entries.
        picker.edit.clear()
        qtbot.keyClicks(picker.edit, "tiny")
        qtbot.waitUntil(lambda: len(picker.entries(HUB_SECTION)) == 2, timeout=30_000)
        # Most downloaded first, as the Hub sorts them.
        assert [e.value for e in picker.entries(HUB_SECTION)] == [
            "org/tiny-base",
            "org/tiny-chat",
        ]
        assert picker.visible_values() == ["org/tiny-base", "org/tiny-chat"]
        searches = [r for r in hub_home.requests if r["path"] == "/api/models"]
        assert searches
        picker.pick("org/tiny-chat")
        assert ws.model.node(node_id).params["model"] == "org/tiny-chat"
        assert picker.status() == ""

        # The Hub fails: one sentence; the local entries are still offered.
        # A server error huggingface_hub does not retry (it retries 429, 500,
        # 502, 503 and 504 five times, sleeping 23 s in all).
        hub_home.search_status = 501
        picker.edit.clear()
        qtbot.keyClicks(picker.edit, "qwen")
        qtbot.waitUntil(lambda: picker.status() != "", timeout=30_000)
        assert picker.status().startswith(f"Searching {hub_home.url} failed")
        assert picker.status().endswith("local models are still offered.")
        assert picker.status().count(". ") == 0
        assert [e.value for e in picker.entries(CACHE_SECTION)] == ["local/cached"]
        assert picker.entries(HUB_SECTION) == []
        assert sources.status[BASE_MODEL] == picker.status()
    finally:
        win.session.client.stop()


def test_an_offline_hub_search_is_one_sentence(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    code = (
        "from engine.errors import EngineError\n"
        "from engine.llm.hub import search\n"
        "try:\n    search('qwen')\n"
        "except EngineError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == (
        "The Hub is not searched: HF_HUB_OFFLINE is set (local models are still "
        "offered)."
    ), done.stderr
