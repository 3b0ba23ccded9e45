"""The one-click "Export to Ollama" from the Models workspace on a real
fine-tuned adapter, against the real engine and a local fake Ollama server
(following Ollama's documented API; not Ollama itself): one engine run
(merge → GGUF → Modelfile → deploy) in one progress view, ending with
``ollama run NAME``.
Then Chat with the merged model in the engine, and a deployment that Ollama
refuses mid-stream."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from models_workspace_support import FakeOllama, fill_run_form, submit_run_form
from studio_harness import build_main_window, start_on_project
from tiny_models import build_tiny_model

from engine.store.project import Project
from studio.model_manager.workspace import ModelsWorkspace

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing listens


def make_adapter(root: Path) -> tuple[Path, Path]:
    """A tiny Qwen2 base (tied embeddings, ChatML) and a LoRA adapter on it
    whose weights change the output (random B instead of PEFT's zeros)."""
    transformers.logging.set_verbosity_error()
    base = build_tiny_model(root / "base", "qwen2", tie_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    cfg = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "down_proj"],
        lora_dropout=0.0,
        init_lora_weights=False,
    )
    torch.manual_seed(2)
    adapter = root / "jira-lora"
    peft.get_peft_model(model, cfg).save_pretrained(adapter)
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(base)
    return base, adapter


@pytest.fixture
def setup(qtbot, tmp_path: Path) -> Iterator[tuple]:
    base, adapter_dir = make_adapter(tmp_path / "src")
    p = Project.open(tmp_path / "project", create=True)
    try:
        adapter = p.register_model(
            name="jira-lora",
            kind="lora-adapter",
            files=[adapter_dir],
            base=str(base),
        )
    finally:
        p.close()
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project")
    ws = win.workspaces["models"]
    assert isinstance(ws, ModelsWorkspace)
    ws.server.host_edit.setText(UNREACHABLE)
    win.show()
    win.set_workspace("models")
    yield win, ws, adapter.id
    win.session.client.stop()


def expected_reply(folder: Path, messages: list[dict[str, str]]) -> str:
    """Greedy generation with transformers directly, as the engine does it."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    prompt = tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    inputs = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=128, do_sample=False, pad_token_id=tok.pad_token_id
        )
    return str(
        tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    ).strip()


@pytest.mark.slow
def test_one_click_adapter_to_ollama_then_chat(qtbot, setup) -> None:
    win, ws, adapter_id = setup
    ws.select(adapter_id)
    assert ws.action_bar.buttons["one_click"].isEnabled()
    with FakeOllama() as fake:
        dialog = ws.action_bar.export_to_ollama()
        assert dialog is not None
        fill_run_form(qtbot, dialog)
        assert dialog.form.values()["type"] == "q4_k_m"  # the engine's default
        fill_run_form(qtbot, dialog, type="q8_0", name="jira-agent", host=fake.host)
        submit_run_form(qtbot, dialog)
        view = ws.action_bar.pipeline_view
        export = view.export
        assert export is not None and view.isVisible()
        # One view follows the whole export: the bar only moves forward.
        values: list[int] = []
        stages: list[str] = []
        export.changed.connect(lambda: values.append(view.bar.value()))
        export.changed.connect(lambda: stages.append(view.stage.text()))
        with qtbot.waitSignal(export.finished, timeout=240_000) as done:
            pass
        assert done.args[0] is True, done.args
        assert values == sorted(values) and values[-1] == 1000
        # The view showed the stages the engine reported, in their order
        # (progress events are coalesced, so not necessarily each one).
        order = ["Merge adapter", "Export GGUF", "Modelfile and deploy"]
        seen = [i for t in stages for i, o in enumerate(order) if t.startswith(o)]
        assert seen and seen == sorted(seen), stages
        assert view.result_text().splitlines()[-1] == "ollama run jira-agent"
        assert "ollama run jira-agent" in view.result.text()
        # One run did it all; the GUI started nothing else.
        run = win.session.state.run(export.run_id)
        assert run is not None and run["kind"] == "export.ollama"
        assert run["status"] == "completed"
        log = (Path(run["run_dir"]) / "log.txt").read_text()
        titles = ["Merge adapter into base", "Export GGUF", "Modelfile and deploy"]
        assert [f"{t} ({i}/3)" in log for i, t in enumerate(titles, 1)] == [True] * 3
        assert not {"llm.merge", "export.gguf", "deploy.ollama"} & {
            r["kind"] for r in win.session.state.runs.values()
        }

        # What reached the server: the exported GGUF as a blob, and a create
        # naming it with the ChatML template and stops.
        assert "jira-agent:latest" in fake.models
        create = next(b for m, p, b in fake.requests if p == "/api/create")
        assert create["model"] == "jira-agent" and "quantize" not in create
        assert "<|im_start|>" in create["template"]
        assert "<|im_end|>" in create["parameters"]["stop"]
        ((gguf_name, digest),) = create["files"].items()
        uploads = [
            b for m, p, b in fake.requests if (m, p) == ("POST", f"/api/blobs/{digest}")
        ]
        assert len(uploads) == 1 and uploads[0][:4] == b"GGUF"
        assert digest == "sha256:" + hashlib.sha256(uploads[0]).hexdigest()

    # The chain registered a merged model and a GGUF, each child of the last.
    qtbot.waitUntil(
        lambda: {"hf-merged", "gguf"} <= {r["kind"] for r in ws.records()},
        timeout=10_000,
    )
    merged = next(r for r in ws.records() if r["kind"] == "hf-merged")
    gguf_rec = next(r for r in ws.records() if r["kind"] == "gguf")
    assert Path(gguf_rec["path"]).name == gguf_name
    assert gguf_rec["metrics"]["type"] == "q8_0" and gguf_rec["metrics"]["verified"]
    ws.select(gguf_rec["id"])
    qtbot.waitUntil(
        lambda: ["jira-lora", merged["name"], gguf_rec["name"]]
        == [t for t in ws.details.chain.titles() if t in (
            "jira-lora", merged["name"], gguf_rec["name"])],
        timeout=10_000,
    )  # fmt: skip

    # Chat in the engine with the merged model, then with the adapter itself
    # (merged in memory): both answer what transformers generates greedily.
    folder = Path(merged["path"])
    folder = folder if (folder / "config.json").is_file() else folder.parent
    question = "Move PROJ-7 to Done."
    turn = [{"role": "user", "content": question}]
    want = expected_reply(folder, turn)
    adapter_rec = next(r for r in ws.records() if r["id"] == adapter_id)
    acfg = Path(adapter_rec["path"]) / "adapter_config.json"
    base = Path(json.loads(acfg.read_text())["base_model_name_or_path"])
    # The fine-tune shows in the answer: the base model says something else.
    assert want and want != expected_reply(base, turn)
    for model_id in (merged["id"], adapter_id):
        ws.select(model_id)
        assert ws.action_bar.buttons["chat"].isEnabled()
        chat = ws.action_bar.chat()
        assert chat is not None and chat.host == ""
        chat.input.setPlainText(question)
        chat.send_button.click()
        qtbot.waitUntil(lambda c=chat: len(c.messages) == 2, timeout=120_000)
        assert chat.messages[-1]["role"] == "assistant", chat.status.text()
        # what the answer cost, with nothing wrong with it
        assert " tokens in " in chat.status.text()
        assert "control character" not in chat.status.text()
        assert chat.messages[-1]["content"] == want
        assert "Model:" in chat.transcript_text()
        chat.close()


def test_ollama_error_mid_stream_fails_the_chain_in_one_sentence(
    qtbot, setup, tmp_path: Path
) -> None:
    """Deploy refused by the server: the step fails, the view says why in
    one sentence, and no model or bundle is registered."""
    win, ws, _adapter_id = setup
    out = tmp_path / "t.gguf"
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_file_type(1)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"
    )
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    project = Project.open(Path(win.session.state.path))
    try:
        rec = project.register_model(name="tiny-f16", kind="gguf", files=[out])
    finally:
        project.close()
    win.session.refresh_project()
    qtbot.waitUntil(lambda: any(r["id"] == rec.id for r in ws.records()))
    before = {r["id"] for r in ws.records()}
    ws.select(rec.id)
    with FakeOllama() as fake:
        fake.fail_create = "unsupported model architecture"
        dialog = ws.action_bar.export_to_ollama()
        assert dialog is not None
        fill_run_form(qtbot, dialog, name="broken", host=fake.host)
        submit_run_form(qtbot, dialog)
        export = ws.action_bar.pipeline_view.export
        with qtbot.waitSignal(export.finished, timeout=60_000) as done:
            pass
    ok, message = done.args
    assert ok is False
    assert message.endswith(
        "Ollama could not create broken: unsupported model architecture."
    ), message
    assert "\n" not in message and "Traceback" not in message
    assert message in ws.action_bar.pipeline_view.result.text()
    assert "broken:latest" not in fake.models
    win.session.refresh_project()
    qtbot.waitUntil(lambda: {r["id"] for r in ws.records()} >= before)
    assert {r["id"] for r in ws.records() if r["kind"] != "ollama"} == before
