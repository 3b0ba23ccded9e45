"""Models -> Import dataset… against the real engine: the ``llm.import`` form
with the engine's preview of the first rows (a source whose columns match no
format, then mapped; a bad row said in one sentence), and the import run
followed on the run line until the dataset is in the project.

With ``RLSTUDIO_SCREENSHOTS=DIR`` the dialog showing the mapped preview is
saved as ``DIR/dataset-import-preview.png`` (docs/screenshots' copy was made
so)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from models_workspace_support import fill_run_form, submit_run_form
from studio_harness import build_main_window, start_on_project

from studio.model_manager.dialogs import ImportDatasetDialog
from studio.model_manager.workspace import ModelsWorkspace

PAIRS = [
    {
        "question": f"PROJ-{i} was reviewed and merged. Which tool comes next?",
        "better": f"transition_issue(PROJ-{i}, Done)",
        "worse": "add_comment" if i % 2 else f"search_issues(PROJ-{i})",
    }
    for i in range(1, 13)
]


def write(path: Path, rows: list[dict[str, str]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_import_dataset_previews_the_mapped_rows_then_imports(
    qtbot, tmp_path: Path
) -> None:
    bad = [dict(r) for r in PAIRS]
    bad[2]["worse"] = bad[2]["better"]
    with_bad_row = write(tmp_path / "reviews-draft.jsonl", bad)
    clean = write(tmp_path / "reviews.jsonl", PAIRS)
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    ws = win.workspaces["models"]
    assert isinstance(ws, ModelsWorkspace)
    win.show()
    win.set_workspace("models")
    try:
        ws.action_bar.import_button.click()
        dialog = ws.action_bar.dialogs[-1]
        assert isinstance(dialog, ImportDatasetDialog)
        assert "Give a .jsonl" in dialog.summary.text()
        # The columns match no format: the engine's sentence, no rows.
        fill_run_form(qtbot, dialog, source=with_bad_row)
        qtbot.waitUntil(
            lambda: "match no format" in dialog.summary.text(), timeout=30_000
        )
        assert dialog.preview is None and dialog.table.rowCount() == 0
        # Mapped: preference rows for DPO, the bad row left out and said.
        fill_run_form(
            qtbot, dialog, columns="prompt=question, chosen=better, rejected=worse"
        )
        qtbot.waitUntil(lambda: dialog.preview is not None, timeout=30_000)
        assert "Detected format <b>preference</b>" in dialog.summary.text()
        assert "<b>DPO</b>" in dialog.summary.text()
        headers = [
            dialog.table.horizontalHeaderItem(c).text()
            for c in range(dialog.table.columnCount())
        ]
        assert headers == ["prompt", "chosen", "rejected"]
        assert dialog.table.rowCount() == len(PAIRS) - 1
        assert dialog.table.item(0, 0).text() == f"user: {PAIRS[0]['question']}"
        assert dialog.problems.isVisible()
        assert dialog.problems.text().startswith(
            "Row 3's chosen and rejected answers are the same"
        )
        shots = os.environ.get("RLSTUDIO_SCREENSHOTS")
        if shots:
            dialog.grab().save(str(Path(shots) / "dataset-import-preview.png"))
        # The clean file imports; the run line says what came in.
        fill_run_form(qtbot, dialog, source=clean)
        qtbot.waitUntil(lambda: not dialog.problems.isVisible(), timeout=30_000)
        assert dialog.table.rowCount() == len(PAIRS)
        with qtbot.waitSignal(ws.controller.action_ended, timeout=60_000) as ended:
            submit_run_form(qtbot, dialog)
        assert ended.args[1:3] == ["llm.import", "completed"], ended.args
        folder = tmp_path / "project/data/datasets/reviews"
        assert (folder / "train.jsonl").is_file() and (
            folder / "dataset.json"
        ).is_file()
        assert ws.progress.label.text() == (
            f"Imported 12 preference rows for DPO (11 train, 1 validation) into "
            f"{folder}."
        )
    finally:
        win.session.client.stop()
