"""Model manager pieces without the engine: SB3 zips read without torch,
lineage chains, Ollama records, the trace viewer, the comparison chart and
the frame viewer."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from models_workspace_support import (
    REPORT,
    ROOT,
    fake_entry,
    make_ppo_zip,
    write_trace_file,
)

from studio.model_manager.eval_report import ComparisonReport
from studio.model_manager.trace_viewer import TraceViewer
from studio.state.model_catalog import (
    evaluation_reports,
    lineage_chain,
    model_record,
    ollama_record,
    on_server,
    table_records,
)
from studio.state.sb3_zip import Sb3ZipError, read_sb3_zip
from studio.state.traces import ReportError, comparison_from_report
from widgets.frame_viewer import FrameViewer


@pytest.fixture(scope="module")
def ppo_zip(tmp_path_factory) -> Path:
    return make_ppo_zip(tmp_path_factory.mktemp("ppo") / "ppo.zip")


def test_sb3_zip_is_read_without_importing_torch(ppo_zip: Path) -> None:
    code = (
        "import sys, json\n"
        "from studio.state.sb3_zip import read_sb3_zip\n"
        "info = read_sb3_zip(sys.argv[1])\n"
        "heavy = [m for m in ('torch', 'stable_baselines3', 'gymnasium') "
        "if m in sys.modules]\n"
        "print(json.dumps({'info': info.to_dict(), 'heavy': heavy}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ppo_zip)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result = json.loads(out.stdout)
    assert result["heavy"] == []
    info = result["info"]
    assert info["algo"] == "PPO"
    assert info["policy_class"] == "ActorCriticPolicy"
    assert info["num_timesteps"] == 64
    assert info["observation_space"] == "Box((4,), float32)"
    assert info["action_space"] == "Discrete(2)"
    assert info["hyperparameters"]["n_steps"] == 64
    assert info["sb3_version"].startswith("2.")


def test_sb3_zip_details_fill_the_table_record(ppo_zip: Path) -> None:
    record = model_record(
        {"id": "m-1", "name": "p", "kind": "sb3-policy", "path": str(ppo_zip)}
    )
    assert record["algo"] == "PPO" and record["sb3"]["num_timesteps"] == 64


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not a readable zip file"),
        ({"other": b"x"}, "has no 'data' entry"),
        ({"data": b"{nope"}, "is not JSON"),
    ],
)
def test_bad_sb3_zips_give_one_sentence(
    tmp_path: Path, content: dict | None, message: str
) -> None:
    path = tmp_path / "bad.zip"
    if content is None:
        path.write_bytes(b"not a zip")
    else:
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in content.items():
                zf.writestr(name, data)
    with pytest.raises(Sb3ZipError, match=message):
        read_sb3_zip(path)
    record = model_record(
        {"id": "m", "name": "b", "kind": "sb3-policy", "path": str(path)}
    )
    assert message in record["sb3_error"]


def _lineage_fixture() -> tuple[list[dict], dict[str, dict], list[list[str]]]:
    models = [
        {"id": "m-a", "name": "adapter", "kind": "lora-adapter",
         "path": "/p/models/m-a/adapter", "env": ""},
        {"id": "m-m", "name": "merged", "kind": "hf-merged",
         "path": "/p/models/m-m/merged", "env": ""},
        {"id": "m-g", "name": "model-f16", "kind": "gguf",
         "path": "/p/models/m-g/model-f16.gguf", "env": ""},
    ]  # fmt: skip
    runs = {
        "r-train": {"id": "r-train", "name": "GRPO", "kind": "llm.train",
                    "config": {"env": "envs/jira.env.json"}},
        "r-merge": {"id": "r-merge", "name": "Merge", "kind": "llm.merge",
                    "config": {"adapter": "/p/models/m-a/adapter"},
                    "summary": {"registered_models": ["m-m"]}},
        "r-gguf": {"id": "r-gguf", "name": "GGUF", "kind": "export.gguf",
                   "config": {"parents": ["m-m"]},
                   "summary": {"registered_models": ["m-g"]}},
        "r-deploy": {"id": "r-deploy", "name": "Deploy", "kind": "deploy.ollama",
                     "status": "completed",
                     "config": {"parents": ["m-g"], "name": "jira-agent"},
                     "summary": {"deploy": {"deployed": True}}},
    }  # fmt: skip
    links = [
        ["/base/qwen", "m-a", "derived"],
        ["r-train", "m-a", "trained"],
        ["/p/models/m-a/adapter", "m-m", "derived"],
        ["r-merge", "m-m", "trained"],
        ["m-m", "m-g", "derived"],
        ["r-gguf", "m-g", "trained"],
    ]
    return models, runs, links


def test_lineage_chain_runs_from_env_to_the_ollama_name() -> None:
    models, runs, links = _lineage_fixture()
    for start in ("m-a", "m-m", "m-g"):
        chain = lineage_chain(start, links, models, runs)
        assert [n.title for n in chain] == [
            "envs/jira.env.json",
            "GRPO",
            "adapter",
            "merged",
            "model-f16",
            "jira-agent",
        ], start
        assert [n.key for n in chain if n.current] == [start]
    assert lineage_chain("m-unknown", links, models, runs) == []


def test_lineage_chain_of_a_policy_starts_at_its_env() -> None:
    models = [{"id": "m-p", "name": "PPO", "kind": "sb3-policy", "path": "/x.zip",
               "env": "CartPole-v1"}]  # fmt: skip
    runs = {"r1": {"id": "r1", "name": "train", "kind": "rl.train", "config": {}}}
    chain = lineage_chain("m-p", [["r1", "m-p", "trained"]], models, runs)
    assert [(n.kind, n.title) for n in chain] == [
        ("env", "CartPole-v1"),
        ("run", "train"),
        ("sb3-policy", "PPO"),
    ]


def test_ollama_records() -> None:
    record = ollama_record(fake_entry("jira-agent:latest"), "http://h:1")
    assert record["id"] == "ollama:jira-agent:latest" and record["kind"] == "ollama"
    assert record["base"] == "qwen2 494M Q8_0" and record["size_bytes"] == 397_000_000
    assert record["created"] > 1.7e9


def test_a_registered_deployment_and_its_server_entry_are_one_row() -> None:
    """The server's entry of a deployment the project registered (same name,
    ``:latest`` implied, same server however spelled) is merged into the
    project's row; a registered model gone from the server that answered is
    marked; entries the project did not register stay server rows."""

    def deployed(mid: str, name: str, host: str) -> dict:
        return {"id": mid, "name": name, "kind": "ollama", "path": "/p/x.json",
                "metrics": {"ollama_model": name, "host": host}}  # fmt: skip

    models = [
        deployed("m-here", "jira-agent", "http://h:1"),
        deployed("m-gone", "old-agent", "http://h:1"),
        deployed("m-other", "far-agent", "http://h:2"),
        {"id": "m-g", "name": "jira-f16", "kind": "gguf", "path": "/p/m.gguf"},
    ]
    server = [
        ollama_record(fake_entry("jira-agent:latest", size=123), "http://h:1"),
        ollama_record(fake_entry("other:7b"), "http://h:1"),
    ]
    rows = {r["id"]: r for r in table_records(models, server, "h:1/")}
    assert list(rows) == ["m-here", "m-gone", "m-other", "m-g", "ollama:other:7b"]
    here = rows["m-here"]
    assert here["server_status"] == "on server" and here["size_bytes"] == 123
    assert here["details"]["family"] == "qwen2" and here["host"] == "http://h:1"
    assert here["name"] == "jira-agent" and not on_server(here)
    assert rows["m-gone"]["server_status"] == "not on server"
    # Deployed to a server that was not asked: unknown, not missing.
    assert "server_status" not in rows["m-other"]
    assert "server_status" not in rows["m-g"] and "host" not in rows["m-g"]
    assert on_server(rows["ollama:other:7b"])
    # No server answered: every registered row, no status; nothing merged.
    rows = {r["id"]: r for r in table_records(models)}
    assert list(rows) == ["m-here", "m-gone", "m-other", "m-g"]
    assert not any(r.get("server_status") for r in rows.values())
    # The same deployment registered twice: both rows are on the server.
    twice = [*models[:1], deployed("m-again", "jira-agent:latest", "http://h:1")]
    rows = {r["id"]: r for r in table_records(twice, server, "http://h:1")}
    assert list(rows) == ["m-here", "m-again", "ollama:other:7b"]
    assert rows["m-again"]["server_status"] == "on server"


def test_report_comparison_and_bad_reports() -> None:
    comp = comparison_from_report(REPORT)
    assert comp.labels == ["before", "after"]
    assert comp.values["after"] == [0.75, 1.2, 0.05]
    with pytest.raises(ReportError, match="not an evaluation report"):
        comparison_from_report({"env": "x"})


def test_comparison_chart_draws_before_and_after_bars(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(REPORT))
    view = ComparisonReport()
    qtbot.addWidget(view)
    assert view.load(path)
    assert view.chart.heights("before") == [0.25, 0.4, 0.3]
    assert view.chart.heights("after") == [0.75, 1.2, 0.05]
    assert "Invalid-action rate" in view.table.text() and "+0.5" in view.table.text()
    assert view.scenario_table.text() == ""  # a report from before scenarios
    scenarios = {
        "after": {"RLHUB-101": {"success_rate": 1.0, "failed_example": None},
                  "RLHUB-102": {"success_rate": 0.5, "failed_example": 3}},
        "random": {"RLHUB-101": {"success_rate": 0.0, "failed_example": 0}},
    }  # fmt: skip
    random = {"success_rate": 0.1, "mean_return": -0.5, "invalid_action_rate": 0}
    results = {**REPORT["results"], "random": random}
    path.write_text(json.dumps({**REPORT, "results": results, "scenarios": scenarios}))
    assert view.load(path)
    assert view.chart.heights("random") == [0.1, -0.5, 0.0]
    text = view.scenario_table.text()
    assert "Success rate by scenario" in text and "RLHUB-102" in text
    assert "50% <small>(fails: ep 3)</small>" in text and "100%</td>" in text
    (tmp_path / "bad.json").write_text("{")
    assert not view.load(tmp_path / "bad.json")
    assert "bad.json is not valid JSON." in view.heading.text()
    assert view.scenario_table.text() == ""


def test_trace_viewer_shows_episodes_steps_and_prompts(qtbot, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_trace_file(project / "data" / "traces" / "collect.jsonl")
    viewer = TraceViewer()
    qtbot.addWidget(viewer)
    viewer.set_project(str(project))
    assert viewer.files.count() == 1
    viewer.files.setCurrentRow(0)
    episodes = viewer.browser.episodes.model.records
    assert [(e["task"], e["outcome"], e["invalid"]) for e in episodes] == [
        ("RLHUB-101", "success", 0),
        ("RLHUB-102", "failed", 1),
    ]
    assert "1 unreadable line(s) skipped" in viewer.browser.info.text()
    viewer.browser.episodes.select_keys(["1"])
    steps = viewer.browser.steps.model.records
    assert [(s["action"], s["valid"], s["reward"]) for s in steps] == [
        ("start", True, 0.5),
        ("(none)", False, -0.5),
    ]
    assert steps[0]["breakdown"] == "status +0.51, step -0.01"
    viewer.browser.steps.select_keys(["1"])
    text = viewer.browser.prompt.toPlainText()
    assert "Status: In Progress." in text and "I would like to dance" in text
    assert "NOT parsed, INVALID" in text


def test_frame_viewer_steps_through_frames(qtbot) -> None:
    frames = np.zeros((5, 12, 16, 3), dtype=np.uint8)
    for i in range(5):
        frames[i, :, :, 0] = 50 * i
    viewer = FrameViewer()
    qtbot.addWidget(viewer)
    viewer.resize(200, 160)
    viewer.set_frames(frames)
    assert viewer.frame_count() == 5 and viewer.counter.text() == "1 / 5"
    with qtbot.waitSignal(viewer.frame_changed) as changed:
        viewer.slider.setValue(3)
    assert changed.args == [3] and viewer.counter.text() == "4 / 5"
    image = viewer.image.pixmap().toImage()
    assert image.pixelColor(image.width() // 2, image.height() // 2).red() == 150
    viewer.play_button.setChecked(True)
    qtbot.waitUntil(lambda: viewer.current() == 0, timeout=3000)  # wrapped around
    viewer.play_button.setChecked(False)
    viewer.set_frames(np.zeros((3, 4)))  # not frames: shown as none
    assert viewer.frame_count() == 0


def test_evaluation_reports_list_jobs_and_flow_evaluate_nodes(tmp_path: Path) -> None:
    """Models → Evaluation report lists llm.evaluate runs and the Evaluate
    nodes of flow runs (also of a flow that failed later), newest first,
    each report once (a later run reusing the node from the cache)."""
    files = {}
    for name in ("job", "flow", "failed_flow"):
        files[name] = tmp_path / name / "report.json"
        files[name].parent.mkdir()
        files[name].write_text("{}")

    def flow_run(run_id: str, created: float, report: Path, status: str) -> dict:
        state = {"state": "done", "outputs": {"report": {"report_file": str(report)}}}
        nodes = {"evaluate": state, "deploy": {"state": "failed", "outputs": {}}}
        summary = {"nodes": nodes}
        return {"id": run_id, "name": f"flow {run_id}", "kind": "flow.run",
                "status": status, "created": created, "summary": summary}  # fmt: skip

    runs = [
        {"id": "j1", "name": "evaluate tuned", "kind": "llm.evaluate",
         "status": "completed", "created": 1.0,
         "summary": {"report": str(files["job"])}},
        {"id": "j2", "name": "stopped", "kind": "llm.evaluate", "status": "stopped",
         "created": 2.0, "summary": {"report": str(files["job"])}},
        flow_run("f1", 3.0, files["flow"], "completed"),
        flow_run("f2", 4.0, files["failed_flow"], "failed"),
        flow_run("f3", 5.0, files["flow"], "completed"),  # cached node
        flow_run("f4", 6.0, tmp_path / "gone.json", "completed"),
    ]  # fmt: skip
    assert evaluation_reports(runs) == [
        ("flow f2 · evaluate", str(files["failed_flow"])),
        ("flow f1 · evaluate", str(files["flow"])),
        ("evaluate tuned", str(files["job"])),
    ]


def test_only_the_latest_ollama_listing_counts() -> None:
    """Two listings in flight (the workspace's first look at the default
    host, then the user's Refresh): an answer to the older one that arrives
    last is dropped, not shown over the newer one."""
    from types import SimpleNamespace

    from PySide6.QtCore import QObject, Signal

    from engine import protocol
    from studio.model_manager.controller import ModelsController

    class Session(QObject):
        run_ended = Signal(str, str, str)

    asked: list[tuple[str, object, object]] = []

    def request(msg, on_reply=None, on_error=None, owner=None) -> str:
        asked.append((msg.host, on_reply, on_error))
        return str(len(asked))

    session = Session()
    session.client = SimpleNamespace(request=request)  # type: ignore[attr-defined]
    controller = ModelsController(session)  # type: ignore[arg-type]
    controller.refresh_ollama("http://127.0.0.1:9")
    controller.refresh_ollama("http://127.0.0.1:11434")
    (_, _, old_error), (_, new_reply, _) = asked
    new_reply({"host": "http://127.0.0.1:11434", "models": [{"name": "a"}]})
    old_error(protocol.Error(message="connection refused"))
    assert controller.ollama_models == [{"name": "a"}]
    assert controller.ollama_error == ""


def test_a_registered_deployment_ends_the_chain_and_is_no_server_record() -> None:
    """A deployment the project registered (kind ``ollama``, its own id) is
    followed in the lineage like other exports: after the GGUF a deploy
    job registered it from, and after each stage of a one-click export;
    chat and delete treat it as the project's model, not the server's."""
    from types import SimpleNamespace

    from PySide6.QtCore import QObject, Signal

    from engine import protocol
    from studio.model_manager.controller import ModelsController
    from studio.state.model_catalog import ollama_ref

    models, runs, links = _lineage_fixture()
    facts = {"ollama_model": "jira-agent", "host": "http://h:1"}
    deployed = {"id": "m-o", "name": "jira-agent", "kind": "ollama",
                "path": "/p/models/m-o/jira-agent-ollama.json", "env": "",
                "source_run": "r-deploy", "metrics": facts}  # fmt: skip
    runs["r-deploy"]["summary"]["registered_models"] = ["m-o"]
    chain = lineage_chain("m-g", links, [*models, deployed], runs)
    assert [(n.key, n.kind) for n in chain[-2:]] == [("m-g", "gguf"), ("m-o", "ollama")]
    # A one-click export from the merged model: its stages in order.
    gguf2 = {**models[2], "id": "m-g2", "source_run": "r-one"}
    one = {**deployed, "id": "m-o2", "source_run": "r-one"}
    runs["r-one"] = {"id": "r-one", "name": "Export to Ollama",
                     "kind": "export.ollama", "status": "completed",
                     "config": {"parents": ["m-x"], "model": "/elsewhere"},
                     "summary": {"registered_models": ["m-g2", "m-o2"]}}  # fmt: skip
    chain = lineage_chain(
        "m-g2", [["m-m", "m-g2", "derived"]], [*models, gguf2, one], runs
    )
    assert [n.key for n in chain[-3:]] == ["m-m", "m-g2", "m-o2"]

    server = ollama_record(fake_entry("jira-agent:latest"), "http://h:2")
    assert on_server(server) and not on_server(deployed)
    assert ollama_ref(server) == ("jira-agent:latest", "http://h:2")
    assert ollama_ref(deployed) == ("jira-agent", "http://h:1")

    class Session(QObject):
        run_ended = Signal(str, str, str)

    asked: list[object] = []
    session = Session()
    session.client = SimpleNamespace(  # type: ignore[attr-defined]
        request=lambda msg, on_reply=None, on_error=None, owner=None: asked.append(msg)
    )
    controller = ModelsController(session)  # type: ignore[arg-type]
    controller.delete_model(deployed)
    controller.delete_model(server)
    assert isinstance(asked[0], protocol.DeleteModel) and asked[0].model_id == "m-o"
    assert isinstance(asked[1], protocol.DeleteOllamaModel)
    assert asked[1].name == "jira-agent:latest"


def test_schedules_read_as_their_settings_not_a_class_repr() -> None:
    """Details showed <class '...LinearSchedule'> for a linear learning rate
    (issue 29, item 5)."""
    from studio.state.sb3_zip import _scalar

    utils = "stable_baselines3.common.utils"
    text = "LinearSchedule(start=0.2, end=0.0, end_fraction=1.0)"
    linear = {
        ":type:": f"<class '{utils}.LinearSchedule'>",
        ":serialized:": "gAWV",
        "start": 0.2,
        "end": 0.0,
        "end_fraction": 1.0,
    }
    assert _scalar(linear) == text
    wrapped = {":type:": f"<class '{utils}.FloatSchedule'>", "value_schedule": text}
    assert _scalar(wrapped) == text
    assert _scalar(0.5) == 0.5


def test_a_play_in_progress_does_not_say_press_play(qtbot) -> None:
    """ "Press Play…" showed while an episode was playing (issue 29, item 5);
    Play's button has the style's icons, not glyphs a font may lack."""
    from studio.model_manager.run_results import PLAY_HINT, PLAYING, RunResultsPane

    pane = RunResultsPane()
    qtbot.addWidget(pane)
    row = {"id": "0", "step": 1, "action": "a", "reward": 0.0}
    row |= {"breakdown": "", "status": "", "observation": ""}
    pane.trace_table.set_records([row])
    pane.show_running("Play", playing=True)
    assert pane.trace_table.model.records == []
    assert pane.trace_table.empty_label.text() == PLAYING
    pane.show_failed("Play", "failed", "no env")
    assert pane.trace_table.empty_label.text() == PLAY_HINT
    button = pane.frames.play_button
    assert not button.icon().isNull() and button.text() == ""
