"""Labelling traces (issue 17, item 1): the label store, the traces view's
keyboard labelling (undo, crash and restore), and the dataset builder that
uses manual labels first."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.errors import ConfigError
from engine.llm import datasets
from engine.store.labels import (
    DB_FILE,
    EPISODE,
    LabelError,
    LabelStore,
    checked_label,
    ref_of,
    step_key,
)
from studio.model_manager.trace_viewer import TraceViewer
from tests.models_workspace_support import write_trace_file

ROOT = Path(__file__).resolve().parents[1]


def _rows(project: Path) -> list[tuple]:
    """The labels as another process sees them (a fresh connection)."""
    db = sqlite3.connect(project / DB_FILE)
    try:
        return db.execute(
            "SELECT kind, trace, episode, step, value, who FROM labels "
            "ORDER BY kind, episode, step"
        ).fetchall()
    finally:
        db.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    write_trace_file(project / "data" / "traces" / "collect.jsonl")
    return project


def _viewer(qtbot, project: Path) -> TraceViewer:  # type: ignore[no-untyped-def]
    viewer = TraceViewer()
    qtbot.addWidget(viewer)
    viewer.set_project(str(project))
    viewer.files.setCurrentRow(0)
    assert len(viewer.browser.episodes.model.records) == 2
    return viewer


def test_keyboard_labels_are_in_the_database_at_once_and_undo(
    qtbot, project: Path
) -> None:
    viewer = _viewer(qtbot, project)
    viewer.browser.steps.view.setFocus()
    assert viewer.browser.steps.selected_keys() == ["0"]
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_G)
    # committed as the key is pressed: another connection sees it now
    assert [r[:5] for r in _rows(project)] == [("kto", "collect", 0, 0, "good")]
    assert viewer.browser.steps.model.records[0]["label"] == "good"
    assert viewer.browser.steps.selected_keys() == ["1"]  # on to the next step
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_B)
    assert [r[4] for r in _rows(project)] == ["good", "bad"]
    assert viewer.browser.episodes.model.records[0]["label"] == "(2 steps)"
    # relabel, then undo twice: back to good, then to no label on step 1
    viewer.browser.steps.select_keys(["1"])
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_G)
    assert [r[4] for r in _rows(project)] == ["good", "good"]
    qtbot.keyClick(
        viewer.browser.steps.view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier
    )
    assert [r[4] for r in _rows(project)] == ["good", "bad"]
    assert viewer.browser.steps.model.records[1]["label"] == "bad"
    qtbot.keyClick(
        viewer.browser.steps.view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier
    )
    assert [r[4] for r in _rows(project)] == ["good"]
    assert viewer.browser.steps.model.records[1]["label"] == ""
    # the whole episode, on the episode table; X clears it
    viewer.browser.episodes.view.setFocus()
    viewer.browser.episodes.select_keys(["1"])
    qtbot.keyClick(viewer.browser.episodes.view, Qt.Key.Key_B)
    assert ("kto", "collect", 1, EPISODE, "bad") in [r[:5] for r in _rows(project)]
    assert viewer.browser.episodes.model.records[1]["label"] == "bad"
    viewer.browser.episodes.select_keys(["1"])
    qtbot.keyClick(viewer.browser.episodes.view, Qt.Key.Key_X)
    assert len(_rows(project)) == 1
    # the log keeps every change, the undone and cleared ones too
    db = sqlite3.connect(project / DB_FILE)
    actions = [a for (a,) in db.execute("SELECT action FROM label_log ORDER BY id")]
    db.close()
    assert actions == ["set", "set", "set", "undo", "undo", "set", "remove"]


def test_ideal_answer_and_better_of_two(qtbot, project: Path) -> None:
    viewer = _viewer(qtbot, project)
    viewer.edit_answer = lambda text: f"{text} and close"
    viewer.browser.steps.view.setFocus()
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_E)
    assert _rows(project)[0][:5] == ("sft", "collect", 0, 0, "start and close")
    assert "[ideal answer]\nstart and close" in viewer.browser.prompt.toPlainText()
    assert viewer.browser.steps.model.records[0]["label"] == "ideal"
    viewer.edit_answer = lambda text: None  # cancelled: nothing changes
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_E)
    assert len(_rows(project)) == 1
    # compare step 0:1 with 1:1: the latter is better
    viewer.browser.steps.select_keys(["1"])
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_2)
    assert "Pin a step with P first" in viewer.label_status.text()
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_P)
    viewer.browser.episodes.select_keys(["1"])
    viewer.browser.steps.select_keys(["1"])
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_2)
    store = LabelStore(project)
    (pair,) = store.labels(kind="dpo")
    store.close()
    assert (pair.episode, pair.step, pair.other_episode, pair.other_step) == (
        1,
        1,
        0,
        1,
    )
    assert viewer.browser.steps.model.records[1]["label"] == "> 0:1"


def test_a_crashed_session_loses_no_label_and_a_new_one_shows_them(
    qtbot, project: Path
) -> None:
    """A process that sets a label and is killed at once: the label is there
    for the next session, which shows it in the table."""
    code = (
        "import os, signal, sys\n"
        "from engine.store.labels import LabelStore, StepRef\n"
        "s = LabelStore(sys.argv[1], who='ann')\n"
        "s.set('kto', StepRef('collect', 1, 0, sys.argv[2]), 'bad')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    eps = [json.loads(line) for line in (project / "data/traces/collect.jsonl")
           .read_text().splitlines()[:2]]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", code, str(project), step_key(eps[1]["steps"][0])],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL
    assert _rows(project) == [("kto", "collect", 1, 0, "bad", "ann")]
    viewer = _viewer(qtbot, project)
    assert viewer.browser.episodes.model.records[1]["label"] == "(1 steps)"
    viewer.browser.episodes.select_keys(["1"])
    assert viewer.browser.steps.model.records[0]["label"] == "bad"
    # the labelled filter lists only episode 1
    viewer.browser.labelled_filter.setCurrentIndex(1)
    assert [r["id"] for r in viewer.browser.episodes.model.records] == ["1"]
    viewer.browser.labelled_filter.setCurrentIndex(2)
    assert [r["id"] for r in viewer.browser.episodes.model.records] == ["0"]


def test_filters_by_env_model_outcome_and_return(qtbot, project: Path) -> None:
    viewer = _viewer(qtbot, project)
    viewer.browser.outcome_filter.setCurrentText("failed")
    assert [r["id"] for r in viewer.browser.episodes.model.records] == ["1"]
    viewer.browser.outcome_filter.setCurrentIndex(0)
    viewer.browser.min_return.setValue(1.0)
    assert [r["id"] for r in viewer.browser.episodes.model.records] == ["0"]
    viewer.browser.min_return.setValue(viewer.browser.min_return.minimum())
    assert viewer.browser.policy_filter.itemText(1) == "llm:tiny"
    assert viewer.browser.env_filter.itemText(1) == "envs/jira_status_update.env.json"
    viewer.browser.policy_filter.setCurrentIndex(1)
    assert len(viewer.browser.episodes.model.records) == 2


def test_labels_of_deleted_or_rewritten_traces_are_kept_and_reported(
    qtbot, project: Path
) -> None:
    viewer = _viewer(qtbot, project)
    viewer.browser.steps.view.setFocus()
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_G)
    viewer.labels.close()
    trace = project / "data/traces/collect.jsonl"
    # rewritten: the step at 0:0 now holds another completion
    lines = trace.read_text().splitlines()
    ep = json.loads(lines[0])
    ep["steps"][0]["completion"] = "close"
    trace.write_text("\n".join([json.dumps(ep), *lines[1:]]) + "\n")
    viewer = _viewer(qtbot, project)
    assert (
        "1 label(s) point at steps that are gone or changed"
        in viewer.browser.info.text()
    )
    assert viewer.browser.steps.model.records[0]["label"] == "good"  # shown, not used
    viewer.labels.close()
    trace.unlink()
    viewer = TraceViewer()
    qtbot.addWidget(viewer)
    viewer.set_project(str(project))
    assert (
        "1 label(s) belong to trace files that were deleted (collect); they are "
        "kept" in viewer.label_status.text()
    )
    assert len(_rows(project)) == 1  # never lost


def test_label_store_bad_input_one_sentence_each(tmp_path: Path) -> None:
    store = LabelStore(tmp_path)
    ref = ref_of("t", [{"steps": [{"completion": "a"}]}], 0, 0)
    store.set("kto", ref, "good")
    cases = {
        "A label must be a JSON object.": [],
        "The label lacks trace, episode, step, value.": {"kind": "kto"},
        "A label's kind must be one of kto, dpo, sft, not 'x'.": {
            "kind": "x", "trace": "t", "episode": 0, "step": 0, "value": "good"},
        "A KTO label's value must be good or bad, not 'meh'.": {
            "kind": "kto", "trace": "t", "episode": 0, "step": 0, "value": "meh"},
        "A label's episode must be a whole number, not '0'.": {
            "kind": "kto", "trace": "t", "episode": "0", "step": 0, "value": "good"},
        "A DPO label must name the other (worse) step.": {
            "kind": "dpo", "trace": "t", "episode": 0, "step": 0, "value": "better"},
        "A SFT label is about a step, not a whole episode.": {
            "kind": "sft", "trace": "t", "episode": 0, "step": -1, "value": "x"},
    }  # fmt: skip
    for sentence, data in cases.items():
        with pytest.raises(LabelError) as err:
            checked_label(data)
        assert str(err.value) == sentence
    with pytest.raises(LabelError, match="must be good or bad"):
        store.set("kto", ref, "great")
    # a malformed label file: each bad line one sentence, good lines stored
    good = {"kind": "kto", "trace": "t", "episode": 0, "step": 0, "value": "bad",
            "key": ref.key}  # fmt: skip
    file = tmp_path / "labels.jsonl"
    file.write_text(f"{{oops\n{json.dumps(good)}\n[1]\n")
    stored, problems = store.import_file(file)
    assert stored == 1
    assert problems == [
        "Line 1 of labels.jsonl was skipped: it is not valid JSON.",
        "Line 3 of labels.jsonl was skipped: A label must be a JSON object.",
    ]
    assert [lb.value for lb in store.labels()] == ["bad"]
    store.undo()  # the import as one step: the earlier label is back
    assert [lb.value for lb in store.labels()] == ["good"]
    with pytest.raises(LabelError, match=r"Cannot read nope\.jsonl"):
        store.import_file(tmp_path / "nope.jsonl")
    store.close()


def test_dataset_builder_uses_manual_labels_first(
    project: Path, tmp_path: Path
) -> None:
    trace = project / "data/traces/collect.jsonl"
    eps = [json.loads(line) for line in trace.read_text().splitlines()[:2]]
    # without labels: KTO labels come from the env reward alone
    stats = datasets.build_dataset(
        [trace], "kto", tmp_path / "plain", seed=0, kto_max_ratio=0, project_dir=project
    )
    assert (stats["manual_rows"], stats["env_rows"]) == (0, 4)
    store = LabelStore(project)
    # the env says episode 0's step 1 is good (success); the person says bad
    store.set("kto", ref_of("collect", eps, 0, 1), "bad")
    store.set("kto", ref_of("collect", eps, 1, EPISODE), "good")
    store.set("sft", ref_of("collect", eps, 1, 1), "close")
    store.set("dpo", ref_of("collect", eps, 0, 0), "better",
              other=ref_of("collect", eps, 1, 0))  # fmt: skip
    store.close()
    stats = datasets.build_dataset(
        [trace], "kto", tmp_path / "kto", seed=0, kto_max_ratio=0, project_dir=project
    )
    assert (stats["manual_rows"], stats["env_rows"]) == (3, 1)
    rows = datasets.read_rows(tmp_path / "kto" / "train.jsonl") + datasets.read_rows(
        tmp_path / "kto" / "validation.jsonl"
    )
    bad = [r for r in rows if r["label"] is False]
    assert [r["completion"][0]["content"] for r in bad] == ["I would like to dance"]
    assert bad[0]["prompt"][-1]["content"] == "Status: In Progress."
    labels = sorted(r["label"] for r in rows)
    assert labels == [False, True, True, True]  # 0:1 bad, 1:0 + 1:1 good, env 0:0 good
    sft = datasets.build_dataset(
        [trace], "sft", tmp_path / "sft", seed=0, project_dir=project
    )
    # the ideal answer, the good-labelled 1:0, and env 0:0 (0:1 is labelled bad)
    assert (sft["manual_rows"], sft["env_rows"]) == (2, 1)
    dpo = datasets.build_dataset(
        [trace], "dpo", tmp_path / "dpo", seed=0, project_dir=project
    )
    assert dpo["manual_rows"] == 2  # the pair, and ideal answer over the recording
    # a rewritten trace: its labels are orphans, reported, the env labels all
    ep = eps[0]
    ep["steps"][1]["completion"] = "close"
    trace.write_text("\n".join(json.dumps(e) for e in [ep, eps[1]]) + "\n")
    stats = datasets.build_dataset(
        [trace], "kto", tmp_path / "kto2", seed=0, kto_max_ratio=0, project_dir=project
    )
    assert stats["orphan_labels"] == 1  # 0:1 changed; the rest still match
    assert (stats["manual_rows"], stats["env_rows"]) == (2, 2)
    with pytest.raises(ConfigError, match="does not exist"):
        datasets.build_dataset(
            [tmp_path / "gone.jsonl"], "kto", tmp_path / "x", project_dir=project
        )


def test_trace_summaries_without_parsing_steps_match_a_full_parse(
    tmp_path: Path,
) -> None:
    """Rollout lines (``", "`` separators) and recorded trajectories (compact,
    sometimes without a return) list the same as when parsed in full."""
    from studio.state.traces import episode_row, load_trace_file

    steps = [{"t": t, "completion": "]}", "valid": t != 1, "reward": 0.5}
             for t in range(3)]  # fmt: skip
    eps = [
        {"episode": 0, "env": "a", "steps": steps, "return": 1.5, "length": 3,
         "success": True, "extra": [{"k": 1}]},
        {"episode": 1, "env": "b", "steps": steps, "return": None, "length": 3,
         "success": False},
        {"episode": 2, "env": "c", "steps": [], "return": 0.0, "length": 0},
    ]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps(eps[0]) + "\n\n" + json.dumps(eps[1], separators=(",", ":"))
        + "\n" + json.dumps(eps[2]) + "\n{torn"
    )  # fmt: skip
    trace = load_trace_file(path)
    assert trace.bad_lines == 1 and len(trace.episodes) == 3
    for i, ep in enumerate(eps):
        quick = episode_row(trace.summaries[i], i)
        assert quick == episode_row(ep, i)
        assert trace.episodes[i]["steps"] == ep["steps"]
    assert [episode_row(s, i)["invalid"] for i, s in enumerate(trace.summaries)] == [
        1, 1, 0]  # fmt: skip


def test_label_files_export_and_import_through_the_view(qtbot, project: Path) -> None:
    """Export, then import a file with a bad line: the good labels come in,
    the bad line is one sentence, and no stored label is lost."""
    viewer = _viewer(qtbot, project)
    viewer.browser.steps.view.setFocus()
    qtbot.keyClick(viewer.browser.steps.view, Qt.Key.Key_G)
    out = project / "labels.jsonl"
    viewer.choose_file = lambda save: str(out)
    viewer.export_button.click()
    assert "Exported 1 label(s) to labels.jsonl." in viewer.label_status.text()
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["kind"], row["episode"], row["step"], row["value"]) == (
        "kto", 0, 0, "good")  # fmt: skip
    row.update(episode=1, value="bad")
    bad = project / "more.jsonl"
    bad.write_text(json.dumps(row) + '\n{"kind": "kto"}\n')
    viewer.choose_file = lambda save: str(bad)
    viewer.import_button.click()
    assert (
        "Imported 1 label(s) from more.jsonl. Line 2 of more.jsonl was skipped: "
        "The label lacks trace, episode, step, value." in viewer.label_status.text()
    )
    assert [r[:5] for r in _rows(project)] == [
        ("kto", "collect", 0, 0, "good"), ("kto", "collect", 1, 0, "bad")]  # fmt: skip
    viewer.choose_file = lambda save: str(project / "missing.jsonl")
    viewer.import_button.click()
    assert "Cannot read missing.jsonl" in viewer.label_status.text()
    assert len(_rows(project)) == 2
