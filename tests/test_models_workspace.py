"""The Models workspace against the real engine: the table of models with SB3
details and lineage, Delete with confirmation, the Ollama server's models
(a local fake server following Ollama's API, not Ollama itself), an
unreachable host, chat, ONNX export, evaluate and play through runs."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from models_workspace_support import (
    REPORT,
    FakeOllama,
    fake_entry,
    fill_run_form,
    make_ppo_zip,
    submit_run_form,
)
from PySide6.QtWidgets import QDialogButtonBox
from studio_harness import build_main_window, start_on_project

from engine.store.project import Project
from studio.model_manager.workspace import ModelsWorkspace

UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing listens


@pytest.fixture(scope="module")
def ppo_zip(tmp_path_factory) -> Path:
    return make_ppo_zip(tmp_path_factory.mktemp("ppo") / "ppo.zip")


def build_project(root: Path, ppo_zip: Path) -> dict[str, str]:
    """A policy, and adapter → merged → GGUF with its deployment."""
    p = Project.open(root, create=True)
    train = p.create_run("rl.train", {"env": "CartPole-v1", "algo": "PPO"}, "PPO run")
    p.update_run(train.id, status="completed")
    policy = p.register_model(
        name="PPO CartPole",
        kind="sb3-policy",
        files=[ppo_zip],
        source_run=train.id,
        env="CartPole-v1",
        metrics={"eval/mean_reward": 21.5},
    )
    tmp = root / "scratch"
    (tmp / "adapter").mkdir(parents=True)
    (tmp / "adapter" / "adapter_config.json").write_text("{}")
    lt = p.create_run("llm.train", {"env": "envs/jira.env.json"}, "GRPO run")
    adapter = p.register_model(
        name="jira-grpo",
        kind="lora-adapter",
        files=[tmp / "adapter"],
        source_run=lt.id,
        base="/base/qwen",
        parents=["/base/qwen"],
    )
    (tmp / "merged").mkdir()
    (tmp / "merged" / "config.json").write_text("{}")
    mr = p.create_run("llm.merge", {"adapter": adapter.path}, "Merge run")
    merged = p.register_model(
        name="jira-merged",
        kind="hf-merged",
        files=[tmp / "merged"],
        source_run=mr.id,
        parents=[adapter.path],
    )
    p.update_run(mr.id, status="completed", summary={"registered_models": [merged.id]})
    (tmp / "m.gguf").write_bytes(b"GGUF" + bytes(100))
    gr = p.create_run("export.gguf", {"parents": [merged.id]}, "GGUF run")
    gguf = p.register_model(
        name="jira-f16",
        kind="gguf",
        files=[tmp / "m.gguf"],
        source_run=gr.id,
        parents=[merged.id],
    )
    p.update_run(gr.id, status="completed", summary={"registered_models": [gguf.id]})
    dr = p.create_run(
        "deploy.ollama", {"parents": [gguf.id], "name": "jira-agent"}, "Deploy"
    )
    p.update_run(dr.id, status="completed", summary={"deploy": {"deployed": True}})
    er = p.create_run("llm.evaluate", {}, "Before/after")
    (Path(er.run_dir) / "report.json").write_text(json.dumps(REPORT))
    p.update_run(er.id, status="completed")
    shutil.rmtree(tmp)
    p.close()
    return {
        "policy": policy.id,
        "adapter": adapter.id,
        "merged": merged.id,
        "gguf": gguf.id,
    }


@pytest.fixture
def setup(qtbot, tmp_path: Path, ppo_zip: Path) -> Iterator[tuple]:
    ids = build_project(tmp_path / "project", ppo_zip)
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project")
    workspace = win.workspaces["models"]
    assert isinstance(workspace, ModelsWorkspace)
    workspace.server.host_edit.setText(UNREACHABLE)
    win.show()
    win.set_workspace("models")
    yield win, workspace, ids
    win.session.client.stop()


def test_table_lists_models_with_details_lineage_and_report(qtbot, setup) -> None:
    _win, ws, ids = setup
    records = {r["id"]: r for r in ws.records()}
    assert set(ids.values()) <= set(records)
    policy = records[ids["policy"]]
    # The algorithm was not registered: it comes from the zip's JSON.
    assert policy["algo"] == "PPO" and policy["sb3"]["num_timesteps"] == 64
    assert policy["size_bytes"] > 0 and policy["source_run"]
    ws.select(ids["policy"])
    assert "ActorCriticPolicy" in ws.details.summary.text()
    assert "Box((4,), float32)" in ws.details.summary.text()
    assert (
        ws.action_bar.buttons["evaluate"].isEnabled()
        and ws.action_bar.buttons["onnx"].isEnabled()
    )
    assert not ws.action_bar.buttons["deploy"].isEnabled()
    qtbot.waitUntil(lambda: len(ws.details.chain.titles()) == 3, timeout=10_000)
    assert ws.details.chain.titles() == ["CartPole-v1", "PPO run", "PPO CartPole"]

    ws.select(ids["merged"])
    qtbot.waitUntil(lambda: len(ws.details.chain.titles()) == 6, timeout=10_000)
    assert ws.details.chain.titles() == [
        "envs/jira.env.json",
        "GRPO run",
        "jira-grpo",
        "jira-merged",
        "jira-f16",
        "jira-agent",
    ]
    assert [i.title for i in ws.details.chain.items() if i.current] == ["jira-merged"]
    assert (
        ws.action_bar.buttons["one_click"].isEnabled()
        and ws.action_bar.buttons["chat"].isEnabled()
    )

    # The before/after report of the llm.evaluate run.
    ws.tabs.setCurrentIndex(3)
    assert ws.reports.report_box.count() == 1
    assert ws.reports.report.chart.heights("after") == [0.75, 1.2, 0.05]


def test_delete_asks_then_removes_folder_and_row(qtbot, setup) -> None:
    win, ws, ids = setup
    policy = next(r for r in ws.records() if r["id"] == ids["policy"])
    folder = Path(policy["path"]).parent
    assert folder.is_dir()
    asked = []
    ws.action_bar.confirm = lambda title, text: asked.append(text) or False
    ws.select(ids["policy"])
    ws.action_bar.buttons["delete"].click()
    assert asked and "PPO CartPole" in asked[0] and folder.is_dir()
    ws.action_bar.confirm = lambda title, text: True
    ws.action_bar.buttons["delete"].click()
    qtbot.waitUntil(
        lambda: all(r["id"] != ids["policy"] for r in ws.records()), timeout=10_000
    )
    assert not folder.exists()
    assert not list(folder.parent.glob("*.tmp-deleted"))
    project = Project.open(Path(win.session.state.path))
    try:
        assert ids["policy"] not in {m.id for m in project.list_models()}
    finally:
        project.close()
    # Deleting it again (a stale view) is refused with one sentence.
    failures = []
    ws.controller.failed.connect(failures.append)
    ws.controller.delete_model({"id": ids["policy"], "kind": "sb3-policy"})
    qtbot.waitUntil(lambda: bool(failures), timeout=10_000)
    assert failures == [f"There is no model {ids['policy']!r} in this project."]


def test_unreachable_ollama_host_says_so_in_one_sentence(qtbot, setup) -> None:
    _win, ws, _ids = setup
    ws.server.refresh_button.click()
    qtbot.waitUntil(
        lambda: "No Ollama server" in ws.server.status.text(), timeout=15_000
    )
    text = ws.controller.ollama_error
    assert text.startswith(f"No Ollama server answers at {UNREACHABLE}")
    assert text.count(". ") == 0 and text.endswith(".")
    assert not [r for r in ws.records() if r["kind"] == "ollama"]


def test_ollama_models_are_listed_chatted_with_and_deleted(qtbot, setup) -> None:
    _win, ws, _ids = setup
    with FakeOllama() as fake:
        fake.models["jira-agent:latest"] = fake_entry("jira-agent:latest")
        fake.models["other:7b"] = fake_entry("other:7b", size=4_000_000_000)
        ws.server.host_edit.setText(fake.host)
        ws.server.refresh_button.click()
        qtbot.waitUntil(
            lambda: len([r for r in ws.records() if r["kind"] == "ollama"]) == 2,
            timeout=15_000,
        )
        assert "Ollama 0.6.2: 2 model(s)" in ws.server.status.text()
        ws.select("ollama:jira-agent:latest")
        assert "qwen2" in ws.details.summary.text()
        # Deployed from this project: its chain is the GGUF's, ending here.
        qtbot.waitUntil(lambda: len(ws.details.chain.titles()) == 6, timeout=10_000)
        assert [i.title for i in ws.details.chain.items() if i.current] == [
            "jira-agent"
        ]

        dialog = ws.action_bar.chat()
        assert dialog is not None
        dialog.input.setPlainText("hello there")
        dialog.send_button.click()
        qtbot.waitUntil(lambda: "echo: hello there" in dialog.transcript_text())
        assert fake.requests[-1][1] == "/api/chat"
        assert fake.requests[-1][2]["model"] == "jira-agent:latest"
        # What the answer cost, from Ollama's own counts (issue 29, item 7).
        assert dialog.status.text() == (
            "3 tokens in 0.50 s (6.0 tokens/s); loading the model took 1.2 s"
        )
        # An empty answer, and one of control characters, say so.
        for answer, shown, note in (
            ("  ", "(no text)", "nothing but white space"),
            ("ok\x07\x1b", "ok\\x07\\x1b", "2 control character(s)"),
        ):
            fake.chat_reply = lambda body, a=answer: a
            dialog.send("again")
            qtbot.waitUntil(lambda s=shown: s in dialog.transcript_text())
            assert note in dialog.status.text()
        dialog.close()

        ws.action_bar.confirm = lambda title, text: "Ollama server" in text
        ws.select("ollama:other:7b")
        ws.action_bar.buttons["delete"].click()
        qtbot.waitUntil(
            lambda: (
                [r["name"] for r in ws.records() if r["kind"] == "ollama"]
                == ["jira-agent:latest"]
            ),
            timeout=15_000,
        )
        assert "other:7b" not in fake.models


def kind_text(ws: ModelsWorkspace, model_id: str) -> str:
    """The Kind cell of a model's row, as the table shows it."""
    model = ws.table.model
    row = next(i for i, r in enumerate(model.records) if r["id"] == model_id)
    return str(model.data(model.index(row, 1)))


def test_a_registered_deployment_is_one_row_with_its_server_entry(
    qtbot, setup, tmp_path: Path
) -> None:
    """A deployment the project registered and the server's entry of it are
    one row (the project's, with the server's size); gone from the server
    it stays, marked; other server models stay server rows. Deleting the
    row forgets it and leaves the model on the server."""
    win, ws, ids = setup
    with FakeOllama() as fake:
        fake.models["tiny-agent:latest"] = fake_entry("tiny-agent:latest", size=5_000)
        fake.models["other:7b"] = fake_entry("other:7b")
        facts = {"ollama_model": "tiny-agent", "host": fake.host}
        file = tmp_path / "tiny-agent-ollama.json"
        file.write_text(json.dumps(facts))
        project = Project.open(Path(win.session.state.path))
        try:
            deployed = project.register_model(
                name="tiny-agent",
                kind="ollama",
                files=[file],
                parents=[ids["gguf"]],
                metrics=facts,
            )
        finally:
            project.close()
        win.session.refresh_project()
        ws.server.host_edit.setText(fake.host + "/")
        ws.server.refresh_button.click()

        def ollama_rows() -> dict[str, dict]:
            return {r["id"]: r for r in ws.records() if r["kind"] == "ollama"}

        def status() -> str:
            return str(ollama_rows().get(deployed.id, {}).get("server_status"))

        qtbot.waitUntil(lambda: status() == "on server", timeout=15_000)
        assert set(ollama_rows()) == {deployed.id, "ollama:other:7b"}
        assert ollama_rows()[deployed.id]["size_bytes"] == 5_000
        assert kind_text(ws, deployed.id) == "Ollama · on server"
        assert kind_text(ws, "ollama:other:7b") == "Ollama"
        ws.select(deployed.id)
        assert ws.action_bar.buttons["chat"].isEnabled()
        qtbot.waitUntil(
            lambda: ws.details.chain.titles()[-2:] == ["jira-f16", "tiny-agent"],
            timeout=10_000,
        )

        # Gone from the server: the row stays, marked; chat is off.
        del fake.models["tiny-agent:latest"]
        ws.server.refresh_button.click()
        qtbot.waitUntil(lambda: status() == "not on server", timeout=15_000)
        assert set(ollama_rows()) == {deployed.id, "ollama:other:7b"}
        assert kind_text(ws, deployed.id) == "Ollama · not on server"
        assert "Not on server" in ws.details.summary.text()
        assert not ws.action_bar.buttons["chat"].isEnabled()

        # Back on the server; Delete forgets the row, the server keeps it
        # and lists it as its own again.
        fake.models["tiny-agent:latest"] = fake_entry("tiny-agent:latest", size=5_000)
        ws.server.refresh_button.click()
        qtbot.waitUntil(lambda: status() == "on server", timeout=15_000)
        asked: list[str] = []
        ws.action_bar.confirm = lambda title, text: asked.append(text) or True
        ws.select(deployed.id)
        ws.action_bar.buttons["delete"].click()
        qtbot.waitUntil(
            lambda: (
                set(ollama_rows()) == {"ollama:tiny-agent:latest", "ollama:other:7b"}
            ),
            timeout=10_000,
        )
        assert "keeps it" in asked[0]
        assert "tiny-agent:latest" in fake.models
        assert not [r for r in fake.requests if r[0] == "DELETE"]


def test_export_onnx_registers_an_onnx_model(qtbot, setup) -> None:
    win, ws, ids = setup
    ws.select(ids["policy"])
    ws.action_bar.buttons["onnx"].click()
    ended = []
    ws.controller.action_ended.connect(lambda *a: ended.append(a))
    qtbot.waitUntil(lambda: bool(ended), timeout=60_000)
    assert ended[0][1:3] == ("export.onnx", "completed"), ended
    qtbot.waitUntil(
        lambda: any(r["kind"] == "onnx" for r in ws.records()), timeout=10_000
    )
    onnx = next(r for r in ws.records() if r["kind"] == "onnx")
    assert Path(onnx["path"]).suffix == ".onnx" and Path(onnx["path"]).stat().st_size
    # its row names the env its policy was registered with (the fixture's
    # policy has no algorithm registered: the Models view reads its zip's)
    assert onnx["env"] == "CartPole-v1"
    assert onnx["metrics"]["verified"] is True
    # It runs in the Training list too, and its lineage leads back to the policy.
    assert any(r.get("kind") == "export.onnx" for r in win.session.state.runs.values())
    ws.select(onnx["id"])
    qtbot.waitUntil(lambda: "PPO CartPole" in ws.details.chain.titles(), timeout=10_000)


def test_evaluate_and_play_show_results(qtbot, setup) -> None:
    _win, ws, ids = setup
    ended: dict[str, tuple] = {}

    def on_ended(run_id: str, purpose: str, status: str, reason: str) -> None:
        # The workspace's own slot ran first: its label shows this result.
        ended[purpose] = (status, reason, ws.results.result_label.text())

    ws.controller.action_ended.connect(on_ended)
    ws.select(ids["policy"])
    ws.action_bar.evaluate(episodes=3)
    ws.action_bar.buttons["play"].click()  # both run at once, each in its own process
    qtbot.waitUntil(lambda: len(ended) == 2, timeout=90_000)
    status, reason, text = ended["evaluate"]
    assert status == "completed", reason
    assert "3 episodes" in text and "mean return" in text
    status, reason, text = ended["play"]
    assert status == "completed", reason
    assert "Play" in text and "return" in text
    rows = ws.results.trace_table.model.records
    # The trace reads from the episode's first step (issue 29: it began at
    # the last).
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert rows and rows[-1]["status"].startswith(("terminated", "truncated"))
    assert rows[0]["step"] == 1 and len(rows[0]["observation"].split(",")) == 4


def test_play_of_a_cartpole_policy_shows_its_frames(qtbot, setup) -> None:
    """pygame draws CartPole headless in the job; the frames travel as
    frames.npz and the viewer beside the trace shows them."""
    import numpy as np

    _win, ws, ids = setup
    ws.select(ids["policy"])
    with qtbot.waitSignal(
        ws.controller.action_ended,
        timeout=90_000,
        check_params_cb=lambda run_id, purpose, status, reason: purpose == "play",
    ) as ended:
        ws.action_bar.buttons["play"].click()
    run_id, _purpose, status, reason = ended.args
    assert status == "completed", reason
    data = ws.controller.read_preview(run_id)
    assert data is not None and data["frames_note"] is None
    frames = np.load(data["frames"])["frames"]
    length = data["episodes"][0]["length"]
    assert frames.shape == (min(300, length + 1), 400, 600, 3)
    assert frames.dtype == np.uint8 and frames[0].std() > 5  # cart, pole, track
    assert not np.array_equal(frames[0], frames[-1])  # the cart moved
    assert ws.results.frames.isVisible() and ws.results.frames.frame_count() == len(
        frames
    )
    image = ws.results.frames.image.pixmap().toImage()
    assert not image.isNull()
    pixels = {
        image.pixel(x, y)
        for x in range(0, image.width(), 7)
        for y in range(0, image.height(), 7)
    }
    assert len(pixels) > 1  # a picture (black cart on white), not a blank
    with qtbot.waitSignal(ws.results.frames.frame_changed, timeout=5_000) as shown:
        ws.results.frames.slider.setValue(len(frames) - 1)
    assert shown.args == [len(frames) - 1]


def write_gguf(path: Path) -> Path:
    """A small but valid GGUF (ChatML template, one tensor)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny")
    writer.add_file_type(1)
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "<|im_end|>\n{% endfor %}"
    )
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_click_export_to_ollama_ends_with_the_run_line(
    qtbot, setup, tmp_path: Path
) -> None:
    win, ws, _ids = setup
    project = Project.open(Path(win.session.state.path))
    try:
        gguf = project.register_model(
            name="tiny-f16", kind="gguf", files=[write_gguf(tmp_path / "t.gguf")]
        )
    finally:
        project.close()
    win.session.refresh_project()
    qtbot.waitUntil(lambda: any(r["id"] == gguf.id for r in ws.records()))
    ws.select(gguf.id)
    assert (
        ws.action_bar.buttons["deploy"].isEnabled()
        and ws.action_bar.buttons["one_click"].isEnabled()
    )
    with FakeOllama() as fake:
        # The server is listed before the export (without the model to come).
        ws.server.host_edit.setText(fake.host)
        ws.server.refresh_button.click()
        qtbot.waitUntil(lambda: ws.controller.ollama_listed_host is not None)
        dialog = ws.action_bar.export_to_ollama()
        assert dialog is not None
        fill_run_form(qtbot, dialog)
        assert dialog.form.values()["name"] == "tiny-f16"
        fill_run_form(qtbot, dialog, name="Bad name!")
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
        qtbot.waitUntil(dialog.message.isVisible, timeout=30_000)
        assert dialog.isVisible() and "letters, digits" in dialog.message.text()
        fill_run_form(qtbot, dialog, name="tiny-agent", host=fake.host)
        submit_run_form(qtbot, dialog)
        export = ws.action_bar.pipeline_view.export
        assert export is not None
        with qtbot.waitSignal(export.finished, timeout=60_000) as done:
            pass
        assert done.args[0] is True, done.args
        assert ws.action_bar.pipeline_view.result_text().endswith(
            "ollama run tiny-agent"
        )
        assert "ollama run tiny-agent" in ws.action_bar.pipeline_view.result.text()
        assert ws.action_bar.pipeline_view.bar.value() == 1000
        assert "tiny-agent:latest" in fake.models
        create = next(b for m, p, b in fake.requests if p == "/api/create")
        assert create["model"] == "tiny-agent" and "<|im_start|>" in create["template"]
        # The default type asks the server for Q4_K_M from the F16 file.
        assert create["quantize"] == "q4_K_M"

        # The deployment's row says "on server" with no Refresh (it said
        # "not on server", in red, from the listing before the export).
        def deployed_status() -> str | None:
            rows = [r for r in ws.records() if r.get("source_run") == export.run_id]
            return rows[0].get("server_status") if rows else None

        qtbot.waitUntil(lambda: deployed_status() == "on server", timeout=15_000)
    # One export.ollama run, deploy only, is in the Training list too.
    run = win.session.state.run(export.run_id)
    assert run is not None and run["kind"] == "export.ollama"
    assert run["name"] == "Export to Ollama: tiny-agent"
    assert run["status"] == "completed"
    assert (
        "Modelfile and deploy (1/1)" in (Path(run["run_dir"]) / "log.txt").read_text()
    )
    # The deployed model is the project's too, named as on the server and
    # child of the GGUF it was made from.
    qtbot.waitUntil(
        lambda: any(
            r["kind"] == "ollama" and r.get("source_run") == export.run_id
            for r in ws.records()
        ),
        timeout=10_000,
    )
    deployed = next(r for r in ws.records() if r.get("source_run") == export.run_id)
    assert deployed["name"] == "tiny-agent"
    assert deployed["metrics"]["ollama_model"] == "tiny-agent"
    ws.select(deployed["id"])
    qtbot.waitUntil(
        lambda: ws.details.chain.titles()[-2:] == ["tiny-f16", "tiny-agent"],
        timeout=10_000,
    )


def test_record_video_plays_the_gif_and_opens_it(qtbot, setup, tmp_path) -> None:
    """Record video…: the engine's rl.record form for the selected policy,
    run as an action; the GIF plays in the results pane's video player, which
    opens the file in the desktop's player (issue 31, item 4)."""
    from PySide6.QtCore import QUrl

    _win, ws, ids = setup
    ws.select(ids["policy"])
    assert ws.action_bar.buttons["record"].isEnabled()
    dialog = ws.action_bar.record_video()
    assert dialog is not None
    out = tmp_path / "cart.gif"
    fill_run_form(qtbot, dialog, out=str(out), max_frames="20")
    assert dialog.config()["env"] == "CartPole-v1"  # fixed from the model
    with qtbot.waitSignal(
        ws.controller.action_ended,
        timeout=90_000,
        check_params_cb=lambda run_id, purpose, status, reason: purpose == "record",
    ) as ended:
        submit_run_form(qtbot, dialog)
    _run_id, _purpose, status, reason = ended.args
    assert status == "completed", reason
    text = ws.results.result_label.text()
    assert "cart.gif" in text and "20 frames" in text and "Show in folder" in text
    player = ws.results.video
    assert player.isVisible() and player.video() == out
    qtbot.waitUntil(
        lambda: not player.is_decoding() and player.viewer.frame_count() == 20,
        timeout=10_000,
    )
    assert player.viewer.is_playing()
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        ws.window().grab().save(str(Path(shots) / "record-video-gif.png"))
    opened: list[QUrl] = []
    ws.results.open_url = opened.append
    player.open_button.click()
    assert [u.toLocalFile() for u in opened] == [str(out)]
    # Play afterwards puts the trace and frames back in the GIF's place.
    ws.results.show_play(None)
    assert not player.isVisible() and player.video() is None
