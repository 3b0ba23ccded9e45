"""What the GUI offers of llm.train's scale-out settings: the strategies this
machine's packages and hardware allow, vLLM generation disabled with its
reason, derived from one engine function (``distributed.machine_offers``)
through the settings metadata, node parameters and ParamForm; an old flow
asking for a strategy not offered here still loads and is refused at run
time in one sentence."""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel
from tiny_models import build_tiny_model

from engine import flow, hardware
from engine.jobs.context import JobContext
from engine.llm import distributed
from engine.llm.train import TrainConfig
from engine.nodes import executor, validate_flow
from engine.nodes.registry import specs
from engine.settings import Offer, fields_of, form_field, param_spec, setting
from engine.store.project import Project
from resources import resource_path
from studio.workflows.inspector import param_schema
from widgets.param_form import ParamForm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "resources" / "examples" / "flows" / "jira_llm_grpo.flow.json"
CUDA_HERE = distributed.machine_device() == "cuda"
REAL_FIND_SPEC = importlib.util.find_spec


def machine(monkeypatch: pytest.MonkeyPatch, *, cuda: bool, packages: set[str]) -> None:
    """Pretend this machine has (or lacks) a CUDA GPU and only ``packages``
    of deepspeed and vllm."""
    gpus = (
        [hardware.GpuInfo(0, "Test GPU", "cuda", 16 << 30, True, "8.0")] if cuda else []
    )
    monkeypatch.setattr(hardware, "detect_gpus", lambda *a, **k: list(gpus))

    def find_spec(name: str, *args: Any) -> Any:
        if name in ("deepspeed", "vllm"):
            return object() if name in packages else None
        return REAL_FIND_SPEC(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


# ------------------------------------------------------------ the function
def test_a_cpu_machine_offers_ddp_and_disables_vllm(monkeypatch) -> None:
    machine(monkeypatch, cuda=False, packages={"deepspeed", "vllm"})
    offers = distributed.machine_offers()
    assert offers["strategy"] == Offer(choices=("ddp",))
    assert offers["use_vllm"].disabled == (
        "vLLM generation needs a CUDA GPU, and this machine has none."
    )


def test_cuda_without_packages_offers_ddp_and_fsdp(monkeypatch) -> None:
    machine(monkeypatch, cuda=True, packages=set())
    offers = distributed.machine_offers()
    assert offers["strategy"].choices == ("ddp", "fsdp")
    assert offers["use_vllm"].disabled == (
        "vLLM generation needs the vllm package, which is not installed."
    )


def test_cuda_with_the_packages_offers_everything(monkeypatch) -> None:
    machine(monkeypatch, cuda=True, packages={"deepspeed", "vllm"})
    offers = distributed.machine_offers()
    assert offers["strategy"].choices == distributed.STRATEGIES
    assert offers["use_vllm"] == Offer()


def test_the_offers_reach_form_fields_and_node_parameters(monkeypatch) -> None:
    machine(monkeypatch, cuda=False, packages=set())
    infos = fields_of(TrainConfig)
    field = form_field(infos["strategy"])
    assert field["choices"] == ["ddp"]
    assert field["unoffered"] == ["fsdp", "deepspeed_zero2", "deepspeed_zero3"]
    spec = param_spec(infos["strategy"])
    # every strategy still validates (an old flow loads); the form lists ddp
    assert spec.choices == distributed.STRATEGIES and spec.offered == ("ddp",)
    assert flow.check_param(spec, "fsdp") is None
    vllm = param_spec(infos["use_vllm"])
    assert vllm.disabled.startswith("vLLM generation needs a CUDA GPU")
    assert flow.ParamSpec.from_dict(vllm.to_dict()) == vllm
    assert form_field(infos["use_vllm"])["disabled"] == vllm.disabled
    # a setting without an offer is offered whole
    assert "unoffered" not in form_field(infos["precision"])
    assert param_spec(infos["precision"]).offered == ()


def test_a_setting_declares_its_offer_once() -> None:
    @dataclass
    class Config:
        mode: str = setting(
            "a", choices=("a", "b", "c"), offer=lambda: Offer(choices=("a", "c"))
        )
        turbo: bool = setting(False, offer=lambda: Offer(disabled="No turbo here."))

    infos = fields_of(Config)
    assert form_field(infos["mode"])["choices"] == ["a", "c"]
    assert param_spec(infos["mode"]).offered == ("a", "c")
    assert form_field(infos["turbo"])["disabled"] == "No turbo here."


# -------------------------------------------------------------------- form
@pytest.mark.skipif(CUDA_HERE, reason="this machine has a CUDA GPU")
def test_the_fine_tune_form_offers_what_this_cpu_machine_allows(qtbot) -> None:
    spec = specs()["llm.train"]
    form = ParamForm()
    qtbot.addWidget(form)
    form.set_schema([param_schema(p) for p in spec.params])
    combo = form.editor("strategy")
    assert isinstance(combo, QComboBox)
    assert [combo.itemText(i) for i in range(combo.count())] == ["ddp"]
    box = form.editor("use_vllm")
    assert isinstance(box, QCheckBox) and not box.isEnabled()
    reason = "vLLM generation needs a CUDA GPU, and this machine has none."
    assert box.toolTip() == reason
    note = form.findChild(QLabel, "use_vllm-disabled")
    assert note is not None and note.text() == f"Unavailable here: {reason}"
    assert form.values()["use_vllm"] is False and form.is_valid()
    # an old flow's strategy is shown as it is and kept, not swapped for ddp
    form.set_schema([param_schema(p) for p in spec.params], {"strategy": "fsdp"})
    combo = form.editor("strategy")
    assert isinstance(combo, QComboBox)
    assert combo.currentText() == "fsdp (not available here)"
    assert form.values()["strategy"] == "fsdp"


# ------------------------------------------------------------ an old flow
@pytest.mark.skipif(CUDA_HERE, reason="this machine has a CUDA GPU")
def test_an_old_flow_asking_for_fsdp_loads_and_is_refused_at_run_time(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    Project.open(project, create=True, examples=resource_path("examples")).close()
    doc = flow.load(EXAMPLE)
    doc.node("base").params["model"] = str(build_tiny_model(tmp_path / "tiny"))
    doc.node("collect").params.update(
        policy="expert", noise=0.3, episodes=2, num_envs=2, max_steps=4
    )
    doc.node("train").params.update(
        strategy="fsdp",
        max_steps=1,
        batch_size=2,
        num_generations=2,
        settings='{"precision": "fp32", "device": "cpu"}',
    )
    saved = tmp_path / "old.flow.json"
    flow.save(doc, saved)
    before = saved.read_bytes()
    old = flow.load(saved)  # loads as it is
    assert old.node("train").params["strategy"] == "fsdp"
    assert not validate_flow(path=str(saved)).get("train")
    run_dir = project / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ctx = JobContext("r1", run_dir, "flow.run", {}, events=io.StringIO())
    try:
        summary = executor.run_flow(ctx, old, flow_name="t")
    finally:
        ctx.close()
    assert summary["status"] == "failed" and summary["failed"] == ["train"]
    assert summary["nodes"]["train"]["message"] == (
        "The strategy fsdp needs CUDA GPUs and this run trains on the cpu; use "
        "ddp, which runs on any device."
    )
    assert saved.read_bytes() == before  # nothing saved was changed
    (train,) = [n for n in json.loads(before)["nodes"] if n["id"] == "train"]
    assert train["params"]["strategy"] == "fsdp"
