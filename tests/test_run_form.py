"""The model manager's run dialogs are the engine's forms for their job kinds
(studio.run_form.RunFormDialog over ``run.schema``, each derived from the
kind's config dataclass): what the user can set, its choices and defaults,
which fields depend on which, and the refusals, all come from the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QComboBox,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QWidget,
)
from tiny_models import build_tiny_model

from studio.engine_client import EngineClient
from studio.model_manager.dialogs import (
    deploy_dialog,
    export_gguf_dialog,
    one_click_dialog,
)
from studio.run_form import RunFormDialog
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from widgets.picker import SearchPicker

OK = QDialogButtonBox.StandardButton.Ok
CANCEL = QDialogButtonBox.StandardButton.Cancel


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", "qwen2")


@pytest.fixture
def session(qtbot, tmp_path: Path) -> Iterator[Session]:  # type: ignore[no-untyped-def]
    client = EngineClient(auto_restart=False)
    with qtbot.waitSignal(client.hello_received, timeout=20_000):
        client.start()
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    session = Session(client, ProjectState(), settings)
    with qtbot.waitSignal(session.project_opened, timeout=20_000):
        session.open_project(str(tmp_path / "project"), create=True)
    yield session
    client.stop()


def _loaded(qtbot, dialog: RunFormDialog) -> RunFormDialog:  # type: ignore[no-untyped-def]
    qtbot.addWidget(dialog)
    qtbot.waitUntil(dialog.is_loaded, timeout=20_000)
    return dialog


def _line(dialog: RunFormDialog, name: str) -> QLineEdit:
    editor = dialog.form.editor(name)
    line = editor if isinstance(editor, QLineEdit) else editor.property("line_edit")
    assert isinstance(line, QLineEdit), name
    return line


def _choose(qtbot, dialog: RunFormDialog, name: str, choice: str) -> None:  # type: ignore[no-untyped-def]
    """Pick ``choice`` and wait for the engine's form for it."""
    box = dialog.form.editor(name)
    assert isinstance(box, QComboBox)
    box.setCurrentIndex(box.findData(choice))
    qtbot.waitUntil(lambda: dialog.form.editor(name) is not box, timeout=20_000)


def _choices(dialog: RunFormDialog, name: str) -> list[Any]:
    box = dialog.form.editor(name)
    assert isinstance(box, QComboBox)
    return [box.itemData(i) for i in range(box.count())]


def _shown_on_field(dialog: RunFormDialog, sentence: str) -> bool:
    """Whether the form shows ``sentence`` under one of its fields."""
    return any(
        label.isVisible() and label.text() == sentence
        for label in dialog.form.findChildren(QLabel)
    )


def _names(dialog: RunFormDialog) -> set[str]:
    return set(dialog.form.values())


def test_export_gguf_offers_calibration_to_k_quants_only(
    qtbot, session: Session, tiny_model: Path
) -> None:
    model = {"id": "m-1", "name": "Tiny M", "kind": "hf-model", "path": str(tiny_model)}
    dialog = _loaded(qtbot, export_gguf_dialog(session, model))
    assert dialog.buttons.button(OK).text() == "Export"
    # The model it starts from is fixed, not a field; its name is offered.
    assert {"model_dir", "adapter", "parents"}.isdisjoint(_names(dialog))
    assert dialog.form.values()["name"] == "tiny-m"
    assert dialog.form.values()["type"] == "f16"  # the config's default
    calibration: QWidget = dialog.form.editor("calibration_text")
    assert not calibration.isEnabled()  # f16 takes no importance matrix
    _choose(qtbot, dialog, "type", "q4_k_m")
    assert dialog.form.editor("calibration_text").isEnabled()
    _line(dialog, "calibration_text").setText("/data/cal.txt")
    config = dialog.config()
    assert config["calibration_text"] == "/data/cal.txt" and config["type"] == "q4_k_m"
    assert config["model_dir"] == str(tiny_model) and config["parents"] == ["m-1"]


def test_an_adapter_exports_in_the_adapter_types_without_calibration(
    qtbot, session: Session, tmp_path: Path
) -> None:
    model = {"id": "a-1", "name": "a", "kind": "lora-adapter", "path": str(tmp_path)}
    dialog = _loaded(qtbot, export_gguf_dialog(session, model))
    assert _choices(dialog, "type") == ["f32", "f16", "bf16", "q8_0"]
    assert {"calibration_text", "logit_error"}.isdisjoint(_names(dialog))


def test_a_refused_setting_keeps_the_dialog_open_with_the_engine_sentence(
    qtbot, session: Session, tiny_model: Path
) -> None:
    model = {"id": "m-1", "name": "m", "kind": "hf-model", "path": str(tiny_model)}
    dialog = _loaded(qtbot, export_gguf_dialog(session, model))
    dialog.show()
    _line(dialog, "out").setText("model.bin")
    dialog.buttons.button(OK).click()
    qtbot.waitUntil(lambda: dialog.message.isVisible(), timeout=20_000)
    assert dialog.message.text() == "out must be a file name ending in .gguf."
    assert dialog.isVisible() and _shown_on_field(dialog, dialog.message.text())
    with qtbot.waitSignal(dialog.rejected):
        dialog.buttons.button(CANCEL).click()


def test_deploy_and_one_click_refuse_a_bad_ollama_name(
    qtbot, session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")  # the deployment checks only that it exists
    for make, model, ok_text in (
        (deploy_dialog, {"kind": "gguf", "path": str(gguf)}, "Deploy"),
        (one_click_dialog, {"kind": "hf-model", "path": str(tiny_model)}, None),
    ):
        dialog = _loaded(qtbot, make(session, {"id": "m-1", "name": "m", **model}, ""))
        assert dialog.buttons.button(OK).text() == (ok_text or "Export and deploy")
        assert dialog.form.values()["host"] == "http://127.0.0.1:11434"
        dialog.show()
        _line(dialog, "name").setText("bad name!")
        dialog.buttons.button(OK).click()
        qtbot.waitUntil(lambda d=dialog: d.message.isVisible(), timeout=20_000)
        assert "not a valid Ollama model name" in dialog.message.text()
        assert _shown_on_field(dialog, dialog.message.text()) and dialog.isVisible()
        assert not dialog.started_run_id


def test_one_click_calibrates_exports_of_k_quants_and_deploys_a_gguf_as_it_is(
    qtbot, session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    model = {"id": "m-1", "name": "m", "kind": "hf-merged", "path": str(tiny_model)}
    dialog = _loaded(qtbot, one_click_dialog(session, model, ""))
    assert dialog.form.values()["type"] == "q4_k_m"  # the engine's default
    assert dialog.form.editor("calibration_text").isEnabled()
    for other in ("q8_0", "ollama-q4_k_m"):
        _choose(qtbot, dialog, "type", other)
        assert not dialog.form.editor("calibration_text").isEnabled(), other
    gguf = {"id": "g-1", "name": "g", "kind": "gguf", "path": str(tmp_path / "g.gguf")}
    plain = _loaded(qtbot, one_click_dialog(session, gguf, ""))
    assert "calibration_text" not in _names(plain)
    assert plain.config()["model"] == str(tmp_path / "g.gguf")


@pytest.mark.slow
def test_new_run_fine_tunes_a_language_model_on_an_imported_dataset(  # type: ignore[no-untyped-def]
    qtbot, session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    """Training -> New run -> "Fine-tune a language model": llm.train's form
    from the engine (no RL fields, the data chosen among the project's
    datasets, or a file imported on the way), a 2-step SFT run on a file
    imported first, listed and completed.
    With ``RLSTUDIO_SCREENSHOTS=DIR`` the filled dialog is saved as
    ``DIR/new-run-language-model.png`` (docs/screenshots' copy was made so)."""
    import json
    import os

    from models_workspace_support import fill_run_form, submit_run_form

    from engine.llm.data_import import import_dataset, validate_import
    from studio.training.run_dialog import LLM_KIND, RunDialog
    from studio.training.workspace import TrainingWorkspace

    source = tmp_path / "chats.jsonl"
    rows = [
        [
            {"role": "user", "content": f"Where is PROJ-{i}?"},
            {"role": "assistant", "content": f"PROJ-{i} is done."},
        ]
        for i in range(8)
    ]
    source.write_text("".join(json.dumps({"messages": m}) + "\n" for m in rows))
    import_dataset(validate_import({"source": str(source)}), Path(session.state.path))
    more = tmp_path / "more.jsonl"
    more.write_text(source.read_text())
    ws = TrainingWorkspace(session)
    qtbot.addWidget(ws)
    dialog = ws.open_run_dialog()  # the workspace's child, deleted on close
    qtbot.waitUntil(dialog.is_loaded, timeout=20_000)
    assert isinstance(dialog, RunDialog) and "algo" in _names(dialog)
    box = dialog.kind_box
    box.setCurrentIndex(box.findData(LLM_KIND))
    box.activated.emit(box.currentIndex())
    qtbot.waitUntil(lambda: dialog.is_loaded() and "lora_rank" in _names(dialog))
    names = _names(dialog)
    assert {"method", "model", "max_steps", "learning_rate", "max_length"} <= names
    assert not names & {"algo", "env", "dataset"}
    assert dialog.windowTitle() == "Fine-tune a language model"
    assert dialog.dataset_box.currentText() == "chats"
    dialog.dataset_box.setCurrentText(str(more))  # imported on the way
    fill_run_form(
        qtbot,
        dialog,
        method="sft",
        max_steps="2",
        batch_size="2",
        lora_rank="4",
        max_length="256",
        precision="fp32",
        device="cpu",
        save_steps="0",
    )
    picker = dialog.form.editor("model")
    assert isinstance(picker, SearchPicker)
    picker.pick(str(tiny_model))
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")
    if shots:
        dialog.grab().save(str(Path(shots) / "new-run-language-model.png"))
    run_id = submit_run_form(qtbot, dialog)

    def status() -> str:
        run = session.state.run(run_id)
        return str(run.get("status")) if run else ""

    qtbot.waitUntil(lambda: status() in ("completed", "failed"), timeout=120_000)
    run = session.state.run(run_id)
    assert run is not None and status() == "completed", run
    assert run["kind"] == LLM_KIND
    assert run["config"]["dataset"].endswith("data/datasets/more")
    imports = [r for r in session.state.runs.values() if r["kind"] == "llm.import"]
    assert [r["status"] for r in imports] == ["completed"]
    assert run_id in ws.table_of(run).shown_keys()


def test_a_bad_data_file_for_a_language_model_is_refused_in_one_sentence(  # type: ignore[no-untyped-def]
    qtbot, session: Session, tmp_path: Path
) -> None:
    """The file is checked by the engine's llm.import before any run: the
    dialog stays open saying why, and nothing is imported or trained."""
    from studio.training.run_dialog import LLM_KIND, RunDialog

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no format"}\n')
    dialog = _loaded(qtbot, RunDialog(session, LLM_KIND))
    dialog.show()
    assert "lora_rank" in _names(dialog)
    dialog.dataset_box.setCurrentText(str(bad))
    dialog.buttons.button(OK).click()
    qtbot.waitUntil(dialog.message.isVisible, timeout=20_000)
    assert dialog.message.text().startswith(
        "Row 1 has the columns question, which match no format"
    )
    assert dialog.isVisible() and not session.state.runs
