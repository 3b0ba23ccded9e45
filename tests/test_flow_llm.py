"""Language-model and export flow nodes: the catalog (cheap to build), per
node validation, the bundled GRPO example flow, and the whole chain run
headless by ``rl-studio-engine run`` on a tiny model built here — rollouts,
GRPO dataset, two reward nodes, TRL GRPO with LoRA, merge, before/after
evaluation, a Q8_0 GGUF read back with ``gguf``, and a deployment to a local
fake Ollama server — then a re-run from the cache, and a missing base
model."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from models_workspace_support import FakeOllama
from tiny_models import build_tiny_model

from engine import flow, protocol
from engine.jobs.context import JobContext
from engine.nodes import catalog, executor, node_types, validate_flow
from engine.store.project import Project
from resources import resource_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "resources" / "examples" / "flows" / "jira_llm_grpo.flow.json"
LLM_TYPES = {
    "llm.base_model": "Base language model",
    "llm.collect": "Collect rollouts",
    "llm.dataset": "Build dataset",
    "llm.import": "Dataset source",
    "llm.reward": "Reward function",
    "llm.judge": "LLM judge reward",
    "llm.train": "Fine-tune (TRL)",
    "llm.merge": "Merge adapter",
    "llm.evaluate": "Evaluate language-model policy",
    "export.gguf": "Export GGUF",
    "export.ollama": "Deploy to Ollama",
}
CHAIN = [
    "env",
    "base",
    "collect",
    "dataset",
    "reward_env",
    "reward_format",
    "train",
    "merge",
    "export",
    "evaluate",
    "deploy",
]
# A real user's example, shrunk to seconds on a CPU: a few short episodes,
# two GRPO steps of two answers each, tiny generations.
QUICK = {
    "collect.episodes": 4,
    "collect.num_envs": 4,
    "collect.max_steps": 4,
    "collect.max_new_tokens": 4,
    "train.max_steps": 2,
    "train.batch_size": 2,
    "train.num_generations": 2,
    "train.lora_rank": 4,
    "train.max_completion_length": 4,
    "train.settings": '{"save_steps": 0, "precision": "fp32", "device": "cpu", '
    '"eval_every_steps": 0}',
    "evaluate.episodes": 2,
    "evaluate.num_envs": 2,
    "evaluate.max_steps": 2,
    "evaluate.max_new_tokens": 2,
}


# ----------------------------------------------------------------- catalog


def test_the_catalog_has_every_llm_and_export_node_with_help() -> None:
    types = node_types()
    items = {d["type"]: d for d in catalog()}
    for type_name, title in LLM_TYPES.items():
        d = items[type_name]
        assert d["title"] == title
        assert d["category"] in ("Language models", "Export")
        assert d["description"].endswith(".")
        for port in (*d["inputs"], *d["outputs"]):
            assert port["help"], (type_name, port["name"])
        for p in d["params"]:
            assert p["help"] and p["label"], (type_name, p["name"])
        assert types[type_name].module.endswith(".flow_nodes")
    assert items["llm.train"]["inputs"][2] == {
        "name": "rewards",
        "type": "reward_fn",
        "required": False,
        "multiple": True,
        "help": items["llm.train"]["inputs"][2]["help"],
    }
    # Deploying talks to a server outside the graph: it runs every time.
    assert items["export.ollama"]["cacheable"] is False
    assert items["llm.base_model"]["cacheable"] is False
    assert items["llm.train"]["cacheable"] is True


def test_the_catalog_copies_of_engine_names_agree() -> None:
    """The node modules keep their own copies of names whose modules import
    numpy; they must match the engine's."""
    from engine.llm import flow_nodes as llm_nodes
    from engine.llm import rewards

    assert tuple(rewards.REWARDS) == llm_nodes.REWARD_KINDS


def test_building_the_catalog_imports_no_heavy_library() -> None:
    code = (
        "import sys; import engine.nodes as n; c = n.catalog(); "
        "assert {'llm.train', 'export.gguf'} <= {d['type'] for d in c}; "
        "assert 'engine.llm.flow_nodes' in sys.modules; "
        "print([m for m in ('torch', 'transformers', 'trl', 'peft', 'numpy', "
        "'gguf', 'datasets', 'gymnasium') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("node", "params", "message"),
    [
        ("base", {"model": "  "}, "model is empty; give a model folder or a hub id"),
        ("collect", {"episodes": 0}, "episodes must be at least 1, not 0."),
        ("collect", {"policy": "ppo"}, "policy must be one of llm, expert, rule"),
        ("collect", {"noise": 1.5}, "noise must be at most 1"),
        ("dataset", {"method": "ppo"}, "method must be one of grpo, kto, dpo, sft"),
        (
            "dataset",
            {"validation_fraction": 1.0},
            "validation_fraction must be less than 1",
        ),
        ("reward_env", {"kind": "vibes"}, "kind must be one of env_reward"),
        ("reward_env", {"settings": "{unparsed: 1"}, "settings is not valid JSON"),
        (
            "reward_env",
            {"settings": '{"weight": 2}'},
            "settings must not set 'weight'; it has its own parameter.",
        ),
        (
            "train",
            {"num_generations": 1},
            "num_generations must be at least 2, not 1.",
        ),
        (
            "train",
            {"batch_size": 2, "num_generations": 4},
            "num_generations (4) must divide batch_size x gradient_accumulation_steps"
            " x num_processes (2 x 1 x 1), as GRPO requires.",
        ),
        pytest.param(
            "train",
            {"use_vllm": True},
            "vLLM generation needs the vllm package, which is not installed.",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("vllm") is not None, reason="vllm installed"
            ),
        ),
        pytest.param(
            "train",
            {"strategy": "deepspeed_zero3"},
            "The strategy deepspeed_zero3 needs the deepspeed package, which is not "
            "installed (pip install deepspeed); use ddp or fsdp.",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("deepspeed") is not None,
                reason="deepspeed installed",
            ),
        ),
        (
            "train",
            {"settings": '{"max_steps": 3}'},
            "settings must not set 'max_steps'; it has its own parameter or input.",
        ),
        (
            "train",
            {"settings": '{"epochs": 3}'},
            "settings has an unknown training setting 'epochs'.",
        ),
        ("train", {"learning_rate": 0}, "learning_rate must be greater than 0"),
        ("train", {"method": "ppo"}, "method must be one of auto, grpo"),
        ("merge", {"dtype": "int8"}, "dtype must be one of float32, float16"),
        ("export", {"type": "q4_K_M"}, "type must be one of f32, f16, bf16, q8_0"),
        ("evaluate", {"episodes": 0}, "episodes must be at least 1, not 0."),
        ("deploy", {"name": "my agent!"}, "is not a valid Ollama model name"),
        (
            "deploy",
            {"host": "ftp://ollama.local"},
            "host must be a URL like http://127.0.0.1:11434",
        ),
        ("deploy", {"quantize": "q2_K"}, "quantize must be one of none, q4_K_M"),
    ],
)
def test_validation_refuses_bad_parameters_per_node(
    node: str, params: dict[str, Any], message: str
) -> None:
    doc = flow.load(EXAMPLE)
    doc.node(node).params.update(params)
    errors = validate_flow(document=doc.to_dict())
    assert list(errors) == [node]
    (problem,) = errors[node]
    assert message in problem, problem


def test_validation_accepts_good_edge_values_and_names_unlinked_inputs() -> None:
    doc = flow.load(EXAMPLE)
    doc.node("deploy").params.update(host="ollama.local:11434", name="team/agent:v2")
    doc.node("train").params.update(
        method="auto", batch_size=2, num_generations=4, gradient_accumulation_steps=2
    )
    assert validate_flow(document=doc.to_dict()) == {}
    doc.links = [lk for lk in doc.links if lk.to_node != "train"]
    assert validate_flow(document=doc.to_dict())["train"] == [
        "The required input 'model' (hf_model) is not linked.",
        "The required input 'dataset' (dataset) is not linked.",
    ]


# ---------------------------------------------------------------- example


def test_the_example_flow_is_a_real_users_grpo_pipeline(tmp_path: Path) -> None:
    assert validate_flow(path=str(EXAMPLE)) == {}
    doc = flow.load(EXAMPLE)
    assert flow.topological_order(doc) == CHAIN
    assert doc.node("env").params["env"] == "rlstudio/jira_issue_resolution-v0"
    assert doc.node("base").params["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert doc.node("dataset").params["method"] == "grpo"
    assert doc.node("train").params["method"] == "grpo"
    assert {doc.node(n).params["kind"] for n in ("reward_env", "reward_format")} == {
        "env_reward",
        "format",
    }
    assert {lk.from_node for lk in doc.links_into("train", "rewards")} == {
        "reward_env",
        "reward_format",
    }
    assert doc.node("export").params["type"] == "q8_0"
    assert doc.node("deploy").params["host"] == "http://127.0.0.1:11434"
    # A new project gets it with the other examples; the Workflows workspace
    # lists the project's flows from this snapshot.
    project = Project.open(
        tmp_path / "fresh", create=True, examples=resource_path("examples")
    )
    try:
        flows = {f["name"]: f for f in project.snapshot()["flows"]}
    finally:
        project.close()
    assert {"cartpole_ppo", "jira_maskable_ppo", "jira_llm_grpo"} <= set(flows)
    assert flows["jira_llm_grpo"]["description"].startswith("Teach Qwen2.5")
    assert "error" not in flows["jira_llm_grpo"]


def test_the_workflows_workspace_lists_and_opens_the_example(
    qtbot, tmp_path: Path
) -> None:
    from PySide6.QtCore import QSettings

    from studio.engine_client import EngineClient
    from studio.session import Session
    from studio.settings import Settings
    from studio.state.project_state import ProjectState
    from studio.workflows.workspace import WorkflowsWorkspace

    project = Project.open(
        tmp_path / "fresh", create=True, examples=resource_path("examples")
    )
    try:
        snapshot = project.snapshot()
    finally:
        project.close()
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    state = ProjectState()
    ws = WorkflowsWorkspace(Session(EngineClient(), state, settings))  # no engine
    qtbot.addWidget(ws)
    state.load_snapshot(snapshot)
    ws.set_catalog(catalog())
    # the Flows tab lists it with the other examples, and the Recent menu too
    records = {r["name"]: r for r in ws.editor.flows_table.model.records}
    assert {"cartpole_ppo", "jira_maskable_ppo", "jira_llm_grpo"} <= set(records)
    ws.recent_menu.aboutToShow.emit()
    assert "jira_llm_grpo" in [a.text() for a in ws.recent_menu.actions()]
    ws.editor.flows_table.activation_requested.emit(records["jira_llm_grpo"]["path"])
    assert ws.model.path == tmp_path / "fresh" / "flows" / "jira_llm_grpo.flow.json"
    assert sorted(ws.editor.node_ids()) == sorted(CHAIN)
    assert len(ws.editor.links()) == len(flow.load(EXAMPLE).links)
    assert ws.editor.validate() == {}


# ------------------------------------------------------- the chain headless


def engine_run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", "run", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def overrides(**extra: Any) -> list[str]:
    out: list[str] = []
    for key, value in {**QUICK, **extra}.items():
        out += ["--set", f"{key}={value}"]
    return out


class Chain:
    """A project with the example flow run once on a tiny model, deploying
    to a fake Ollama server."""

    def __init__(self, root: Path, ollama: FakeOllama) -> None:
        self.root = root
        self.ollama = ollama
        self.model = build_tiny_model(root / "tiny-qwen2")
        self.project = root / "project"
        self.first = self.run()

    def run(self, *extra: str) -> subprocess.CompletedProcess:
        return engine_run(
            EXAMPLE,
            "--project",
            self.project,
            "--quiet",
            *overrides(**{"base.model": self.model, "deploy.host": self.ollama.host}),
            *extra,
        )


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with FakeOllama() as ollama:
        yield Chain(tmp_path_factory.mktemp("llm-flow"), ollama)


@pytest.mark.slow
def test_the_whole_llm_chain_runs_headless(chain: Chain) -> None:
    import gguf

    proc = chain.first
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)  # stdout holds the summary alone
    assert summary["status"] == "completed"
    assert summary["order"] == CHAIN and summary["ran"] == CHAIN
    nodes = summary["nodes"]
    assert {n: nodes[n]["state"] for n in CHAIN} == dict.fromkeys(CHAIN, "done")

    base = nodes["base"]["outputs"]["model"]
    assert base["path"] == str(chain.model.resolve())
    assert (base["model_type"], base["chat_family"]) == ("qwen2", "chatml")
    trajectories = nodes["collect"]["outputs"]["trajectories"]
    assert trajectories["stats"]["episodes"] == 4
    assert trajectories["env_id"] == "rlstudio/jira_issue_resolution-v0"
    lines = Path(trajectories["file"]).read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["policy"].startswith("llm:")
    data = nodes["dataset"]["outputs"]["dataset"]
    assert data["method"] == "grpo" and data["stats"]["train"] >= 1
    adapter = nodes["train"]["outputs"]["adapter"]
    assert adapter["method"] == "grpo" and adapter["metrics"]["global_step"] == 2
    assert (Path(adapter["path"]) / "adapter_config.json").is_file()
    assert nodes["train"]["summary"]["global_step"] == 2
    merged = nodes["merge"]["outputs"]["model"]
    assert merged["kind"] == "hf-merged" and merged["adapter"] == adapter["path"]

    # training metrics go to the curves, not as printed rows into the log
    assert "{'loss'" not in proc.stderr
    # both reward nodes reached GRPO: their curves are in the flow's metrics
    run_dir = Path(proc.stderr.split("run folder: ")[1].splitlines()[0])
    metrics = (run_dir / "metrics.jsonl").read_text()
    assert "train/reward/env_reward_mean" in metrics
    assert "train/reward/format_mean" in metrics
    assert "collect/rollout/ep_rew" in metrics
    # ... and each lands in a named chart of the dashboard, none in "Other".
    from studio.training.metric_vocabulary import group_of as group_for_key
    from widgets.live_plot import OTHER_GROUP

    keys = {
        k
        for line in metrics.splitlines()
        for k in json.loads(line)
        if k not in ("step", "time")
    }
    groups = {k: group_for_key(k) for k in keys}
    assert keys and {k for k, g in groups.items() if g == OTHER_GROUP} == set()
    assert group_for_key("train/reward/env_reward_mean") == "Rewards"

    report = nodes["evaluate"]["outputs"]["report"]
    # the models, then the random and expert references on the same episodes
    assert list(report["results"]) == ["before", "after", "random", "expert"]
    assert report["results"]["after"]["episodes"] == 2
    assert set(report["comparison"]) >= {"success_rate", "invalid_action_rate"}
    assert Path(report["plot"]).read_bytes().startswith(b"\x89PNG")

    # the GGUF, read back independently
    out = nodes["export"]["outputs"]["gguf"]
    assert out["type"] == "q8_0" and out["kind"] == "model" and out["verified"]
    reader = gguf.GGUFReader(out["file"])
    fields = reader.fields
    arch = fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "qwen2"
    ftype = fields["general.file_type"]
    assert int(ftype.parts[ftype.data[0]][0]) == gguf.LlamaFileType.MOSTLY_Q8_0
    kinds = {t.tensor_type for t in reader.tensors}
    assert gguf.GGMLQuantizationType.Q8_0 in kinds
    assert len(reader.tensors) == nodes["export"]["summary"]["tensors"]

    # deployed to the (fake) server with the ChatML template and stops
    deploy = nodes["deploy"]["outputs"]["report"]
    assert deploy["deployed"] is True and deploy["name"] == "jira-agent"
    assert deploy["command"] == "ollama run jira-agent"
    assert "jira-agent:latest" in chain.ollama.models
    (create,) = [b for m, p, b in chain.ollama.requests if p == "/api/create"]
    assert create["model"] == "jira-agent"
    assert "<|im_start|>" in create["template"]
    assert "<|im_end|>" in create["parameters"]["stop"]

    # the models are registered with their lineage: base -> adapter -> merged
    # -> GGUF, each also linked to the flow run
    project = Project.open(chain.project)
    try:
        records = {m.kind: m for m in project.list_models()}
        (run,) = project.list_runs()
        assert set(records) == {"lora-adapter", "hf-merged", "gguf"}
        lora, full, file = (
            records["lora-adapter"],
            records["hf-merged"],
            records["gguf"],
        )
        assert sorted(summary["registered_models"]) == sorted(
            m.id for m in records.values()
        )
        assert lora.name == "Jira GRPO agent" and lora.algo == "GRPO"
        assert lora.env == "rlstudio/jira_issue_resolution-v0" == file.env
        assert full.name == "Jira GRPO agent merged"
        assert file.name == "jira-grpo-agent (Q8_0)"
        assert Path(file.path).read_bytes()[:4] == b"GGUF"
        links = set(project.lineage(file.id))
        assert {
            (base["path"], lora.id, "derived"),
            (lora.id, full.id, "derived"),
            (full.id, file.id, "derived"),
        } <= links
        assert {(run.id, m.id, "trained") for m in records.values()} <= links
    finally:
        project.close()


@pytest.mark.slow
def test_the_flows_report_is_listed_in_models_and_models_are_stored_once(
    chain: Chain,
) -> None:
    """The Evaluate node's before/after report reaches Models → Evaluation
    report; the adapter and the merged model the flow wrote are the
    registered models' folders, one per model under ``models/<id>/``."""
    from studio.state.model_catalog import evaluation_reports
    from studio.state.traces import load_report

    assert chain.first.returncode == 0, chain.first.stderr[-4000:]
    nodes = json.loads(chain.first.stdout)["nodes"]
    project = Project.open(chain.project)
    try:
        snapshot = project.snapshot()
    finally:
        project.close()
    report_file = nodes["evaluate"]["outputs"]["report"]["report_file"]
    ((title, path),) = evaluation_reports(snapshot["runs"])
    assert path == report_file and title.endswith(" · evaluate")
    assert load_report(path).labels == ["before", "after", "random", "expert"]
    paths = {m["kind"]: Path(m["path"]) for m in snapshot["models"]}
    assert paths["lora-adapter"] == Path(nodes["train"]["outputs"]["adapter"]["path"])
    assert paths["hf-merged"] == Path(nodes["merge"]["outputs"]["model"]["path"])
    folders = sorted(p.name for p in (chain.project / "models").iterdir())
    assert folders == sorted(m["id"] for m in snapshot["models"])


@pytest.mark.slow
def test_a_rerun_reuses_every_cached_node_and_deploys_again(chain: Chain) -> None:
    assert chain.first.returncode == 0, chain.first.stderr[-4000:]
    first = json.loads(chain.first.stdout)
    creates_before = sum(p == "/api/create" for _, p, _ in chain.ollama.requests)
    again = chain.run()
    assert again.returncode == 0, again.stderr[-4000:]
    summary = json.loads(again.stdout)
    assert summary["status"] == "completed"
    # env and base model are re-checked (files outside the graph), deploy asks
    # the server again; everything between comes from the cache
    assert summary["ran"] == ["env", "base", "deploy"]
    assert summary["cached"] == [n for n in CHAIN if n not in summary["ran"]]
    for node in ("train", "merge", "export", "evaluate"):
        assert summary["nodes"][node]["outputs"] == first["nodes"][node]["outputs"]
        assert "Unchanged since run" in summary["nodes"][node]["message"]
    assert summary["models"] == [] and "registered_models" not in summary
    creates = sum(p == "/api/create" for _, p, _ in chain.ollama.requests)
    assert creates == creates_before + 1
    # a new Ollama name redeploys only; a new GGUF type re-exports only
    renamed = chain.run("--set", "export.type=f16")
    assert renamed.returncode == 0, renamed.stderr[-4000:]
    summary = json.loads(renamed.stdout)
    assert summary["ran"] == ["env", "base", "export", "deploy"]
    (model,) = summary["models"]
    assert model["kind"] == "gguf" and model["name"] == "jira-grpo-agent (F16)"
    # its merged parent came from the cache, registered by the first run: the
    # lineage still links the two models
    (new_id,) = summary["registered_models"]
    project = Project.open(chain.project)
    try:
        (merged,) = [m for m in project.list_models() if m.kind == "hf-merged"]
        assert (merged.id, new_id, "derived") in project.lineage(new_id)
    finally:
        project.close()


@pytest.mark.slow
def test_without_a_server_deploy_leaves_a_bundle_and_says_so(
    chain: Chain, tmp_path: Path
) -> None:
    assert chain.first.returncode == 0, chain.first.stderr[-4000:]
    proc = chain.run("--set", "deploy.host=http://127.0.0.1:9", "--only", "deploy")
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    report = summary["nodes"]["deploy"]["outputs"]["report"]
    assert report["deployed"] is False
    assert report["message"].startswith("No Ollama server answers at http://127.0")
    bundle = Path(report["bundle_dir"])
    assert (bundle / "Modelfile").read_text().startswith("FROM ./jira-grpo-agent-")
    assert "ollama create jira-agent -f Modelfile" in (bundle / "README.md").read_text()
    assert "No Ollama server answers" in proc.stderr  # the node logged it


@pytest.mark.slow
def test_an_adapter_exports_as_lora_gguf_and_deploys_over_the_base(
    chain: Chain, tmp_path: Path
) -> None:
    """The same flow (same name, so the same cache) with a second branch:
    the base model and the trained adapter exported apart, the adapter
    served on top of the base by Ollama."""
    import gguf

    assert chain.first.returncode == 0, chain.first.stderr[-4000:]
    doc = flow.load(EXAMPLE)
    doc.nodes += [
        flow.Node("export_base", "export.gguf", {"type": "f16"}, x=1440, y=500),
        flow.Node("export_lora", "export.gguf", {"type": "q4_0"}, x=1440, y=640),
        flow.Node("deploy_lora", "export.ollama", {"name": "jira-lora"}, x=1720, y=560),
    ]
    doc.links += [
        flow.Link("base", "model", "export_base", "model"),
        flow.Link("train", "adapter", "export_lora", "adapter"),
        flow.Link("export_base", "gguf", "deploy_lora", "gguf"),
        flow.Link("export_lora", "gguf", "deploy_lora", "adapter"),
    ]
    path = tmp_path / "with_lora.flow.json"
    flow.save(doc, path)

    def run(*extra: str) -> dict[str, Any]:
        proc = engine_run(
            path,
            "--project",
            chain.project,
            "--quiet",
            "--only",
            "deploy_lora",
            *overrides(**{"base.model": chain.model}),
            "--set",
            f"deploy_lora.host={chain.ollama.host}",
            *extra,
        )
        assert proc.stdout, proc.stderr[-4000:]
        return dict(json.loads(proc.stdout))

    # 4-bit blocks do not fit rank-sized rows: refused in one sentence
    summary = run()
    assert summary["failed"] == ["export_lora"]
    assert summary["nodes"]["export_lora"]["message"] == (
        "A LoRA adapter exports as f32, f16, bf16, q8_0, not q4_0; rank-sized "
        "rows do not fit 4/5-bit blocks."
    )
    assert summary["nodes"]["deploy_lora"]["state"] == "skipped"
    assert "train" in summary["cached"]  # the adapter came from the cache
    # the run failed, yet the base GGUF export_base made is registered
    assert [m["name"] for m in summary["models"]] == ["tiny-qwen2 (F16)"]
    assert len(summary["registered_models"]) == 1

    summary = run("--set", "export_lora.type=q8_0")
    assert summary["status"] == "completed", summary.get("reason")
    # export_base succeeded in the failed run: cached now, its model
    # registered then and not again
    assert summary["ran"] == ["env", "base", "export_lora", "deploy_lora"]
    assert "export_base" in summary["cached"]
    lora = summary["nodes"]["export_lora"]["outputs"]["gguf"]
    assert lora["kind"] == "adapter" and lora["type"] == "q8_0"
    assert Path(lora["file"]).name == "Jira-GRPO-agent-lora-q8_0.gguf"
    reader = gguf.GGUFReader(lora["file"])
    kind = reader.fields["general.type"]
    assert bytes(kind.parts[kind.data[0]]).decode() == "adapter"
    assert any(t.name.endswith(".lora_a") for t in reader.tensors)
    report = summary["nodes"]["deploy_lora"]["outputs"]["report"]
    assert report["deployed"] is True
    create = [b for m, p, b in chain.ollama.requests if p == "/api/create"][-1]
    assert create["model"] == "jira-lora"
    assert list(create["adapters"]) == [Path(lora["file"]).name]
    assert [m["name"] for m in summary["models"]] == ["Jira-GRPO-agent-lora (Q8_0)"]
    assert len(summary["registered_models"]) == 1


# ------------------------------------------------------------ bad input


def run_in_process(project: Path, doc: flow.FlowDocument) -> dict[str, Any]:
    run_dir = project / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ctx = JobContext("r1", run_dir, "flow.run", {}, events=io.StringIO())
    try:
        return executor.run_flow(ctx, doc, flow_name="t")
    finally:
        ctx.close()


def test_stop_during_fine_tuning_stops_the_node_and_skips_the_rest(
    tmp_path: Path,
) -> None:
    """Stop goes through NodeRun into TRL's callback: training ends after the
    step in progress, nothing downstream runs, nothing is cached."""
    project = tmp_path / "project"
    Project.open(project, create=True, examples=resource_path("examples")).close()
    doc = flow.load(EXAMPLE)
    for key, value in QUICK.items():
        node_id, param = key.split(".")
        doc.node(node_id).params[param] = value
    doc.node("base").params["model"] = str(build_tiny_model(tmp_path / "tiny"))
    # the noisy expert needs no model: rollouts in a blink
    doc.node("collect").params.update(policy="expert", noise=0.3)
    # batch size from the hardware (a CPU says 1), raised to fit 2 answers
    doc.node("train").params.update(max_steps=500, batch_size=None)
    run_dir = project / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ctx = JobContext("r1", run_dir, "flow.run", {}, events=io.StringIO())
    seen: list[tuple[str, str]] = []

    def on_state(event: protocol.FlowNodeState) -> None:
        seen.append((event.node_id, event.state))
        if event.node_id == "train" and event.state == "running" and event.progress > 0:
            ctx.request_stop()  # what the Stop button does, once a step is done

    try:
        summary = executor.run_flow(ctx, doc, flow_name="t", on_state=on_state)
    finally:
        ctx.close()
    assert summary["status"] == "stopped"
    nodes = summary["nodes"]
    assert nodes["collect"]["state"] == nodes["dataset"]["state"] == "done"
    assert nodes["train"]["state"] == "stopped"
    for node in ("merge", "export", "evaluate", "deploy"):
        assert nodes[node]["state"] == "skipped"
        assert nodes[node]["message"] == "The run was stopped."
    assert summary["models"] == []
    cache = project / "data" / "flow-cache" / "t"
    assert (cache / "dataset.json").exists() and not (cache / "train.json").exists()
    rows = [
        json.loads(line)
        for line in (run_dir / "nodes" / "train" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    assert 1 <= max(r["step"] for r in rows) < 500
    assert ("train", "stopped") in seen
    config = json.loads((run_dir / "nodes" / "train" / "config.json").read_text())
    assert config["kind"] == "llm.train"
    assert config["config"]["batch_size"] % config["config"]["num_generations"] == 0


def test_a_missing_base_model_fails_in_one_sentence_and_skips_downstream(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    Project.open(project, create=True, examples=resource_path("examples")).close()
    doc = flow.load(EXAMPLE)
    missing = tmp_path / "nowhere" / "qwen"
    doc.node("base").params["model"] = str(missing)
    summary = run_in_process(project, doc)
    assert summary["status"] == "failed" and summary["failed"] == ["base"]
    message = summary["nodes"]["base"]["message"]
    assert message == (
        f"Model folder {missing} does not exist; put a Hugging Face model folder "
        "there (config.json, weights, tokenizer) or give a hub id already in the "
        "local cache."
    )
    independent = {"env", "reward_env", "reward_format"}
    for node in CHAIN:
        state = summary["nodes"][node]
        if node in independent:
            assert state["state"] == "done", (node, state)
        elif node != "base":
            assert state == {
                "state": "skipped",
                "progress": 0.0,
                "message": "Not run: 'Qwen2.5 0.5B Instruct' (base) failed.",
            }, node
    assert summary["reason"] == (
        f"The node 'base' (Qwen2.5 0.5B Instruct) failed: {message}"
    )
    assert summary["models"] == []


def test_links_the_graph_cannot_judge_fail_in_one_sentence(tmp_path: Path) -> None:
    """Optional inputs and choices that only make sense together: each
    node says what to link or choose, before any model is loaded."""
    project = tmp_path / "project"
    Project.open(project, create=True, examples=resource_path("examples")).close()
    model = tmp_path / "model"  # complete enough for the checks, never loaded
    model.mkdir()
    (model / "config.json").write_text(
        '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}'
    )
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    (model / "tokenizer.json").write_text("{}")
    env = {"env": "jira_status_update"}
    expert = {"policy": "expert", "noise": 0.0, "episodes": 3, "max_steps": 12}
    doc = flow.FlowDocument(
        name="t",
        nodes=[
            flow.Node("env", "env.environment", env),
            flow.Node("base", "llm.base_model", {"model": str(model)}),
            flow.Node("expert", "llm.collect", expert),
            flow.Node("sft", "llm.dataset", {"method": "sft"}),
            flow.Node("reward", "llm.reward", {"kind": "format"}),
            flow.Node("grpo_on_sft", "llm.train", {"method": "grpo"}),
            flow.Node("rewards_on_sft", "llm.train", {"method": "auto"}),
            flow.Node("no_model", "llm.collect", {"policy": "llm"}),
            flow.Node("nothing", "llm.evaluate"),
            flow.Node("export", "export.gguf"),
        ],
        links=[
            flow.Link("env", "env", "expert", "env"),
            flow.Link("expert", "trajectories", "sft", "trajectories"),
            *[
                flow.Link(src, port, node, to)
                for node in ("grpo_on_sft", "rewards_on_sft")
                for src, port, to in (
                    ("base", "model", "model"),
                    ("sft", "dataset", "dataset"),
                )
            ],
            flow.Link("reward", "reward", "rewards_on_sft", "rewards"),
            flow.Link("env", "env", "no_model", "env"),
            flow.Link("env", "env", "nothing", "env"),
        ],
    )
    assert validate_flow(document=doc.to_dict()) == {}
    summary = run_in_process(project, doc)
    nodes = summary["nodes"]
    assert nodes["sft"]["outputs"]["dataset"]["method"] == "sft"
    failed = {n: nodes[n]["message"] for n in summary["failed"]}
    assert failed == {
        "grpo_on_sft": "The dataset was built for SFT, not GRPO; build it with "
        "method 'grpo' or fine-tune with method 'sft'.",
        "rewards_on_sft": "Reward functions steer GRPO only, not SFT; unlink them "
        "or fine-tune with method grpo.",
        "no_model": "Link a language model to the model input, or choose policy "
        "expert or rule.",
        "nothing": "Link a model or an adapter to evaluate.",
        "export": "Link a model or an adapter to export.",
    }


def test_a_hub_id_resolves_from_the_local_cache_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hf-cache"
    snapshot = cache / "models--acme--tiny-chat" / "snapshots" / "abc123"
    shutil.copytree(build_tiny_model(tmp_path / "tiny"), snapshot)
    (cache / "models--acme--tiny-chat" / "refs").mkdir()
    (cache / "models--acme--tiny-chat" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    project = tmp_path / "project"
    doc = flow.FlowDocument(
        name="t",
        nodes=[
            flow.Node("hub", "llm.base_model", {"model": "acme/tiny-chat"}),
            flow.Node("gone", "llm.base_model", {"model": "acme/never-downloaded"}),
        ],
    )
    summary = run_in_process(project, doc)
    hub = summary["nodes"]["hub"]
    assert hub["state"] == "done"
    assert hub["outputs"]["model"]["path"] == str(snapshot)
    assert hub["outputs"]["model"]["name"] == "tiny-chat"
    assert hub["summary"]["architecture"] == "Qwen2ForCausalLM"
    gone = summary["nodes"]["gone"]
    assert gone["state"] == "failed"
    assert gone["message"].startswith(
        "Model 'acme/never-downloaded' is not in the local Hugging Face cache"
    )
    # it names the cache this engine looked in, where a download belongs
    assert f"cache ({cache}) and this engine works offline" in gone["message"]
    assert gone["message"].count(". ") == 0  # one sentence
