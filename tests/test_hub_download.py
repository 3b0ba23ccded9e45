"""Downloads from the Hugging Face Hub, against a local server that follows
the Hub's download API (tests/hub_server.py, pointed at by HF_ENDPOINT),
never the internet: the headless command, a cut connection resumed with a
Range request, one sentence for a missing repo, a gated model without a
token and offline mode; and the studio's Models workspace downloading with
a progress bar, stopped midway and resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import COMMIT, FakeHub
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from engine.errors import ConfigError
from engine.llm.hub import validate
from engine.store.project import Project
from widgets.picker import SearchPicker

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = bytes(range(256)) * (3 * 4096)  # 3 MiB, three of the client's chunks
FILES = {
    "config.json": json.dumps({"model_type": "qwen2"}).encode(),
    "model.safetensors": WEIGHTS,
}


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({"org/tiny": dict(FILES), "org/gated": dict(FILES)}) as server:
        server.gated.add("org/gated")
        yield server


def hub_env(hub: FakeHub, home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "TRANSFORMERS_OFFLINE"
    }
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def engine_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "hub", "download", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def snapshot(home: Path, repo: str) -> Path:
    return home / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / COMMIT


def test_headless_download_resumes_a_cut_connection(hub: FakeHub, tmp_path: Path):
    hub.cut_once["model.safetensors"] = 2 * 2**20 + 12345  # mid-file, once
    home = tmp_path / "hf"
    done = engine_cli(hub_env(hub, home), "org/tiny", "--project", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["commit"] == COMMIT and result["bytes"] == sum(
        map(len, FILES.values())
    )
    folder = snapshot(home, "org/tiny")
    assert result["path"] == str(folder)
    for name, data in FILES.items():
        assert (folder / name).read_bytes() == data
    # The cut GET, then one that asks for the rest from the bytes kept.
    assert hub.ranges("model.safetensors") == [None, f"bytes={2 * 2**20}-"]
    # A run of the project, completed, its progress in bytes.
    project = Project.open(tmp_path / "p")
    try:
        (run,) = project.list_runs()
        assert run.kind == "hub.download" and run.status == "completed"
        assert run.progress_done == run.progress_total == result["bytes"]
        log = (Path(run.run_dir) / "log.txt").read_text()
        assert "Downloaded 2 files" in log
    finally:
        project.close()
    # Again: everything is in the cache, nothing is fetched.
    gets = len(hub.ranges("model.safetensors"))
    assert engine_cli(hub_env(hub, home), "org/tiny", "--quiet").returncode == 0
    assert len(hub.ranges("model.safetensors")) == gets


@pytest.mark.parametrize(
    ("repo", "extra", "sentence"),
    [
        (
            "org/missing",
            {},
            "org/missing was not found on {url}: check the name, or set HF_TOKEN "
            "if it is a private or gated model.",
        ),
        (
            "org/missing",
            {"HF_TOKEN": "hf_test_token"},
            "org/missing was not found on {url}: check the name, or set HF_TOKEN "
            "if it is a private or gated model.",
        ),
        (
            "org/gated",
            {},
            "org/gated is a gated model: accept its terms on the Hub and set "
            "HF_TOKEN to a token of that account to download it.",
        ),
        (
            "org/gated",
            {"HF_TOKEN": "hf_wrong"},
            "org/gated is a gated model: accept its terms on the Hub and set "
            "HF_TOKEN to a token of that account to download it.",
        ),
        (
            "org/tiny",
            {"HF_HUB_OFFLINE": "1"},
            "Cannot download org/tiny: HF_HUB_OFFLINE is set, so the Hugging Face "
            "Hub may not be reached (unset it to download).",
        ),
    ],
)
def test_what_cannot_be_downloaded_is_one_sentence(
    hub: FakeHub, tmp_path: Path, repo: str, extra: dict[str, str], sentence: str
) -> None:
    done = engine_cli(hub_env(hub, tmp_path / "hf", **extra), repo)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "rl-studio-engine hub: " + sentence.format(url=hub.url)
    )


def test_a_gated_model_downloads_with_its_token(hub: FakeHub, tmp_path: Path):
    env = hub_env(hub, tmp_path / "hf", HF_TOKEN=hub.token)
    done = engine_cli(env, "org/gated", "--quiet")
    assert done.returncode == 0, done.stderr
    assert (snapshot(tmp_path / "hf", "org/gated") / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"repo_id": ""}, "repo_id"),
        ({"repo_id": "a/b/c"}, "repo_id"),
        ({"repo_id": "org/ name"}, "repo_id"),
        ({"repo_id": "org/x", "revision": " "}, "revision"),
    ],
)
def test_bad_settings_name_the_field(config: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(config)
    assert info.value.field == field and str(info.value).endswith(".")


def test_models_workspace_downloads_with_progress_stop_and_resume(
    qtbot, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from studio_harness import build_main_window, start_on_project

    from studio.model_manager.workspace import ModelsWorkspace

    home = tmp_path / "hf"
    for key, value in hub_env(hub, home).items():
        if key.startswith("HF_"):
            monkeypatch.setenv(key, value)  # the engine and its jobs inherit them
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub.delay_s = 0.05  # ~1.3 MB/s: slow enough to stop midway
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    ws = win.workspaces["models"]
    assert isinstance(ws, ModelsWorkspace)
    win.show()
    win.set_workspace("models")
    try:
        ws.hub_button.click()
        dialog = ws.dialogs[-1]
        qtbot.waitUntil(dialog.is_ready, timeout=30_000)
        # The repository is picked from a Hub search, not typed in full.
        picker = dialog.form.editor("repo_id")
        assert isinstance(picker, SearchPicker)
        qtbot.keyClicks(picker.edit, "tin")
        qtbot.waitUntil(lambda: "org/tiny" in picker.visible_values(), timeout=30_000)
        assert "org/gated" not in picker.visible_values()
        picker.pick("org/tiny")
        assert dialog.values() == ("org/tiny", "main")
        ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
        with qtbot.waitSignal(ws.controller.action_started, timeout=20_000):
            qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
        assert ws.action_progress.isVisible() and ws.action_stop.isVisible()
        # Bytes arrive: the bar shows them against the total.
        qtbot.waitUntil(
            lambda: (
                (ws._state.run(ws._action_run) or {}).get("progress_done", 0) > 2**20
            ),
            timeout=60_000,
        )
        run = ws._state.run(ws._action_run) or {}
        assert run["progress_total"] == sum(map(len, FILES.values()))
        with qtbot.waitSignal(ws.controller.action_ended, timeout=30_000) as ended:
            qtbot.mouseClick(ws.action_stop, Qt.MouseButton.LeftButton)
        assert ended.args[2] == "stopped", ended.args
        assert "resumes" in ws.action_label.text()
        assert not (snapshot(home, "org/tiny") / "model.safetensors").exists()
        # Again, faster: it resumes from the bytes the stopped run kept.
        hub.delay_s = 0.0
        with qtbot.waitSignal(ws.controller.action_ended, timeout=60_000) as ended:
            ws.download_from_hub("org/tiny")
        assert ended.args[2] == "completed", ended.args
        assert "Downloaded <b>org/tiny</b>" in ws.action_label.text()
        data = (snapshot(home, "org/tiny") / "model.safetensors").read_bytes()
        assert data == WEIGHTS
        resumed = hub.ranges("model.safetensors")[-1]
        assert resumed is not None and int(resumed[6:-1]) >= 2**20
    finally:
        win.session.client.stop()
