"""The editor's document model and its undo commands, without widgets."""

from __future__ import annotations

import json

from PySide6.QtGui import QUndoStack

from engine import flow
from engine.flow import FlowDocument, Link, Node
from studio.state.flow_document import FlowDocumentModel, link_from_key, link_key
from studio.state.flow_results import (
    changed_nodes,
    last_flow_run,
    read_flow_run,
    split_log,
)
from studio.workflows.commands import (
    AddLinkCommand,
    AddNodeCommand,
    MoveNodesCommand,
    PasteCommand,
    RemoveLinksCommand,
    RemoveNodesCommand,
    SetFlowInfoCommand,
    SetParamsCommand,
    SetTitleCommand,
    clipboard_payload,
    pasted_items,
)


def three_nodes() -> FlowDocumentModel:
    doc = FlowDocument(
        nodes=[
            Node("env", "env.environment", {"env": "CartPole-v1"}, 0, 0),
            Node("train", "rl.train", {"total_steps": 100}, 300, 0),
            Node("evaluate", "rl.evaluate", {"episodes": 2}, 600, 0),
        ],
        links=[
            Link("env", "env", "train", "env"),
            Link("train", "policy", "evaluate", "policy"),
        ],
        name="demo",
    )
    return FlowDocumentModel(doc)


def test_every_command_undoes_to_the_same_document() -> None:
    model = three_nodes()
    events: list[tuple[str, str]] = []
    model.subscribe(lambda what, key: events.append((what, key)))
    stack = QUndoStack()
    original = flow.dumps(model.doc)
    commands = [
        AddNodeCommand(model, Node("register", "models.register", {}, 900, 0)),
        AddLinkCommand(model, Link("train", "policy", "register", "policy")),
        MoveNodesCommand(
            model, {"env": ((0, 0), (20, 40)), "train": ((300, 0), (320, 40))}
        ),
        SetParamsCommand(model, "train", {"total_steps": 100}, {"total_steps": 256}),
        RemoveNodesCommand(model, ["train"]),
        PasteCommand(model, [Node("env_2", "env.environment", {}, 40, 40)], []),
        SetFlowInfoCommand(model, "renamed", "Trains and checks."),
        SetTitleCommand(model, "evaluate", "Check the policy"),
    ]
    states = [original]
    for command in commands:
        stack.push(command)
        states.append(flow.dumps(model.doc))
    assert model.doc.node("train") is None
    assert model.doc.links == []  # the removed node took its three links along
    for expected in reversed(states[:-1]):
        stack.undo()
        assert flow.dumps(model.doc) == expected
    for expected in states[1:]:
        stack.redo()
        assert flow.dumps(model.doc) == expected
    assert ("node_removed", "train") in events
    assert ("info", "") in events
    assert ("link_removed", link_key(Link("env", "env", "train", "env"))) in events


def test_typing_a_parameter_merges_into_one_undo_step() -> None:
    model = three_nodes()
    stack = QUndoStack()
    for value in (2, 25, 256):
        old = dict(model.node("train").params)
        stack.push(SetParamsCommand(model, "train", old, {**old, "total_steps": value}))
    assert stack.count() == 1
    assert model.node("train").params["total_steps"] == 256
    stack.undo()
    assert model.node("train").params["total_steps"] == 100
    # A different parameter is a new step.
    old = dict(model.node("train").params)
    stack.push(SetParamsCommand(model, "train", old, {**old, "seed": 3}))
    stack.push(SetParamsCommand(model, "train", {**old, "seed": 3}, {**old, "seed": 4}))
    assert stack.count() == 1  # the undone step is gone; seed edits merged
    assert model.node("train").params["seed"] == 4


def test_a_link_into_a_taken_input_replaces_it_in_one_step() -> None:
    model = three_nodes()
    model.add_node(Node("env_2", "env.environment", {}, 0, 200))
    stack = QUndoStack()
    old = Link("env", "env", "train", "env")
    new = Link("env_2", "env", "train", "env")
    stack.push(AddLinkCommand(model, new, [old]))
    assert model.doc.links_into("train") == [new]
    stack.undo()
    assert model.doc.links_into("train") == [old]
    assert model.doc.links[0] == old  # back where it was


def test_remove_links_and_keys_round_trip() -> None:
    model = three_nodes()
    link = Link("train", "policy", "evaluate", "policy")
    assert link_from_key(link_key(link)) == link
    stack = QUndoStack()
    stack.push(RemoveLinksCommand(model, [link]))
    assert link not in model.doc.links
    stack.undo()
    assert model.doc.links[1] == link


def test_pasted_nodes_get_fresh_ids_and_keep_their_inner_links() -> None:
    model = three_nodes()
    payload = clipboard_payload(model, ["env", "train"])
    assert len(payload["links"]) == 1  # the link to evaluate stays behind
    nodes, links = pasted_items(model, payload, (40, 40))
    assert [n.id for n in nodes] == ["environment", "train_2"]
    assert links == [Link("environment", "env", "train_2", "env")]
    assert (nodes[1].x, nodes[1].y) == (340, 40)
    assert nodes[1].params == {"total_steps": 100}


def test_split_log_gives_each_node_its_lines_and_the_traceback_after() -> None:
    lines = [
        "engine starting",
        "[train] PPO on CartPole-v1",
        "[train] step 100",
        "[evaluate] playing",
        "node evaluate (Evaluate policy) failed: RuntimeError: boom",
        "Traceback (most recent call last):",
        "[ghost] a node the flow does not have",
    ]
    out = split_log(lines, ["train", "evaluate"])
    assert out == {
        "train": lines[1:3],
        "evaluate": lines[3:7],
    }


def test_changed_nodes_follow_params_links_and_downstream() -> None:
    ran = three_nodes().doc
    now = ran.copy()
    assert changed_nodes(ran, now) == set()
    now.node("train").params["total_steps"] = 7
    assert changed_nodes(ran, now) == {"train", "evaluate"}
    now = ran.copy()
    now.links.remove(Link("train", "policy", "evaluate", "policy"))
    assert changed_nodes(ran, now) == {"evaluate"}
    now = ran.copy()
    now.node("env").x = 999.0  # a move changes no result
    now.nodes.append(Node("new", "rl.evaluate", {}, 0, 0))
    assert changed_nodes(ran, now) == {"new"}


def test_last_run_of_a_file_is_read_back_and_checked(tmp_path) -> None:
    flow_path = tmp_path / "flows" / "demo.flow.json"
    doc = three_nodes().doc
    run_dir = tmp_path / "runs" / "r2"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                "run_id": "r2",
                "kind": "flow.run",
                "config": {"flow_path": str(flow_path), "document": doc.to_dict()},
            }
        )
    )
    (run_dir / "flow_state.json").write_text(
        json.dumps(
            {
                "flow": "demo",
                "nodes": {
                    "env": {"state": "done", "progress": 1.0, "message": "ok"},
                    "train": {"state": "running", "progress": 0.5, "message": ""},
                    "evaluate": {"state": "queued", "progress": 0.0, "message": ""},
                },
            }
        )
    )
    (run_dir / "log.txt").write_text("[train] step 1\n[env] made\n")
    runs = [
        {"id": "r1", "kind": "flow.run", "config": {"flow_path": str(flow_path)}},
        {"id": "other", "kind": "rl.train", "config": {}},
        # A run of this session: its record has no config yet.
        {
            "id": "r2",
            "kind": "flow.run",
            "status": "interrupted",
            "run_dir": str(run_dir),
            "config": {},
        },
        {"id": "r3", "kind": "flow.run", "config": {"flow_path": "/elsewhere"}},
    ]
    run = last_flow_run(runs, flow_path)
    assert run is not None and run["id"] == "r2"
    results = read_flow_run(run, doc)
    # The process died: the node that ran was cut short, the next never ran.
    assert {n: r["state"] for n, r in results.nodes.items()} == {
        "env": "done",
        "train": "stopped",
        "evaluate": "skipped",
    }
    assert results.node_logs == {"train": ["[train] step 1"], "env": ["[env] made"]}
    edited = doc.copy()
    edited.node("train").params["seed"] = 3
    results = read_flow_run(run, edited)
    assert list(results.nodes) == ["env"] and results.stale == ["train", "evaluate"]
    assert "train" not in results.node_logs
