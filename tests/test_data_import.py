"""Datasets of one's own (issue 30, items 1 and 2): files and dataset folders
of every format into the dataset layout the training methods read, each bad
input refused in one sentence with nothing written, token lengths measured
with a tiny tokenizer, a missing Hub dataset through a local HTTP server,
and ``llm-train --data FILE`` importing a file and training on it."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny_models import TINY_TRAIN, build_tiny_model

from engine.cli import main as engine_main
from engine.errors import EngineError
from engine.jobs.registry import get_kind
from engine.llm.data_import import (
    FORMATS,
    ImportConfig,
    import_dataset,
    preview,
    validate_import,
)
from engine.llm.datasets import COLUMNS, load_split, read_rows
from engine.store.project import Project

ROOT = Path(__file__).resolve().parents[1]


def chat(i: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": "You move Jira issues."},
            {"role": "user", "content": f"Where is PROJ-{i}?"},
            {"role": "assistant", "content": f"PROJ-{i} is In Progress."},
        ]
    }


ROWS: dict[str, list[dict[str, Any]]] = {
    "chat": [chat(i) for i in range(10)],
    "alpaca": [
        {"instruction": f"Close PROJ-{i}", "input": "", "output": "transition_issue"}
        for i in range(10)
    ],
    "prompt_completion": [
        {"prompt": f"Status of PROJ-{i}?", "completion": "Done."} for i in range(10)
    ],
    "preference": [
        {"prompt": f"Close PROJ-{i}", "chosen": "transition_issue", "rejected": "x"}
        for i in range(10)
    ],
    "kto": [
        {"prompt": f"Close PROJ-{i}", "completion": "ok", "label": i % 2 == 0}
        for i in range(10)
    ],
}
METHOD = {"preference": "dpo", "kto": "kto"}


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as the file type ``path``'s suffix names (CSV cells holding
    lists as JSON)."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        cols = list(rows[0])
        lines = [",".join(cols)]
        for r in rows:
            cells = [
                json.dumps(v) if isinstance(v, list) else str(v)
                for v in (r[c] for c in cols)
            ]
            lines.append(",".join('"' + c.replace('"', '""') + '"' for c in cells))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def imported(source: Path | str, project: Path, **config: Any) -> dict[str, Any]:
    cfg = validate_import({"source": str(source), **config})
    return import_dataset(cfg, project)


def nothing_written(project: Path) -> bool:
    folder = project / "data/datasets"
    return not folder.exists() or not any(folder.iterdir())


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_from_each_file_type_reads_as_its_method(
    tmp_path: Path, fmt: str, suffix: str
) -> None:
    source = write(tmp_path / f"data{suffix}", ROWS[fmt])
    summary = imported(source, tmp_path / "project", name="set")
    method = METHOD.get(fmt, "sft")
    assert (summary["format"], summary["method"]) == (fmt, method)
    folder = tmp_path / "project/data/datasets/set"
    assert Path(summary["dataset"]) == folder
    assert sorted(p.name for p in folder.iterdir()) == [
        "dataset.json",
        "stats.json",
        "train.jsonl",
        "train.parquet",
        "validation.jsonl",
        "validation.parquet",
    ]
    train, val = load_split(folder, method)
    assert (len(train), len(val)) == (9, 1)
    assert set(COLUMNS[method]) <= set(train.column_names)
    row = train[0]
    assert row["prompt"][-1]["role"] == "user"
    if method != "dpo":
        assert row["completion"][0]["role"] == "assistant"
    if fmt == "chat":
        assert row["prompt"][0] == {
            "role": "system",
            "content": "You move Jira issues.",
        }


def test_the_split_is_seeded_duplicates_go_and_columns_map(tmp_path: Path) -> None:
    rows = [{"q": f"Status of PROJ-{i}?", "a": "Done."} for i in range(40)]
    source = write(tmp_path / "qa.jsonl", rows + rows[:5])
    mapping = {"columns": "prompt=q, completion=a"}
    first = imported(source, tmp_path / "p1", **mapping)
    again = imported(source, tmp_path / "p2", **mapping)
    other = imported(source, tmp_path / "p3", seed=1, **mapping)
    assert first["stats"]["duplicates"] == 5
    assert (first["stats"]["train"], first["stats"]["validation"]) == (36, 4)

    def val(summary: dict[str, Any]) -> str:
        return (Path(summary["dataset"]) / "validation.jsonl").read_text()

    assert val(first) == val(again) != val(other)


def test_sharegpt_conversations_and_a_folder_of_data_files(tmp_path: Path) -> None:
    turns = [
        {
            "conversations": [
                {"from": "human", "value": f"Hi {i}"},
                {"from": "gpt", "value": "Hello"},
            ]
        }
        for i in range(5)
    ]
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "train.jsonl", turns)
    summary = imported(folder, tmp_path / "p")
    assert (summary["format"], summary["stats"]["rows"]) == ("chat", 5)
    train, _ = load_split(summary["dataset"], "sft")
    assert train[0]["completion"] == [{"role": "assistant", "content": "Hello"}]


def test_grpo_takes_the_prompts(tmp_path: Path) -> None:
    source = write(tmp_path / "chats.jsonl", ROWS["chat"])
    summary = imported(source, tmp_path / "p", method="grpo")
    train, _ = load_split(summary["dataset"], "grpo")
    assert [m["role"] for m in train[0]["prompt"]] == ["system", "user"]


def test_a_dataset_folder_and_a_reimport_replace_whole(tmp_path: Path) -> None:
    from datasets import Dataset

    saved = tmp_path / "saved"
    Dataset.from_list(ROWS["preference"]).save_to_disk(str(saved))
    summary = imported(saved, tmp_path / "p", name="prefs")
    assert summary["method"] == "dpo" and summary["stats"]["rows"] == 10
    imported(
        write(tmp_path / "few.jsonl", ROWS["preference"][:3]),
        tmp_path / "p",
        name="prefs",
    )
    folder = tmp_path / "p/data/datasets"
    assert [p.name for p in folder.iterdir()] == ["prefs"]
    assert len(read_rows(folder / "prefs/train.jsonl")) == 2


BAD: dict[str, tuple[bytes, dict[str, Any], str]] = {
    "empty file": (b"", {}, "bad.jsonl has no rows"),
    "declared format": (
        json.dumps(ROWS["alpaca"][0]).encode() + b"\n",
        {"format": "chat"},
        "The rows are not chat rows: they lack messages and look like alpaca rows",
    ),
    "mixed formats": (
        (json.dumps(chat(1)) + "\n" + json.dumps(ROWS["alpaca"][0]) + "\n").encode(),
        {},
        "Row 2 is in the alpaca format but the rows before it are in the chat format",
    ),
    "missing field": (
        b'{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n',
        {},
        "Row 2 has no completion (prompt_completion rows need prompt, completion)",
    ),
    "chosen is rejected": (
        b'{"prompt": "a", "chosen": "b", "rejected": "c"}\n'
        b'{"prompt": "a", "chosen": "b", "rejected": "b"}\n',
        {},
        "Row 2's chosen and rejected answers are the same",
    ),
    "a 10 MB row": (
        b'{"prompt": "a", "completion": "b"}\n'
        + json.dumps({"prompt": "a", "completion": "x" * 10_000_000}).encode()
        + b"\n",
        {},
        "Row 2 holds 10.0 million characters, over the 1 million a row may hold",
    ),
    "not UTF-8": (
        b'{"prompt": "a", "completion": "b"}\n'
        b'{"prompt": "caf\xe9", "completion": "b"}\n',
        {},
        "bad.jsonl is not UTF-8 text (byte 0xe9 on line 2)",
    ),
    "no format": (b'{"question": "a"}\n', {}, "Row 1 has the columns question"),
    "a bad label": (
        b'{"prompt": "a", "completion": "b", "label": "maybe"}\n',
        {},
        "Row 1's label must be true or false, not 'maybe'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_sentence_and_writes_nothing(
    tmp_path: Path, case: str
) -> None:
    data, config, words = BAD[case]
    source = tmp_path / "bad.jsonl"
    source.write_bytes(data)
    project = tmp_path / "p"
    with pytest.raises(EngineError) as caught:
        # The first rows are checked by validation, the rest by the import.
        imported(source, project, **config)
    text = str(caught.value)
    assert text.startswith(words), text
    assert "\n" not in text and text.endswith(".") and len(text) < 400
    assert nothing_written(project)


def test_a_bad_row_past_the_first_ones_fails_the_job_leaving_nothing(
    tmp_path: Path,
) -> None:
    rows = ROWS["prompt_completion"] * 3 + [{"prompt": "late"}]
    source = write(
        tmp_path / "late.jsonl",
        [
            dict(r, completion=f"{r.get('completion')} {i}") if "completion" in r else r
            for i, r in enumerate(rows)
        ],
    )
    cfg = validate_import({"source": str(source)})  # the first rows are fine
    with pytest.raises(EngineError, match=r"^Row 31 has no completion"):
        import_dataset(cfg, tmp_path / "p")
    assert nothing_written(tmp_path / "p")


def test_preview_maps_the_first_rows_and_lists_problems(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [dict(r) for r in ROWS["preference"]]
    rows[1]["rejected"] = rows[1]["chosen"]
    source = write(tmp_path / "p.jsonl", rows + [{"broken": 1}] * 1000)
    shown = preview(str(source), rows=3)
    assert (shown["format"], shown["method"]) == ("preference", "dpo")
    assert shown["columns"] == ["prompt", "chosen", "rejected"]
    assert len(shown["rows"]) == 2
    assert shown["problems"] == [
        "Row 2's chosen and rejected answers are the same, so it prefers nothing; "
        "drop the row or fix one answer."
    ]


def test_token_lengths_with_the_base_models_tokenizer(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "base")
    rows = [
        {
            "prompt": f"Close PROJ-{i}" + " and then review it" * 30 * (i % 2),
            "completion": "Done.",
        }
        for i in range(6)
    ]
    source = write(tmp_path / "t.jsonl", rows)
    stats = imported(source, tmp_path / "p", base_model=str(model), max_length=60)[
        "stats"
    ]["tokens"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    expected = [
        len(
            tokenizer(
                tokenizer.apply_chat_template(
                    [
                        {"role": "user", "content": r["prompt"]},
                        {"role": "assistant", "content": r["completion"]},
                    ],
                    tokenize=False,
                ),
                add_special_tokens=False,
            )["input_ids"]
        )
        for r in rows
    ]
    assert min(expected) < 60 < max(expected)
    assert stats["measured_rows"] == 6 and stats["truncated_exact"]
    assert stats["truncated"] == sum(n > 60 for n in expected) == 3
    assert stats["max"] == max(expected)
    assert stats["mean"] == pytest.approx(sum(expected) / 6)


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "RepoNotFound")
        body = b'{"error": "Repository not found"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def hub_404() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_hub_dataset_that_does_not_exist(tmp_path: Path, hub_404: str) -> None:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub_404,
        "HF_HUB_OFFLINE": "0",
        "HF_HOME": str(tmp_path / "hf"),
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "engine", "data", "import", "nobody/nothing"),
            *("--project", str(tmp_path / "p")),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"rl-studio-engine data: The Hub dataset nobody/nothing was not found at "
        f"{hub_404}; check the id (org/name), or HF_TOKEN for a private one."
    )
    assert not (tmp_path / "p/data/datasets/nothing").exists()


def test_the_import_job_kind_declares_its_settings_once() -> None:
    kind = get_kind("llm.import")
    assert kind.config is ImportConfig and kind.group == "data"
    form = {f["name"] for f in kind.run_form({})}
    assert {"source", "format", "columns", "base_model", "max_length"} <= form


@pytest.mark.slow
def test_llm_train_imports_a_file_and_fine_tunes_on_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One tiny SFT step on an imported CSV: an import run, a training run
    scoring the validation split, the adapter registered."""
    model = build_tiny_model(tmp_path / "base")
    source = write(tmp_path / "chats.csv", [chat(i) for i in range(12)])
    project = tmp_path / "project"
    sets = [
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in {**TINY_TRAIN, "eval_every_steps": 1}.items()
    ]
    code = engine_main(
        ["llm-train", "--data", str(source), "--base", str(model), "--method", "sft"]
        + ["--project", str(project)]
        + [a for s in sets for a in ("--set", s)]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["metrics"]["global_step"] == 1 and "eval_loss" in summary["metrics"]
    opened = Project.open(project)
    try:
        runs = {r.kind: r for r in opened.list_runs()}
        assert runs["llm.import"].status == runs["llm.train"].status == "completed"
        assert runs["llm.train"].config["dataset"] == str(
            project / "data/datasets/chats"
        )
        assert summary["registered_models"]
    finally:
        opened.close()
    assert "Tokens per row (base)" in out.err


def test_grpo_on_imported_prompts_refuses_env_rewards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The prompts have no env: the default rewards (env_reward, format)
    would score every answer alike, so the run is refused before it starts."""
    model = build_tiny_model(tmp_path / "base")
    source = write(tmp_path / "prompts.jsonl", ROWS["alpaca"])
    code = engine_main(
        [
            *("llm-train", "--data", str(source), "--base", str(model)),
            *("--method", "grpo", "--project", str(tmp_path / "project")),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith(
        "rl-studio-engine llm-train: The prompts of prompts have no env, so the "
        "reward(s) env_reward cannot score answers; give others with --set rewards="
    )


def run_flow(project: Path, run_id: str, doc: Any) -> dict[str, Any]:
    """``doc`` run in this process as the flow "data", as the engine runs it."""
    import io

    from engine.jobs.context import JobContext
    from engine.nodes import executor

    run_dir = project / "runs" / run_id
    run_dir.mkdir(parents=True)
    ctx = JobContext(run_id, run_dir, "flow.run", {}, events=io.StringIO())
    try:
        return executor.run_flow(ctx, doc, flow_name="data")
    finally:
        ctx.close()


@pytest.mark.slow
def test_a_dataset_source_node_feeds_fine_tune_and_reruns_on_an_edit(
    tmp_path: Path,
) -> None:
    """Flow: Dataset source (a JSONL chat file, relative to the project) ->
    Fine-tune (SFT, 2 steps) registers an adapter; editing the file runs the
    source again saying why; a bad file fails the node in one sentence."""
    from engine import flow
    from engine.llm.flow_nodes import TRAIN_PARAMS

    project = tmp_path / "project"
    Project.open(project, create=True).close()
    write(project / "chats.jsonl", [chat(i) for i in range(12)])
    model = build_tiny_model(tmp_path / "base")
    own = {k: v for k, v in TINY_TRAIN.items() if k in TRAIN_PARAMS}
    other = {k: v for k, v in TINY_TRAIN.items() if k not in own and k != "max_steps"}
    source = flow.Node("data", "llm.import", {"source": "chats.jsonl"})
    doc = flow.FlowDocument(
        name="data",
        nodes=[
            source,
            flow.Node("base", "llm.base_model", {"model": str(model)}),
            flow.Node(
                "tune",
                "llm.train",
                {**own, "max_steps": 2, "settings": json.dumps(other)},
            ),
        ],
        links=[
            flow.Link("base", "model", "tune", "model"),
            flow.Link("data", "dataset", "tune", "dataset"),
        ],
    )
    first = run_flow(project, "r1", doc)
    assert first["status"] == "completed", first.get("reason")
    data = first["nodes"]["data"]["outputs"]["dataset"]
    assert data["method"] == "sft" and data["stats"]["train"] == 11
    assert Path(data["path"]).parent == project / "data/datasets"
    adapter = first["nodes"]["tune"]["outputs"]["adapter"]
    assert adapter["metrics"]["global_step"] == 2 and adapter["method"] == "sft"
    assert [m["kind"] for m in first["models"]] == ["lora-adapter"]

    alone = flow.FlowDocument(name="data", nodes=[source], links=[])
    assert run_flow(project, "r2", alone)["nodes"]["data"]["state"] == "cached"
    write(project / "chats.jsonl", [chat(i) for i in range(14)])
    edited = run_flow(project, "r3", alone)["nodes"]["data"]
    assert edited["state"] == "done"
    assert edited["message"].endswith("(ran again: source file changed).")
    assert edited["outputs"]["dataset"]["stats"]["train"] > 11

    (project / "chats.jsonl").write_text('{"question": "no format"}\n')
    failed = run_flow(project, "r4", alone)
    message = failed["nodes"]["data"]["message"]
    assert failed["status"] == "failed" and failed["failed"] == ["data"]
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message
    assert message.startswith("Row 1 has the columns question, which match no format")
