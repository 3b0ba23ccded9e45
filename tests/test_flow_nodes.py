"""engine.nodes: the registry and catalog, flow validation, the executor
(with quick test node types, in-process) and the flow requests and the
``flow.run`` job through a real engine subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_harness import EngineProcess

from engine import flow, protocol
from engine.errors import ConfigError
from engine.flow import FlowDocument, Link, Node, ParamSpec, PortSpec
from engine.jobs.context import JobContext
from engine.nodes import (
    NodeResult,
    NodeRun,
    catalog,
    executor,
    node_type,
    node_types,
    registry,
    specs,
    validate_flow,
)
from engine.settings import as_dict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples" / "flows"


# ----------------------------------------------------------------- catalog


def test_catalog_is_generated_from_the_registry() -> None:
    types = node_types()
    items = catalog()
    assert {"env.environment", "rl.train", "rl.evaluate", "models.register"} <= set(
        types
    )
    assert [d["type"] for d in items] == sorted(
        types, key=lambda t: (types[t].spec.category, types[t].spec.title)
    )
    for d in items:
        t = types[d["type"]]
        assert d == {**t.spec.to_dict(), "cacheable": t.cacheable}
        assert flow.NodeTypeSpec.from_dict(d) == t.spec  # the GUI's view is exact
        assert d["title"] and d["category"] and d["description"]
        assert d["inputs"] or d["outputs"], d["type"]
        assert d["params"], d["type"]
        for p in d["params"]:
            assert p["help"] and p["label"] and "default" in p
            assert flow.check_param(flow.ParamSpec.from_dict(p), p["default"]) is None
        for port in (*d["inputs"], *d["outputs"]):
            assert port["type"] in flow.PORT_TYPES
    assert json.loads(json.dumps(items)) == items
    assert specs()["rl.train"].param("algo").choices[0] == "auto"


def test_catalog_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys; import engine.nodes as n; n.catalog(); "
        "print([m for m in ('torch', 'stable_baselines3', 'gymnasium', 'transformers',"
        " 'trl', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_node_modules_are_discovered_by_name() -> None:
    mods = list(registry._node_modules())
    assert {
        "engine.nodes.env_nodes",
        "engine.nodes.rl_nodes",
        "engine.nodes.model_nodes",
    } <= set(mods)
    assert all(m.endswith(("_nodes", ".flow_nodes")) for m in mods)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"outputs": (PortSpec("x", "banana"),)}, "unknown type 'banana'"),
        (
            {"params": (ParamSpec("n", "int", 0, help="n", min=1),)},
            "default of 'n' is invalid",
        ),
        ({"params": (ParamSpec("n", "int", 1),)}, "has no help text"),
        ({"params": (ParamSpec("c", "choice", "a", help="c"),)}, "has no choices"),
    ],
)
def test_bad_declarations_are_refused(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        node_type("test.bad", title="Bad", category="Test", **kwargs)(lambda n: {})
    assert "test.bad" not in registry._TYPES


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.glob("*.flow.json")), ids=lambda p: p.name
)
def test_example_flows_validate_and_read_like_text(path: Path) -> None:
    """Every link leads right, or down to a later row (a long flow wraps
    into rows so that it fits a 1,024 px window at a readable zoom)."""
    assert validate_flow(path=str(path)) == {}
    doc = flow.load(path)
    assert doc.name and doc.description
    at = {n.id: (n.x, n.y) for n in doc.nodes}
    for lk in doc.links:
        (x0, y0), (x1, y1) = at[lk.from_node], at[lk.to_node]
        assert x0 < x1 or y1 > y0, f"{lk.from_node} -> {lk.to_node} leads back"
    # No link runs through a node: the straight line between its two
    # ports misses every other node's box (as the canvas draws it, with a
    # subtitle line).
    boxes, ports = _canvas_geometry(doc)
    for lk in doc.links:
        a = ports[lk.from_node, lk.from_port]
        b = ports[lk.to_node, lk.to_port]
        through = [
            nid
            for nid, box in boxes.items()
            if nid not in (lk.from_node, lk.to_node) and _crosses(a, b, box)
        ]
        assert not through, f"{lk.from_node} -> {lk.to_node} crosses {through}"


def _canvas_geometry(
    doc: FlowDocument,
) -> tuple[dict[str, tuple[float, float, float, float]], dict[tuple, tuple]]:
    """Each node's box (left, top, right, bottom) and each port's point, laid
    out as widgets.node_graph.NodeItem lays them out."""
    from widgets.node_graph import HEADER_HEIGHT, NODE_WIDTH, PORT_ROW

    boxes: dict[str, tuple[float, float, float, float]] = {}
    ports: dict[tuple, tuple] = {}
    for n in doc.nodes:
        spec = registry.get(n.type).spec
        rows = max(len(spec.inputs), len(spec.outputs), 1)
        height = HEADER_HEIGHT + rows * PORT_ROW + 12 + 16
        boxes[n.id] = (n.x, n.y, n.x + NODE_WIDTH, n.y + height)
        for x, side in ((n.x, spec.inputs), (n.x + NODE_WIDTH, spec.outputs)):
            for i, port in enumerate(side):
                ports[n.id, port.name] = (
                    x,
                    n.y + HEADER_HEIGHT + PORT_ROW * (i + 0.5) + 6,
                )
    return boxes, ports


def _crosses(
    a: tuple[float, float],
    b: tuple[float, float],
    box: tuple[float, float, float, float],
) -> bool:
    """Whether the segment a-b passes through the inside of ``box``
    (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = a, b
    dx, dy = x1 - x0, y1 - y0
    left, top, right, bottom = box
    enter, leave = 0.0, 1.0
    for p, q in (
        (-dx, x0 - left),
        (dx, right - x0),
        (-dy, y0 - top),
        (dy, bottom - y0),
    ):
        if p == 0:
            if q <= 0:
                return False
        elif p < 0:
            enter = max(enter, q / p)
        else:
            leave = min(leave, q / p)
    return enter < leave


def test_the_examples_are_the_ones_promised() -> None:
    cart = flow.load(EXAMPLES / "cartpole_ppo.flow.json")
    assert [n.type for n in cart.nodes] == [
        "env.environment",
        "rl.train",
        "rl.evaluate",
        "models.register",
    ]
    assert cart.nodes[0].params["env"] == "CartPole-v1"
    assert cart.nodes[1].params["algo"] == "PPO"
    jira = flow.load(EXAMPLES / "jira_maskable_ppo.flow.json")
    assert jira.nodes[0].params["env"] == "rlstudio/jira_issue_resolution-v0"
    assert jira.nodes[1].params["algo"] == "MaskablePPO"


def test_validate_flow_adds_each_node_types_own_checks() -> None:
    doc = flow.load(EXAMPLES / "cartpole_ppo.flow.json")
    doc.node("train").params["settings"] = "{n_steps: 3"
    doc.node("env").params["kwargs"] = "[1]"
    doc.nodes.append(Node("x", "llm.teleport"))
    errors = validate_flow(document=doc.to_dict())
    assert errors["train"] == [
        "settings is not valid JSON (Expecting property name enclosed in "
        "double quotes)."
    ]
    assert errors["env"] == ['kwargs must be a JSON object like {"key": 1}.']
    assert "Unknown node type 'llm.teleport'" in errors["x"][0]


def test_flow_run_config_is_validated_and_normalized(tmp_path: Path) -> None:
    path = EXAMPLES / "cartpole_ppo.flow.json"
    cfg = executor.validate({"flow_path": str(path), "overrides": {"train.seed": 7}})
    assert isinstance(cfg, executor.FlowRunConfig)
    assert cfg.flow_name == "cartpole_ppo" and cfg.only_stale is True
    assert cfg.document is not None
    assert FlowDocument.from_dict(cfg.document).node("train").params["seed"] == 7
    assert executor.validate(as_dict(cfg)) == cfg  # idempotent

    def field_of(config: dict[str, Any]) -> tuple[str, str]:
        with pytest.raises(ConfigError) as info:
            executor.validate(config)
        return info.value.field, str(info.value)

    assert field_of({}) == (
        "flow_path",
        "Give the flow to run (flow_path or document).",
    )
    assert field_of({"flow_path": str(path), "speed": 2}) == (
        "speed",
        "Unknown setting 'speed' for a flow run.",
    )
    assert field_of({"flow_path": str(path), "only_stale": "yes"}) == (
        "only_stale",
        "only_stale must be true or false, not 'yes'.",
    )
    bad = tmp_path / "bad.flow.json"
    bad.write_text("{")
    field, message = field_of({"flow_path": str(bad)})
    assert field == "flow_path" and "not valid JSON" in message
    field, message = field_of({"flow_path": str(path), "overrides": {"ghost.x": 1}})
    assert (field, message) == ("overrides", "There is no node 'ghost' in the flow.")
    field, message = field_of({"flow_path": str(path), "targets": ["nope"]})
    assert field == "targets"
    field, message = field_of(
        {"flow_path": str(path), "overrides": {"train.total_steps": -5}}
    )
    assert field == "document"
    assert message == (
        "The flow cannot run: node 'train' (Train (SB3)): total_steps must be at "
        "least 1, not -5."
    )


# --------------------------------------------------------------- executor


@pytest.fixture
def fake_types() -> Iterator[list[str]]:
    """Quick node types: no ML library, so the executor is tested in a blink."""
    before = dict(registry._TYPES)
    calls: list[str] = []

    @node_type(
        "test.source",
        title="Source",
        category="Test",
        outputs=(PortSpec("env", "env"),),
        params=(ParamSpec("value", "int", 1, help="value"),),
    )
    def source(node: NodeRun) -> dict[str, Any]:
        """A number."""
        calls.append(node.node_id)
        return {"env": {"value": node.params["value"]}}

    @node_type(
        "test.double",
        title="Double",
        category="Test",
        inputs=(PortSpec("env", "env"),),
        outputs=(PortSpec("report", "report"),),
        params=(ParamSpec("label", "str", "", help="label"),),
    )
    def double(node: NodeRun) -> NodeResult:
        """Twice the number, written to a file."""
        calls.append(node.node_id)
        node.progress(1, 2, "half way")
        node.metrics(1, {"test/value": node.inputs["env"]["value"]})
        node.work_dir.mkdir(parents=True, exist_ok=True)
        out = node.work_dir / "double.txt"
        out.write_text(str(node.inputs["env"]["value"] * 2))
        return NodeResult(
            outputs={"report": {"file": str(out)}},
            summary={"written": True},
            files=[str(out)],
            models=[{"name": node.node_id, "kind": "test", "file": str(out)}],
        )

    @node_type(
        "test.fail",
        title="Fail",
        category="Test",
        inputs=(PortSpec("env", "env"),),
        outputs=(PortSpec("report", "report"),),
    )
    def fail(node: NodeRun) -> dict[str, Any]:
        """Always fails."""
        calls.append(node.node_id)
        raise RuntimeError("boom\nsecond line")

    @node_type(
        "test.wait",
        title="Wait",
        category="Test",
        inputs=(PortSpec("env", "env"),),
        outputs=(PortSpec("report", "report"),),
    )
    def wait(node: NodeRun) -> NodeResult:
        """Runs until the run is stopped."""
        calls.append(node.node_id)
        while not node.wait_for_stop(0.01):
            pass
        return NodeResult(outputs={}, stopped=True)

    yield calls
    registry._TYPES.clear()
    registry._TYPES.update(before)


class Harness:
    """Runs documents through the executor in this process, like the job."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.count = 0

    def start(self, doc: FlowDocument, **kwargs: Any) -> tuple[JobContext, io.StringIO]:
        self.count += 1
        run_dir = self.project / "runs" / f"r{self.count}"
        run_dir.mkdir(parents=True)
        events = io.StringIO()
        ctx = JobContext(f"r{self.count}", run_dir, "flow.run", {}, events=events)
        return ctx, events

    def run(self, doc: FlowDocument, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        ctx, events = self.start(doc)
        try:
            summary = executor.run_flow(ctx, doc, flow_name="t", **kwargs)
        finally:
            ctx.close()
        msgs = [protocol.decode(line) for line in events.getvalue().splitlines()]
        states = [m for m in msgs if isinstance(m, protocol.FlowNodeState)]
        return summary, states


def graph(*nodes: Node, links: list[Link]) -> FlowDocument:
    return FlowDocument(nodes=list(nodes), links=links, name="t")


def test_run_reports_states_and_a_rerun_skips_unchanged_nodes(
    tmp_path: Path, fake_types: list[str]
) -> None:
    h = Harness(tmp_path)
    doc = graph(
        Node("src", "test.source", {"value": 3}),
        Node("a", "test.double"),
        Node("b", "test.double", {"label": "b"}),
        links=[Link("src", "env", "a", "env"), Link("src", "env", "b", "env")],
    )
    summary, states = h.run(doc)
    assert summary["status"] == "completed"
    assert summary["ran"] == ["src", "a", "b"] and summary["cached"] == []
    assert [m["name"] for m in summary["models"]] == ["a", "b"]
    seq = [(s.node_id, s.state) for s in states]
    assert seq[:3] == [("src", "queued"), ("a", "queued"), ("b", "queued")]
    assert ("a", "running") in seq and seq.index(("a", "done")) < seq.index(
        ("b", "running")
    )
    done_a = next(s for s in states if s.node_id == "a" and s.state == "done")
    assert Path(done_a.outputs["report"]["file"]).read_text() == "6"
    assert all(s.run_id == "r1" for s in states)
    assert any(s.state == "running" and s.progress == 0.5 for s in states)
    # metrics of a node are namespaced by its id in the flow run's metrics
    rows = [
        json.loads(x)
        for x in (tmp_path / "runs/r1/metrics.jsonl").read_text().splitlines()
    ]
    assert rows[0]["a/test/value"] == 3
    saved = json.loads((tmp_path / "runs/r1/flow_state.json").read_text())
    assert saved["nodes"]["b"]["state"] == "done"
    assert saved["nodes"]["b"]["summary"]["written"] is True
    assert (tmp_path / "data/flow-cache/t/a.json").exists()

    fake_types.clear()
    summary, states = h.run(doc)
    assert summary["cached"] == ["src", "a", "b"] and fake_types == []
    assert summary["models"] == []  # cached nodes do not register again
    cached = next(s for s in states if s.node_id == "a" and s.state == "cached")
    assert cached.outputs == done_a.outputs
    assert "Unchanged since run r1" in cached.message
    assert cached.summary == done_a.summary and done_a.summary["written"] is True

    # editing b re-runs b only; editing src re-runs everything downstream
    doc.node("b").params["label"] = "changed"
    summary, _ = h.run(doc)
    assert summary["ran"] == ["b"] and summary["cached"] == ["src", "a"]
    doc.node("src").params["value"] = 4
    fake_types.clear()
    summary, _ = h.run(doc)
    assert summary["ran"] == ["src", "a", "b"]
    # only_stale=False ignores the cache; a lost output file invalidates it
    summary = h.run(doc, only_stale=False)[0]
    assert summary["ran"] == ["src", "a", "b"]
    Path(summary["nodes"]["a"]["outputs"]["report"]["file"]).unlink()
    summary = h.run(doc)[0]
    assert summary["ran"] == ["a"] and summary["cached"] == ["src", "b"]


def test_a_failure_skips_downstream_names_the_node_and_spares_other_branches(
    tmp_path: Path, fake_types: list[str]
) -> None:
    doc = graph(
        Node("src", "test.source"),
        Node("bad", "test.fail"),
        Node("after", "test.double"),
        Node("other", "test.double"),
        links=[
            Link("src", "env", "bad", "env"),
            Link("bad", "report", "after", "env"),  # report into env: invalid
            Link("src", "env", "other", "env"),
        ],
    )
    h = Harness(tmp_path)
    with pytest.raises(executor.FlowInvalid) as info:
        h.run(doc)  # the report -> env link is refused first
    assert (
        "takes env, but it is linked to the report output"
        in info.value.errors["after"][0]
    )
    doc = graph(
        Node("src", "test.source"),
        Node("bad", "test.fail"),
        Node("other", "test.double"),
        links=[Link("src", "env", "bad", "env"), Link("src", "env", "other", "env")],
    )
    summary, states = h.run(doc)
    assert summary["status"] == "failed"
    assert summary["failed"] == ["bad"] and summary["ran"] == ["src", "other"]
    assert summary["reason"] == "The node 'bad' (Fail) failed: RuntimeError: boom."
    failed = next(s for s in states if s.state == "failed")
    assert (failed.node_id, failed.message) == ("bad", "RuntimeError: boom")


def test_models_of_a_failed_run_are_registered_once_even_when_reused(
    tmp_path: Path, fake_types: list[str]
) -> None:
    """Train done, Export failed: the run lists (and its lifecycle registers)
    Train's models; the next run, which reuses Train from the cache, does not
    list them again. A cache entry an older version left with models it never
    registered lists them once more."""

    @node_type(
        "test.maybe",
        title="Maybe",
        category="Test",
        inputs=(PortSpec("env", "report"),),
        outputs=(PortSpec("report", "report"),),
        params=(ParamSpec("fail", "bool", True, help="fail"),),
    )
    def maybe(node: NodeRun) -> dict[str, Any]:
        """Fails when told to."""
        if node.params["fail"]:
            raise executor.EngineError("Export failed.")
        return {"report": {}}

    doc = graph(
        Node("src", "test.source"),
        Node("a", "test.double"),
        Node("b", "test.maybe"),
        links=[Link("src", "env", "a", "env"), Link("a", "report", "b", "env")],
    )
    h = Harness(tmp_path)
    summary, _ = h.run(doc)
    assert summary["status"] == "failed"
    assert [m["name"] for m in summary["models"]] == ["a"]  # registered
    doc.node("b").params["fail"] = False
    summary, _ = h.run(doc)
    assert summary["status"] == "completed"
    assert summary["cached"] == ["src", "a"]
    assert summary["models"] == []  # not a second time
    # An entry from before failed runs registered their models:
    entry_path = executor.cache_dir(tmp_path, "t") / "a.json"
    entry = json.loads(entry_path.read_text(encoding="utf-8"))
    entry["pending_models"] = [{"name": "a", "path": "x"}]
    entry_path.write_text(json.dumps(entry), encoding="utf-8")
    doc.node("b").params["fail"] = True
    summary, _ = h.run(doc)
    assert summary["cached"] == ["src", "a"]
    assert [m["name"] for m in summary["models"]] == ["a"]  # listed once more
    doc.node("b").params["fail"] = False
    summary, _ = h.run(doc)
    assert summary["models"] == []


def test_downstream_of_a_failed_node_is_skipped(
    tmp_path: Path, fake_types: list[str]
) -> None:
    @node_type(
        "test.failenv",
        title="Fail env",
        category="Test",
        outputs=(PortSpec("env", "env"),),
    )
    def failenv(node: NodeRun) -> dict[str, Any]:
        """Fails before producing an env."""
        raise executor.EngineError("No such environment.")

    doc = graph(
        Node("env", "test.failenv"),
        Node("a", "test.double"),
        Node("b", "test.double"),
        links=[Link("env", "env", "a", "env"), Link("env", "env", "b", "env")],
    )
    summary, _ = Harness(tmp_path).run(doc)
    assert summary["nodes"]["env"]["state"] == "failed"
    assert summary["nodes"]["env"]["message"] == "No such environment."
    for n in ("a", "b"):
        assert summary["nodes"][n]["state"] == "skipped"
        assert summary["nodes"][n]["message"] == "Not run: 'Fail env' (env) failed."
    assert summary["reason"] == "The node 'env' (Fail env) failed: No such environment."
    with pytest.raises(executor.FlowFailed, match="'env'"):
        cfg = executor.FlowRunConfig(document=doc.to_dict(), flow_name="t")
        ctx = JobContext("j", tmp_path / "runs" / "j", "flow.run", as_dict(cfg))
        try:
            executor.run(ctx, cfg)
        finally:
            ctx.close()


def test_stop_is_cooperative_and_skips_the_rest(
    tmp_path: Path, fake_types: list[str]
) -> None:
    doc = graph(
        Node("src", "test.source"),
        Node("w", "test.wait"),
        Node("after", "test.double"),
        links=[Link("src", "env", "w", "env"), Link("src", "env", "after", "env")],
    )
    h = Harness(tmp_path)
    ctx, _ = h.start(doc)
    result: dict[str, Any] = {}

    def go() -> None:
        result.update(executor.run_flow(ctx, doc, flow_name="t"))

    thread = threading.Thread(target=go)
    thread.start()
    while "w" not in fake_types:
        thread.join(0.01)
    ctx.request_stop()
    thread.join(10)
    ctx.close()
    assert result["status"] == "stopped"
    assert result["nodes"]["w"]["state"] == "stopped"
    assert result["nodes"]["after"] == {
        "state": "skipped",
        "progress": 0.0,
        "message": "The run was stopped.",
    }
    assert not (tmp_path / "data/flow-cache/t/w.json").exists()


def test_targets_run_only_what_they_need(tmp_path: Path, fake_types: list[str]) -> None:
    doc = graph(
        Node("src", "test.source"),
        Node("a", "test.double"),
        Node("b", "test.double"),
        links=[Link("src", "env", "a", "env"), Link("src", "env", "b", "env")],
    )
    summary, states = Harness(tmp_path).run(doc, targets=["a"])
    assert summary["order"] == ["src", "a"]
    assert {s.node_id for s in states} == {"src", "a"}


# ------------------------------------------------------- engine process


@pytest.fixture
def engine() -> Iterator[EngineProcess]:
    proc = EngineProcess()
    proc.call(protocol.Hello())
    yield proc
    proc.close()


def test_flow_requests_through_the_engine(
    engine: EngineProcess, tmp_path: Path
) -> None:
    result = engine.call(protocol.GetFlowCatalog())
    assert result["node_types"] == catalog()
    assert result["port_types"] == list(flow.PORT_TYPES)
    cat = flow.catalog_from_dicts(result["node_types"])
    assert cat["rl.train"].input("env").type == "env"

    path = EXAMPLES / "cartpole_ppo.flow.json"
    assert engine.call(protocol.ValidateFlow(path=str(path))) == {"errors": {}}
    doc = flow.load(path)
    doc.links = [lk for lk in doc.links if lk.to_node != "train"]
    doc.node("evaluate").params["episodes"] = 0
    result = engine.call(protocol.ValidateFlow(document=doc.to_dict()))
    assert result["errors"] == {
        "train": ["The required input 'env' (env) is not linked."],
        "evaluate": ["episodes must be at least 1, not 0."],
    }
    garbage = tmp_path / "g.flow.json"
    garbage.write_bytes(b"\x00\x01garbage")
    reply = engine.reply_to(engine.send(protocol.ValidateFlow(path=str(garbage))))
    assert isinstance(reply, protocol.Error)
    assert reply.message == (
        "The flow file g.flow.json is not valid JSON "
        "(line 1, column 1: Expecting value)."
    )


def test_a_flow_run_job_reports_node_states(
    engine: EngineProcess, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    engine.call(protocol.OpenProject(path=str(project), create=True))
    doc = FlowDocument(
        name="env only",
        nodes=[Node("env", "env.environment", {"env": "CartPole-v1"})],
    )
    flow.save(doc, project / "flows" / "env_only.flow.json")
    bad = engine.reply_to(
        engine.send(
            protocol.StartRun(kind="flow.run", config={"flow_path": "nope.json"})
        )
    )
    assert isinstance(bad, protocol.Error) and "does not exist" in bad.message
    run_id = engine.call(
        protocol.StartRun(
            kind="flow.run",
            config={"flow_path": str(project / "flows" / "env_only.flow.json")},
        )
    )["run_id"]
    done = engine.wait_for(
        lambda m: isinstance(m, protocol.FlowNodeState) and m.state == "done", 60
    )
    assert (done.run_id, done.node_id) == (run_id, "env")
    assert done.outputs["env"]["id"] == "CartPole-v1"
    finished = engine.wait_for(
        lambda m: isinstance(m, protocol.RunFinished) and m.run_id == run_id, 60
    )
    assert finished.status == "completed"
    assert finished.summary["nodes"]["env"]["state"] == "done"
