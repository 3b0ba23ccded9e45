"""End to end on the CPU with a tiny model built here: collect rollouts in the
Jira env, build every dataset kind, train every method for a step or two,
stop and resume, merge, evaluate — each through its job kind's validator
and job function with a real JobContext."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tiny_models import build_tiny_model

from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, load, validate_config
from engine.llm.rollouts import iter_traces

ROOT = Path(__file__).resolve().parents[1]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
TRAIN = {
    "max_steps": 1,
    "batch_size": 2,
    "num_generations": 2,
    "max_length": 512,
    "max_completion_length": 4,
    "lora_rank": 4,
    "save_steps": 0,
    "seed": 0,
    "precision": "fp32",
    "device": "cpu",
    "gradient_checkpointing": False,
}


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = build_tiny_model(root / "base")
        self.datasets: dict[str, str] = {}
        self.adapters: dict[str, str] = {}

    def job(
        self,
        kind: str,
        config: dict[str, Any],
        *,
        stop: bool = False,
        run_id: str | None = None,
        resume: bool = False,
    ) -> tuple[dict, Path]:
        cfg = validate_config(kind, config)
        run_id = run_id or f"{kind.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
        run_dir = self.root / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        ctx = JobContext(run_id, run_dir, kind, cfg, resume=resume)
        if stop:
            ctx.request_stop()
        try:
            summary = load(get_kind(kind).entry)(ctx)
        finally:
            ctx.close()
        json.dumps(summary)  # the supervisor sends it as JSON
        return summary, run_dir


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return Project(tmp_path_factory.mktemp("llm-project"))


def metrics_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    )


def test_collect_with_the_language_model(project: Project) -> None:
    summary, run_dir = project.job(
        "llm.collect",
        {
            "env": ENV,
            "policy": "llm",
            "model": str(project.model),
            "episodes": 3,
            "num_envs": 3,
            "max_new_tokens": 3,
            "max_steps": 3,
            "seed": 0,
            "name": "lm",
        },
    )
    eps = list(iter_traces(summary["traces"]))
    assert len(eps) == 3 and summary["stats"]["episodes"] == 3
    step = eps[0]["steps"][0]
    assert (
        step["messages"][0]["role"] == "system"
        and "Available tools" in (step["messages"][1]["content"])
    )
    assert isinstance(step["completion"], str) and "state" in step
    # an untrained model names no tool: every step fell back and was counted
    assert summary["stats"]["unparsed_rate"] > 0.5
    assert summary["stats"]["tokens_per_s"] > 0
    assert any("rollout/ep_rew" in r for r in metrics_rows(run_dir))


def test_build_every_dataset_kind(project: Project) -> None:
    project.job(
        "llm.collect",
        {
            "env": ENV,
            "policy": "expert",
            "noise": 0.3,
            "episodes": 24,
            "seed": 0,
            "name": "expert",
        },
    )
    for method in ("sft", "kto", "dpo", "grpo"):
        summary, _ = project.job(
            "llm.dataset",
            {
                "traces": ["expert.jsonl", "lm.jsonl"],
                "method": method,
                "seed": 0,
                "name": method,
            },
        )
        folder = Path(summary["dataset"])
        assert (folder / "train.jsonl").is_file() and (
            folder / "train.parquet"
        ).is_file()
        assert summary["stats"]["train"] > 0
        project.datasets[method] = str(folder)


@pytest.mark.parametrize("method", ["grpo", "kto", "dpo"])
def test_train_one_step(project: Project, method: str) -> None:
    if method not in project.datasets:
        pytest.skip("datasets not built")
    cfg = {
        **TRAIN,
        "method": method,
        "model": str(project.model),
        "dataset": project.datasets[method],
        "name": f"adapter-{method}",
    }
    if method == "grpo":
        cfg["rewards"] = [
            {"name": "env_reward", "weight": 1.0},
            {"name": "format", "weight": 0.5},
        ]
    summary, run_dir = project.job("llm.train", cfg)
    (model,) = summary["models"]
    assert model["kind"] == "lora-adapter" and model["base"] == str(project.model)
    assert (Path(model["file"]) / "adapter_config.json").is_file()
    assert summary["metrics"]["global_step"] == 1
    rows = metrics_rows(run_dir)
    assert any("train/loss" in r for r in rows)
    if method == "grpo":
        keys = set().union(*rows)
        assert {
            "reward/env_reward_mean",
            "reward/format_mean",
            "reward/mean",
            "completion/mean_length",
        } <= keys
    project.adapters[method] = model["file"]


def test_sft_stop_then_resume(project: Project) -> None:
    if "sft" not in project.datasets:
        pytest.skip("datasets not built")
    cfg = {
        **TRAIN,
        "method": "sft",
        "max_steps": 2,
        "model": str(project.model),
        "dataset": project.datasets["sft"],
        "name": "adapter-sft",
    }
    summary, run_dir = project.job("llm.train", cfg, stop=True, run_id="sft-stop")
    assert summary["stopped"] and summary["metrics"]["global_step"] == 1
    assert (run_dir / "checkpoints" / "checkpoint-1").is_dir()
    summary, _ = project.job("llm.train", cfg, run_id="sft-stop", resume=True)
    assert not summary["stopped"] and summary["metrics"]["global_step"] == 2
    project.adapters["sft"] = summary["models"][0]["file"]


def test_merge_and_evaluate(project: Project) -> None:
    if "grpo" not in project.adapters:
        pytest.skip("no adapter trained")
    summary, _ = project.job(
        "llm.merge", {"adapter": project.adapters["grpo"], "dtype": "bfloat16"}
    )
    (merged,) = summary["models"]
    assert (
        merged["kind"] == "hf-merged" and project.adapters["grpo"] in merged["parents"]
    )
    folder = Path(merged["file"])
    assert (folder / "model.safetensors").is_file() and (
        folder / "tokenizer.json"
    ).is_file()
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"

    summary, run_dir = project.job(
        "llm.evaluate",
        {
            "model": str(folder),
            "baseline": str(project.model),
            "env": ENV,
            "episodes": 2,
            "num_envs": 2,
            "max_new_tokens": 3,
            "max_steps": 2,
            "seed": 0,
        },
    )
    report = json.loads((run_dir / "report.json").read_text())
    for label in ("before", "after"):
        r = report["results"][label]
        assert r["episodes"] == 2 and 0 <= r["success_rate"] <= 1
        assert 0 <= r["invalid_action_rate"] <= 1
    assert "success_rate" in report["comparison"]
    assert (run_dir / "report.png").read_bytes().startswith(b"\x89PNG")
