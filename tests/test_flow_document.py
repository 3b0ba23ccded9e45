"""engine.flow: the .flow.json document and the graph logic shared with the GUI.

Pure tests with a small hand-written catalog: no engine node registry, no Qt.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import flow
from engine.flow import (
    CycleError,
    FlowDocument,
    FlowFormatError,
    Link,
    Node,
    NodeTypeSpec,
    ParamSpec,
    PortRef,
    PortSpec,
)

ROOT = Path(__file__).resolve().parents[1]

CATALOG: dict[str, NodeTypeSpec] = {
    s.type: s
    for s in (
        NodeTypeSpec(
            type="t.env",
            title="Env",
            category="Envs",
            outputs=(PortSpec("env", "env"),),
            params=(ParamSpec("env", "str", "CartPole-v1", help="id"),),
        ),
        NodeTypeSpec(
            type="t.train",
            title="Train",
            category="RL",
            inputs=(PortSpec("env", "env"),),
            outputs=(PortSpec("policy", "policy"),),
            params=(
                ParamSpec("steps", "int", 100, help="steps", min=1, max=1000),
                ParamSpec("lr", "float", 0.001, help="lr", min=0.0),
                ParamSpec("algo", "choice", "PPO", help="algo", choices=("PPO", "DQN")),
                ParamSpec("verbose", "bool", False, help="talk"),
            ),
        ),
        NodeTypeSpec(
            type="t.eval",
            title="Evaluate",
            category="RL",
            inputs=(
                PortSpec("policy", "policy"),
                PortSpec("env", "env", required=False),
            ),
            outputs=(PortSpec("report", "report"),),
        ),
        NodeTypeSpec(
            type="t.merge",
            title="Merge",
            category="Data",
            inputs=(PortSpec("reports", "report", multiple=True),),
            outputs=(PortSpec("policy", "policy"),),
        ),
    )
}


def chain() -> FlowDocument:
    """env -> train -> eval, with env also feeding eval's optional env."""
    doc = FlowDocument(name="chain")
    doc.nodes = [
        Node("env", "t.env", {"env": "CartPole-v1"}, x=0, y=0),
        Node("train", "t.train", {"steps": 10}, x=200, y=0),
        Node("eval", "t.eval", {}, x=400, y=0, title="My eval"),
    ]
    doc.links = [
        Link("env", "env", "train", "env"),
        Link("train", "policy", "eval", "policy"),
    ]
    return doc


# ------------------------------------------------------------------ format


def test_round_trip_through_dict_text_and_file(tmp_path: Path) -> None:
    doc = chain()
    doc.description = "A test flow."
    doc.extra = {"view": {"zoom": 1.5}}
    doc.nodes[1].extra = {"color": "#ff0000"}
    assert FlowDocument.from_dict(doc.to_dict()) == doc
    path = tmp_path / "x.flow.json"
    flow.save(doc, path)
    loaded = flow.load(path)
    assert loaded == doc
    assert flow.dumps(loaded) == path.read_text(encoding="utf-8")
    data = json.loads(path.read_text())
    assert data["format"] == flow.FORMAT_VERSION and data["kind"] == "flow"
    assert data["view"] == {"zoom": 1.5}
    assert data["nodes"][1]["color"] == "#ff0000"
    assert data["links"][0] == {
        "from": {"node": "env", "port": "env"},
        "to": {"node": "train", "port": "env"},
    }
    assert data["nodes"][2]["title"] == "My eval"
    assert "title" not in data["nodes"][0]  # empty titles are not written


node_ids = st.text("abcdefgh_", min_size=1, max_size=6)
json_values = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.booleans(),
)


@st.composite
def documents(draw: st.DrawFn) -> FlowDocument:
    ids = draw(st.lists(node_ids, unique=True, max_size=8))
    nodes = [
        Node(
            id=i,
            type=draw(st.sampled_from([*CATALOG, "t.unknown"])),
            params=draw(st.dictionaries(st.text("xyz", min_size=1), json_values)),
            x=draw(st.floats(-1e6, 1e6)),
            y=draw(st.floats(-1e6, 1e6)),
            title=draw(st.text(max_size=5)),
        )
        for i in ids
    ]
    links = []
    if ids:
        for _ in range(draw(st.integers(0, 10))):
            link = Link(
                draw(st.sampled_from(ids)),
                draw(st.sampled_from(["env", "policy", "report"])),
                draw(st.sampled_from([*ids, "ghost"])),
                draw(st.sampled_from(["env", "policy", "reports"])),
            )
            if link not in links:
                links.append(link)
    return FlowDocument(nodes=nodes, links=links, name=draw(st.text(max_size=8)))


@settings(max_examples=40, deadline=None)
@given(documents())
def test_any_document_survives_text_round_trip(doc: FlowDocument) -> None:
    assert flow.loads(flow.dumps(doc)) == doc
    # validation never raises, whatever the graph
    errors = flow.validate(doc, CATALOG)
    assert all(isinstance(m, str) for msgs in errors.values() for m in msgs)


def test_format_0_is_migrated(tmp_path: Path) -> None:
    old = {
        "version": 0,
        "name": "old",
        "nodes": [
            {"id": "env", "type": "t.env", "pos": [10, 20], "label": "Cart"},
            {"id": "train", "type": "t.train", "pos": [300, 20], "params": {}},
        ],
        "edges": [["env", "env", "train", "env"]],
    }
    path = tmp_path / "old.flow.json"
    path.write_text(json.dumps(old))
    doc = flow.load(path)
    assert doc.format == 0
    assert (doc.nodes[0].x, doc.nodes[0].y, doc.nodes[0].title) == (10.0, 20.0, "Cart")
    assert doc.links == [Link("env", "env", "train", "env")]
    assert flow.validate(doc, CATALOG) == {}
    assert doc.to_dict()["format"] == flow.FORMAT_VERSION
    assert "edges" not in doc.to_dict() and "version" not in doc.to_dict()
    assert set(flow.MIGRATIONS) == set(range(flow.FORMAT_VERSION))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"\xff\xfe garbage", "not UTF-8"),
        (b'{"format": 1, "nodes": [', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"format": 99, "nodes": []}', "newer RL Studio"),
        (b'{"format": "one"}', "not a version number"),
        (b'{"kind": "env", "format": 1}', "not a flow"),
        (b'{"format": 1, "nodes": {}}', "'nodes' must be a list"),
        (b'{"format": 1, "nodes": [{"type": "t.env"}]}', "has no 'id'"),
        (b'{"format": 1, "nodes": [{"id": "a"}]}', "has no 'type'"),
        (
            b'{"format": 1, "nodes": [{"id": "a", "type": "x"}, '
            b'{"id": "a", "type": "y"}]}',
            "Two nodes",
        ),
        (
            b'{"format": 1, "nodes": '
            b'[{"id": "a", "type": "x", "position": {"x": "l"}}]}',
            "must be a number",
        ),
        (b'{"format": 1, "links": [{"from": {"node": "a"}}]}', "Link 1"),
    ],
)
def test_bad_files_raise_one_sentence(tmp_path: Path, text: bytes, needle: str) -> None:
    path = tmp_path / "bad.flow.json"
    path.write_bytes(text)
    with pytest.raises(FlowFormatError) as info:
        flow.load(path)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message and message.endswith(".")


def test_a_loaded_document_shares_nothing_with_its_source() -> None:
    data = chain().to_dict()
    data["nodes"][0]["params"]["nested"] = {"a": [1, 2]}
    doc = FlowDocument.from_dict(data)
    doc.nodes[0].params["nested"]["a"].append(3)
    assert data["nodes"][0]["params"]["nested"] == {"a": [1, 2]}
    out = doc.to_dict()
    out["nodes"][0]["params"]["nested"]["a"].clear()
    assert doc.nodes[0].params["nested"]["a"] == [1, 2, 3]


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(FlowFormatError, match="does not exist"):
        flow.load(tmp_path / "nope.flow.json")
    with pytest.raises(FlowFormatError, match="is a folder"):
        flow.load(tmp_path)


def test_unknown_type_and_dangling_link_load_and_are_kept(tmp_path: Path) -> None:
    doc = chain()
    doc.nodes.append(Node("future", "t.hologram", {"beam": 3}))
    doc.links.append(Link("ghost", "env", "eval", "env"))
    path = tmp_path / "odd.flow.json"
    flow.save(doc, path)
    loaded = flow.load(path)
    assert loaded == doc  # nothing lost
    errors = flow.validate(loaded, CATALOG)
    assert "Unknown node type 't.hologram'" in errors["future"][0]
    assert any("missing node 'ghost'" in m for m in errors["eval"])


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "flows" / "a.flow.json"
    flow.save(chain(), path)
    before = path.read_text()
    bad = chain()
    bad.nodes[0].params["x"] = math.nan  # JSON cannot carry it
    with pytest.raises(ValueError):
        flow.save(bad, path)
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["a.flow.json"]


def test_flow_name_and_new_node_ids() -> None:
    doc = chain()
    assert flow.flow_name(doc) == "chain"
    doc.name = ""
    assert flow.flow_name(doc, "/p/flows/my_flow.flow.json") == "my_flow"
    assert doc.new_node_id("t.train") == "train_2"
    assert doc.new_node_id("t.env") == "env_2"
    assert doc.new_node_id("x.Fancy Thing") == "fancy_thing"
    node = flow.new_node(CATALOG["t.train"], "t1", x=5, y=6)
    assert node.params == {"steps": 100, "lr": 0.001, "algo": "PPO", "verbose": False}


def test_flow_module_is_standard_library_only() -> None:
    tree = ast.parse((ROOT / "engine" / "flow.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert names - {"__future__", "engine"} <= set(sys.stdlib_module_names)
    code = (
        "import sys; before = set(sys.modules); import engine.flow; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in (*sys.stdlib_module_names, 'engine')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------- can_link


def test_can_link_accepts_matching_types() -> None:
    doc = chain()
    assert flow.can_link(doc, CATALOG, ("env", "env"), ("eval", "env")) == (True, "")
    assert flow.can_link(doc, CATALOG, PortRef("env", "env"), PortRef("eval", "env"))[0]


def test_can_link_refuses_a_type_mismatch_with_a_reason() -> None:
    doc = chain()
    ok, reason = flow.can_link(doc, CATALOG, ("train", "policy"), ("eval", "env"))
    assert not ok
    assert reason == "A policy output cannot feed the env input 'env' of 'My eval'."


def test_can_link_refuses_a_cycle_with_a_reason() -> None:
    doc2 = FlowDocument(
        nodes=[Node("m", "t.merge"), Node("e", "t.eval")],
        links=[Link("m", "policy", "e", "policy")],
    )
    ok, reason = flow.can_link(doc2, CATALOG, ("e", "report"), ("m", "reports"))
    assert not ok
    assert reason == "The link would close a cycle: 'Merge' already feeds 'Evaluate'."
    ok, reason = flow.can_link(doc2, CATALOG, ("m", "policy"), ("m", "reports"))
    assert (ok, reason) == (False, "A node cannot feed itself.")


def test_can_link_refuses_occupied_inputs_unknown_ports_and_nodes() -> None:
    doc = chain()
    doc.nodes.append(Node("env2", "t.env"))
    ok, reason = flow.can_link(doc, CATALOG, ("env2", "env"), ("train", "env"))
    assert not ok and "already linked" in reason
    assert flow.can_link(doc, CATALOG, ("env2", "env"), ("train", "env"), replace=True)[
        0
    ]
    ok, reason = flow.can_link(doc, CATALOG, ("env", "env"), ("train", "env"))
    assert (ok, reason) == (False, "These two ports are already linked.")
    ok, reason = flow.can_link(doc, CATALOG, ("env", "nope"), ("eval", "env"))
    assert reason == "'Env' has no output named 'nope'."
    ok, reason = flow.can_link(doc, CATALOG, ("env", "env"), ("eval", "report"))
    assert reason == "'My eval' has no input named 'report'."
    ok, reason = flow.can_link(doc, CATALOG, ("ghost", "env"), ("eval", "env"))
    assert reason == "There is no node 'ghost'."
    # a multiple input takes several links
    doc3 = FlowDocument(
        nodes=[Node("a", "t.eval"), Node("b", "t.eval"), Node("m", "t.merge")],
        links=[Link("a", "report", "m", "reports")],
    )
    assert flow.can_link(doc3, CATALOG, ("b", "report"), ("m", "reports")) == (True, "")


def test_can_link_accepts_the_catalog_reply_as_dicts() -> None:
    reply = [s.to_dict() for s in CATALOG.values()]
    assert flow.catalog_from_dicts(reply) == CATALOG
    doc = chain()
    assert not flow.can_link(doc, reply, ("train", "policy"), ("eval", "env"))[0]


# ---------------------------------------------------------------- validate


def test_validate_reports_per_node() -> None:
    doc = FlowDocument(
        nodes=[
            Node("env", "t.env"),
            Node("lonely", "t.train", {"steps": 0}),  # missing input, out of range
            Node("t2", "t.train", {"algo": "SAC", "lr": "fast", "bogus": 1}),
            Node("x", "t.mystery"),
        ],
        links=[Link("env", "env", "t2", "env")],
    )
    errors = flow.validate(doc, CATALOG)
    assert set(errors) == {"lonely", "t2", "x"}
    assert errors["lonely"] == [
        "steps must be at least 1, not 0.",
        "The required input 'env' (env) is not linked.",
    ]
    assert "Unknown parameter 'bogus' for Train." in errors["t2"]
    assert "lr must be a number, not 'fast'." in errors["t2"]
    assert "algo must be one of PPO, DQN, not 'SAC'." in errors["t2"]
    assert errors["x"] == ["Unknown node type 't.mystery'; this engine cannot run it."]


def test_validate_reports_type_mismatch_double_links_cycles_and_orphans() -> None:
    doc = FlowDocument(
        nodes=[
            Node("env", "t.env"),
            Node("env2", "t.env"),
            Node("train", "t.train"),
            Node("m", "t.merge"),
            Node("e", "t.eval"),
        ],
        links=[
            Link("env", "env", "train", "env"),
            Link("env2", "env", "train", "env"),  # two into a single input
            Link("env", "env", "e", "policy"),  # env into a policy input
            Link("m", "policy", "e", "policy"),
            Link("e", "report", "m", "reports"),  # cycle m -> e -> m
            Link("a", "x", "b", "y"),  # neither end exists
        ],
    )
    errors = flow.validate(doc, CATALOG)
    assert "Input 'env' has 2 links; it takes one." in errors["train"]
    assert any(
        "takes policy, but it is linked to the env output" in m for m in errors["e"]
    )
    assert "This node is part of a cycle (m -> e -> m)." in errors["m"]
    assert "This node is part of a cycle (m -> e -> m)." in errors["e"]
    assert errors[flow.DOCUMENT_KEY] == [
        "A link joins two nodes that do not exist ('a' and 'b')."
    ]
    assert "env" not in errors and "env2" not in errors


def test_check_param_messages() -> None:
    p = ParamSpec("n", "int", 1, help="n", min=1, max=10)
    assert flow.check_param(p, 5) is None
    assert flow.check_param(p, 11) == "n must be at most 10, not 11."
    assert flow.check_param(p, True) == "n must be a whole number, not True."
    assert flow.check_param(p, 2.5) == "n must be a whole number, not 2.5."
    f = ParamSpec("lr", "float", 0.1, help="lr", min=0.0)
    assert flow.check_param(f, 3) is None
    assert flow.check_param(f, math.inf) == "lr must be a finite number, not inf."
    assert flow.check_param(ParamSpec("p", "path", "", help="p"), 3) == (
        "p must be a path, not 3."
    )
    assert flow.check_param(ParamSpec("b", "bool", True, help="b"), "yes") == (
        "b must be true or false, not 'yes'."
    )


# ------------------------------------------------------------ graph order


def diamond() -> FlowDocument:
    """env -> a, env -> b, a -> m, b -> m; c independent."""
    return FlowDocument(
        nodes=[
            Node("m", "t.merge"),
            Node("c", "t.env"),
            Node("b", "t.eval"),
            Node("a", "t.eval"),
            Node("t", "t.train"),
            Node("env", "t.env"),
        ],
        links=[
            Link("env", "env", "t", "env"),
            Link("t", "policy", "a", "policy"),
            Link("t", "policy", "b", "policy"),
            Link("a", "report", "m", "reports"),
            Link("b", "report", "m", "reports"),
        ],
    )


def test_topological_order_respects_links_and_keeps_document_order() -> None:
    doc = diamond()
    order = flow.topological_order(doc)
    assert order == ["c", "env", "t", "b", "a", "m"]
    pos = {n: i for i, n in enumerate(order)}
    for lk in doc.links:
        assert pos[lk.from_node] < pos[lk.to_node]


def test_topological_order_raises_on_a_cycle() -> None:
    doc = diamond()
    doc.links.append(Link("m", "policy", "a", "policy"))
    with pytest.raises(CycleError) as info:
        flow.topological_order(doc)
    assert set(info.value.nodes) == {"a", "m"}
    assert "cycle" in str(info.value)
    assert flow.cycles(doc) == [["m", "a", "m"]]


def test_stale_nodes_are_the_node_and_everything_downstream() -> None:
    doc = diamond()
    assert flow.stale_nodes(doc, "t") == ["t", "b", "a", "m"]
    assert flow.stale_nodes(doc, "a") == ["a", "m"]
    assert flow.stale_nodes(doc, "c") == ["c"]
    assert flow.stale_nodes(doc, "nope") == []
    assert flow.upstream(doc, "m") == {"env", "t", "a", "b"}
    assert flow.downstream(doc, "env") == {"t", "a", "b", "m"}
    assert flow.inputs_of(doc, "m") == {
        "reports": [PortRef("a", "report"), PortRef("b", "report")]
    }


def test_graph_logic_scales_to_large_graphs() -> None:
    n = 2000
    nodes = [Node(f"n{i}", "t.eval") for i in range(n)]
    links = [Link(f"n{i}", "report", f"n{i + 1}", "policy") for i in range(n - 1)]
    doc = FlowDocument(nodes=nodes, links=links)
    assert flow.topological_order(doc)[-1] == f"n{n - 1}"
    assert len(flow.stale_nodes(doc, "n0")) == n
    doc.links.append(Link(f"n{n - 1}", "report", "n0", "policy"))
    assert len(flow.cycles(doc)[0]) == n + 1
