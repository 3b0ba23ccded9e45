"""Downloads from the Hugging Face Hub, against a local server that follows
the Hub's download API (tests/hub_server.py, pointed at by HF_ENDPOINT),
never the internet: the headless command, a cut connection resumed with a
Range request, one sentence for a missing repo, a gated model without a
token and offline mode; and the studio's Models workspace downloading with
a progress bar, stopped midway and resumed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import COMMIT, FakeHub, git_blob_id
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from engine.errors import ConfigError, EngineError
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
    # The cut GET, then one that asks for the rest from every byte that came.
    assert hub.ranges("model.safetensors") == [None, f"bytes={2 * 2**20 + 12345}-"]
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
        ws.action_bar.hub_button.click()
        dialog = ws.action_bar.dialogs[-1]
        qtbot.waitUntil(dialog.is_loaded, timeout=30_000)
        # The repository is picked from a Hub search, not typed in full.
        picker = dialog.form.editor("repo_id")
        assert isinstance(picker, SearchPicker)
        qtbot.keyClicks(picker.edit, "tin")
        qtbot.waitUntil(lambda: "org/tiny" in picker.visible_values(), timeout=30_000)
        assert "org/gated" not in picker.visible_values()
        picker.pick("org/tiny")
        assert dialog.config() == {"repo_id": "org/tiny"}  # the rest: defaults
        ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
        with qtbot.waitSignal(ws.controller.action_started, timeout=20_000):
            qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
        assert ws.progress.bar.isVisible() and ws.progress.stop_button.isVisible()
        # Bytes arrive: the bar shows them against the total.
        qtbot.waitUntil(
            lambda: (
                (ws._state.run(ws.progress.run_id) or {}).get("progress_done", 0)
                > 2**20
            ),
            timeout=60_000,
        )
        run = ws._state.run(ws.progress.run_id) or {}
        assert run["progress_total"] == sum(map(len, FILES.values()))
        with qtbot.waitSignal(ws.controller.action_ended, timeout=30_000) as ended:
            qtbot.mouseClick(ws.progress.stop_button, Qt.MouseButton.LeftButton)
        assert ended.args[2] == "stopped", ended.args
        assert "resumes" in ws.progress.label.text()
        assert not (snapshot(home, "org/tiny") / "model.safetensors").exists()
        # Again, faster: it resumes from the bytes the stopped run kept.
        hub.delay_s = 0.0
        with qtbot.waitSignal(ws.controller.action_ended, timeout=60_000) as ended:
            ws.action_bar.download_from_hub("org/tiny")
        assert ended.args[2] == "completed", ended.args
        assert "Downloaded <b>org/tiny</b>" in ws.progress.label.text()
        data = (snapshot(home, "org/tiny") / "model.safetensors").read_bytes()
        assert data == WEIGHTS
        resumed = hub.ranges("model.safetensors")[-1]
        assert resumed is not None and int(resumed[6:-1]) >= 2**20
    finally:
        win.session.client.stop()


# ------------------------------------------------------------ a hostile Hub
#
# The server's names become paths and its bytes become files: every attack
# below is refused with one sentence, nothing is written outside the cache,
# and what the cache held before is still there.

ESCAPE = f"rlstudio-escape-{os.getpid()}"
"""A name the attacks aim at in the real /tmp (checked, then removed)."""
TO_TMP = "../" * 30 + f"tmp/{ESCAPE}"


@pytest.fixture
def cache(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In-process downloads into ``tmp_path/hf/hub`` from ``hub``, the cache
    already holding ``org/tiny`` (downloaded through the same code)."""
    from huggingface_hub import constants

    from engine.llm import hub as hub_module

    home = tmp_path / "hf" / "hub"
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub_module.download("org/tiny")
    return home


def _tree(folder: Path) -> dict[str, object]:
    """Every entry under ``folder``: a file's bytes, a link's target."""
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p), p.read_bytes() if p.is_file() else None)
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "folder"
    return out


def _outside_cache(tmp_path: Path) -> dict[str, object]:
    tree = _tree(tmp_path)
    return {k: v for k, v in tree.items() if not k.startswith("hf")}


def _escaped_to_tmp() -> list[str]:
    found = [str(p) for p in Path("/tmp").glob(f"{ESCAPE}*")]
    for p in found:
        Path(p).unlink()
    return found


def _one_sentence(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    assert message.endswith(".") and len(message) < 1200, message


# (name, how the server misbehaves, the files of org/evil, a part of the
# sentence); each gets a fresh copy of org/tiny's files unless it says more.
EVIL_FILES = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": WEIGHTS}
PATH_ATTACKS: list[tuple[str, dict[str, object], dict[str, bytes], str]] = [
    ("ETag ../../../../x", {"etags": {"config.json": '"../../../../x"'}}, {}, "ETag"),
    ("ETag to /tmp", {"etags": {"config.json": f'"{TO_TMP}"'}}, {}, "ETag"),
    ("ETag absolute /tmp", {"etags": {"config.json": f'"/tmp/{ESCAPE}"'}}, {}, "ETag"),
    (
        "LFS ETag to /tmp",
        {"etags": {"model.safetensors": f'"{TO_TMP}"'}},
        {},
        "ETag",
    ),
    ("weak ETag ../x", {"etags": {"config.json": 'W/"../x"'}}, {}, "ETag"),
    (
        "ETag of 40 non-hex",
        {"etags": {"config.json": '"' + "g" * 40 + '"'}},
        {},
        "ETag",
    ),
    ("ETag empty", {"etags": {"config.json": ""}}, {}, "ETag"),
    ("ETag of 5,000 characters", {"etags": {"config.json": "a" * 5000}}, {}, "ETag"),
    (
        "LFS ETag not its listed sha256",
        {"etags": {"model.safetensors": '"' + "a" * 64 + '"'}},
        {},
        "LFS digest",
    ),
    ("commit ../../../../x", {"commit": "../../../../x"}, {}, "commit"),
    ("commit to /tmp", {"commit": TO_TMP}, {}, "commit"),
    ("commit absolute", {"commit": f"/tmp/{ESCAPE}"}, {}, "commit"),
    ("commit upper-case hex", {"commit": "A" * 40}, {}, "commit"),
]
for _name in (
    "../x",
    "../../../../x",
    TO_TMP,
    f"/tmp/{ESCAPE}",
    "a/../../x",
    "a/../../../../../../../../tmp/" + ESCAPE,
    "a\\..\\..\\x",
    "a\x00b",
    "a//b",
    "./a",
    "a/.",
    "",
    "a" * 2000,
    "b" * 300 + "/c",
):
    PATH_ATTACKS.append(
        (f"file name {_name[:40]!r}", {}, {_name: b"x", **EVIL_FILES}, "file")
    )

DATA_ATTACKS: list[tuple[str, dict[str, object], str]] = [
    (
        "shorter than listed",
        {"served": {"model.safetensors": WEIGHTS[:-10]}},
        "not the 3,145,728 its file list gives",
    ),
    (
        "longer than listed",
        {"served": {"model.safetensors": WEIGHTS + b"tail"}},
        "more than the 3,145,728 bytes",
    ),
    (
        "LFS file of the wrong sha256",
        {"served": {"model.safetensors": WEIGHTS[:-1] + b"!"}},
        "its sha256 is",
    ),
    (
        "file of the wrong git sha1",
        {"served": {"config.json": b'{"model_type": "qwen3"}'}},
        "its git sha1 is",
    ),
]


def _attack(hub: FakeHub, settings: dict[str, object]) -> None:
    for key, value in settings.items():
        setattr(hub, key, value)


def test_hostile_names_are_refused_before_anything_is_written(
    hub: FakeHub, cache: Path, tmp_path: Path
) -> None:
    from engine.llm import hub as hub_module

    before_cache, before_outside = _tree(cache), _outside_cache(tmp_path)
    escapes: list[str] = []
    for name, settings, files, said in PATH_ATTACKS:
        hub.repos["org/evil"] = dict(files or EVIL_FILES)
        hub.etags, hub.commit = {}, COMMIT
        _attack(hub, settings)
        with pytest.raises(EngineError) as info:
            hub_module.download("org/evil")
        message = str(info.value)
        _one_sentence(message)
        assert said in message, (name, message)
        # The culprit is quoted, at most 200 characters of it.
        assert "a" * 201 not in message and "b" * 201 not in message
        if _escaped_to_tmp() or _outside_cache(tmp_path) != before_outside:
            escapes.append(name)
        after = _tree(cache)
        assert all(after.get(k) == v for k, v in before_cache.items()), name
        evil = cache / "models--org--evil"
        assert not [p for p in evil.rglob("*") if p.is_file()], (name, message)
    print(f"\nhub paths: {len(PATH_ATTACKS)} attacks, {len(escapes)} escaped")
    assert escapes == []


def test_a_revision_that_is_a_path_is_refused(cache: Path) -> None:
    from engine.llm import hub as hub_module

    for revision in ("../../x", "/tmp/x", "a/../../b", "a\\b", "-x", "a" * 300):
        with pytest.raises(EngineError) as info:
            hub_module.download("org/tiny", revision)
        _one_sentence(str(info.value))
        with pytest.raises(ConfigError) as bad:
            validate({"repo_id": "org/tiny", "revision": revision})
        assert bad.value.field == "revision"
    assert not (cache / "models--org--tiny" / "refs" / "x").exists()


def test_bytes_that_are_not_the_listed_file_are_deleted(
    hub: FakeHub, cache: Path, tmp_path: Path
) -> None:
    from engine.llm import hub as hub_module

    before_cache, before_outside = _tree(cache), _outside_cache(tmp_path)
    kept: list[str] = []
    for i, (name, settings, said) in enumerate(DATA_ATTACKS):
        repo = f"org/evil{i}"  # a fresh repo each: no blob of it in the cache
        hub.repos[repo] = dict(EVIL_FILES)
        hub.served = {}
        _attack(hub, settings)
        with pytest.raises(EngineError) as info:
            hub_module.download(repo)
        message = str(info.value)
        _one_sentence(message)
        assert said in message and "the partial download was deleted" in message
        blobs = cache / f"models--org--evil{i}" / "blobs"
        served = next(iter(hub.served))
        data = EVIL_FILES[served]
        etag = (
            hashlib.sha256(data).hexdigest()
            if served.endswith(".safetensors")
            else git_blob_id(data)
        )
        if (blobs / etag).exists() or list(blobs.glob("*.rlstudio-partial")):
            kept.append(name)
        assert not (
            cache / f"models--org--evil{i}" / "snapshots" / COMMIT / served
        ).exists()
    after = _tree(cache)
    assert all(after.get(k) == v for k, v in before_cache.items())
    assert _outside_cache(tmp_path) == before_outside
    print(f"\nhub data: {len(DATA_ATTACKS)} attacks, {len(kept)} kept")
    assert kept == []


def test_a_stalled_body_fails_in_time_and_resumes(hub: FakeHub, cache: Path) -> None:
    from engine.llm import hub as hub_module

    hub.repos["org/slow"] = dict(EVIL_FILES)
    hub.stall_after["model.safetensors"] = 100_000
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        hub_module.download("org/slow", stall_s=0.5)
    _one_sentence(str(info.value))
    assert "the server sent nothing for 0.5 s" in str(info.value)
    # The overall deadline, shorter than the stall timeout here.
    with pytest.raises(EngineError) as late:
        hub_module.download("org/slow", stall_s=30, deadline_s=0.5)
    _one_sentence(str(late.value))
    assert "did not finish within 0.5 s" in str(late.value)
    assert time.monotonic() - started < 20  # not 30 s of stall, nor forever
    # What came is kept, and the next download resumes from it.
    del hub.stall_after["model.safetensors"]
    result = hub_module.download("org/slow")
    assert result["stopped"] is False
    assert hub.ranges("model.safetensors")[-1] == "bytes=100000-"
    folder = cache / "models--org--slow" / "snapshots" / COMMIT
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS


@pytest.mark.parametrize(
    ("listing", "said"),
    [
        ((500, b"oops"), "failed with HTTP 500"),
        ((503, b""), "failed with HTTP 503"),
        ((404, b"{}"), "was not found on"),
        ((401, b""), "refused org/tiny (HTTP 401): set HF_TOKEN"),
        ((403, b"no"), "refused org/tiny (HTTP 403): set HF_TOKEN"),
        ((302, b""), "with HTTP 302, not 200"),
        ((200, b" " * (16 * 2**20 + 1)), "is larger than 16,777,216 bytes"),
        ((200, b"{not json"), "is not valid JSON"),
        ((200, b"[]"), "is not a JSON object"),
        ((200, b'{"sha": "' + COMMIT.encode() + b'"}'), "no list of at most"),
        ((200, b'{"sha": 1e999, "siblings": []}'), "not a finite number"),
        ((200, b"\xff\xfe"), "is not UTF-8 text"),
        ((200, b"[" * 100_000), "nested"),
        (
            (
                200,
                json.dumps({"sha": COMMIT, "siblings": [{"rfilename": "a"}]}).encode(),
            ),
            "gives no size for 'a'",
        ),
    ],
)
def test_a_broken_file_list_is_one_sentence(
    hub: FakeHub, cache: Path, listing: tuple[int, bytes], said: str
) -> None:
    from engine.llm import hub as hub_module

    hub.listing = listing
    with pytest.raises(EngineError) as info:
        hub_module.download("org/tiny")
    _one_sentence(str(info.value))
    assert said in str(info.value)


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """The command's last line, one sentence (with ``--project`` the run's
    log lines come before it); never a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    if "--project" not in done.args:
        assert done.stderr.strip() == last
    _one_sentence(last)
    return last


@pytest.mark.parametrize("project", [False, True])
def test_the_command_refuses_a_hostile_hub_in_one_sentence(
    hub: FakeHub, tmp_path: Path, project: bool
) -> None:
    home = tmp_path / "hf"
    where = ["--project", str(tmp_path / "p")] if project else []
    assert engine_cli(hub_env(hub, home), "org/tiny", "--quiet", *where).returncode == 0
    before = _tree(home)
    hub.repos["org/evil"] = {"../../../../x": b"x", **EVIL_FILES}
    for args, said in [
        (["org/evil"], "names the file '../../../../x'"),
        (["org/missing"], "org/missing was not found on"),
        (["org/tiny", "--revision", "../../x"], "revision must name a branch"),
    ]:
        done = engine_cli(hub_env(hub, home), *args, "--quiet", *where)
        assert done.returncode == 2, done.stderr
        assert _said(done).startswith("rl-studio-engine hub: ") and said in _said(done)
    hub.repos["org/evil"] = dict(EVIL_FILES)
    hub.etags = {"config.json": f'"{TO_TMP}"'}
    done = engine_cli(hub_env(hub, home), "org/evil", "--quiet", *where)
    assert done.returncode == 2 and "sent the ETag" in _said(done), done.stderr
    hub.etags = {}
    hub.stall_after["model.safetensors"] = 1000
    done = engine_cli(
        hub_env(hub, home), "org/evil", "--quiet", "--stall-timeout", "0.5", *where
    )
    assert done.returncode == 2 and "sent nothing for 0.5 s" in _said(done)
    assert _escaped_to_tmp() == [] and not (tmp_path / "x").exists()
    after = _tree(home)
    assert all(after.get(k) == v for k, v in before.items())
