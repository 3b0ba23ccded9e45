"""End to end on the CPU with a tiny model built here: collect rollouts in the
Jira env, build every dataset kind, train every method for a step or two,
stop and resume, merge, evaluate — each through its job kind's validator
and job function with a real JobContext."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiny_models import TINY_TRAIN, build_tiny_model

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, validate_config
from engine.llm.rollouts import iter_traces

ROOT = Path(__file__).resolve().parents[1]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
TRAIN = TINY_TRAIN


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = build_tiny_model(root / "base")

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
            summary = get_kind(kind).entry(ctx)
        finally:
            ctx.close()
        json.dumps(summary)  # the supervisor sends it as JSON
        return summary, run_dir


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(tmp_path_factory.mktemp("llm-project"))


# What several tests read is built by module fixtures, not left behind by an
# earlier test: each test stands alone (run it by itself, or after another
# failed), and the whole module still builds each thing once.


@pytest.fixture(scope="module")
def lm_traces(project: Project) -> tuple[dict, Path]:
    """Traces of the untrained language model (``lm.jsonl``): the collect
    job's summary and run folder."""
    return project.job(
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


@pytest.fixture(scope="module")
def datasets(project: Project, lm_traces: tuple[dict, Path]) -> dict[str, dict]:
    """The dataset job's summary by method, built from expert traces
    (``expert.jsonl``) and the language model's."""
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
    return {
        method: project.job(
            "llm.dataset",
            {
                "traces": ["expert.jsonl", "lm.jsonl"],
                "method": method,
                "seed": 0,
                "name": method,
            },
        )[0]
        for method in ("sft", "kto", "dpo", "grpo")
    }


def dataset(datasets: dict[str, dict], method: str) -> str:
    return str(datasets[method]["dataset"])


Trained = Callable[[str], tuple[dict, Path]]


@pytest.fixture(scope="module")
def trained(project: Project, datasets: dict[str, dict]) -> Trained:
    """``trained(method)``: one training step of a method, its summary and
    run folder, run once in the module by whichever test asks first (a run
    that fails fails the test that asked, and the next one asking tries
    again)."""
    runs: dict[str, tuple[dict, Path]] = {}

    def train(method: str) -> tuple[dict, Path]:
        if method not in runs:
            cfg = {
                **TRAIN,
                "method": method,
                "model": str(project.model),
                "dataset": dataset(datasets, method),
                "name": f"adapter-{method}",
            }
            if method == "grpo":
                cfg["rewards"] = [
                    {"name": "env_reward", "weight": 1.0},
                    {"name": "format", "weight": 0.5},
                ]
            # Scored on the validation split after the step.
            runs[method] = project.job("llm.train", {**cfg, "eval_every_steps": 1})
        return runs[method]

    return train


def metrics_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    )


def test_collect_with_the_language_model(
    project: Project, lm_traces: tuple[dict, Path]
) -> None:
    summary, run_dir = lm_traces
    eps = list(iter_traces(summary["traces"]))
    assert len(eps) == 3 and summary["stats"]["episodes"] == 3
    # traces live in the project's data/ folder, named by the job
    assert Path(summary["traces"]) == project.root / "data" / "traces" / "lm.jsonl"
    step = eps[0]["steps"][0]
    assert (
        step["messages"][0]["role"] == "system"
        and "Available tools" in (step["messages"][1]["content"])
    )
    assert isinstance(step["completion"], str) and "state" in step
    # an untrained model names no tool: every step fell back and was counted
    assert summary["stats"]["unparsed_rate"] > 0.5
    assert summary["stats"]["tokens_per_s"] > 0
    rows = [r for r in metrics_rows(run_dir) if "rollout/ep_rew" in r]
    assert len(rows) == 3
    assert sum(r["rollout/unparsed_rate"] for r in rows) / 3 > 0.5


def test_build_every_dataset_kind(datasets: dict[str, dict]) -> None:
    assert sorted(datasets) == ["dpo", "grpo", "kto", "sft"]
    for summary in datasets.values():
        folder = Path(summary["dataset"])
        assert (folder / "train.jsonl").is_file() and (
            folder / "train.parquet"
        ).is_file()
        assert summary["stats"]["train"] > 0


@pytest.mark.parametrize("method", ["grpo", "kto", "dpo"])
def test_train_one_step(project: Project, trained: Trained, method: str) -> None:
    summary, run_dir = trained(method)
    (model,) = summary["models"]
    assert model["kind"] == "lora-adapter" and model["base"] == str(project.model)
    assert (Path(model["file"]) / "adapter_config.json").is_file()
    assert summary["metrics"]["global_step"] == 1
    rows = metrics_rows(run_dir)
    keys = set().union(*rows)
    assert {"train/loss", "train/learning_rate", "train/tokens_per_s"} <= keys
    # the validation score: GRPO's is the declared rewards' held-out mean
    score = "eval_reward" if method == "grpo" else "eval_loss"
    assert "eval/" + score.removeprefix("eval_") in keys
    assert score in summary["metrics"]
    assert all(r["train/tokens_per_s"] > 0 for r in rows if "train/tokens_per_s" in r)
    if method == "grpo":
        # per reward function mean and std, KL to the base (beta 0.04 default)
        assert {
            "reward/env_reward_mean",
            "reward/env_reward_std",
            "reward/format_mean",
            "reward/format_std",
            "reward/mean",
            "reward/std",
            "train/kl",
            "completion/mean_length",
        } <= keys


def test_grpo_rewarded_by_a_learned_reward(
    project: Project, datasets: dict[str, dict]
) -> None:
    """Label steps of the expert traces (good: the expert's tool), train a
    reward head on the tiny model, and reward a GRPO step with it."""
    from engine.store.labels import Label, LabelStore, step_key

    eps = list(iter_traces(project.root / "data/traces/expert.jsonl"))
    labels = [
        Label("kto", "expert", e, t, step_key(st),
              "good" if st.get("tool") == st.get("expert_tool") else "bad")
        for e, ep in enumerate(eps) for t, st in enumerate(ep["steps"])
    ][:40]  # fmt: skip
    assert {lb.value for lb in labels} == {"good", "bad"}
    store = LabelStore(project.root)
    store.set_many(labels)
    store.close()
    summary, _ = project.job(
        "reward.train",
        {"traces": ["expert.jsonl"], "base_model": str(project.model), "epochs": 1,
         "max_length": 256, "lora_r": 4, "seed": 0, "name": "learned",
         "suggest": False},
    )  # fmt: skip
    assert summary["agent"] == "text" and summary["report"]["labels"] == 40
    cfg = {
        **TRAIN,
        "method": "grpo",
        "model": str(project.model),
        "dataset": dataset(datasets, "grpo"),
        "name": "adapter-learned",
        "rewards": [
            {"name": "learned", "model": summary["reward_model"], "weight": 0.5},
            {"name": "env_reward", "weight": 1.0},
        ],
    }
    _, run_dir = project.job("llm.train", cfg)
    keys = set().union(*metrics_rows(run_dir))
    assert {"reward/learned_mean", "reward/env_reward_mean"} <= keys
    (learned,) = [r["reward/learned_mean"] for r in metrics_rows(run_dir)
                  if "reward/learned_mean" in r]  # fmt: skip
    assert 0.0 <= learned <= 1.0


def test_kto_with_cpu_hardware_defaults_trains(
    project: Project, datasets: dict[str, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU suggests a batch of one sequence, which TRL's KTO refuses ("Actual
    (not effective) batch size must be > 1"); the job raises it and says so."""
    from engine.hardware import recommend
    from engine.llm import train as llm_train

    rec = recommend([], 2, 2, cpu_bf16=False)
    cpu = {
        "batch_size": rec.batch_size,
        "lora_rank": rec.lora_rank,
        "num_generations": rec.grpo_num_generations,
        "precision": rec.dtype,
        "gradient_checkpointing": rec.gradient_checkpointing,
        "device": rec.device,
        "gpu_count": 0,
    }
    assert cpu["batch_size"] == 1
    monkeypatch.setattr(llm_train, "hardware_defaults", lambda: dict(cpu))
    cfg = {
        "method": "kto",
        "model": str(project.model),
        "dataset": dataset(datasets, "kto"),
        "max_steps": 1,
        "save_steps": 0,
        "name": "adapter-kto-cpu",
    }
    validated = validate_config("llm.train", cfg)
    assert validated["batch_size"] == 2
    assert validated["notes"] == [
        "batch_size 1 -> 2: KTO compares each row with the others of its batch."
    ]
    summary, _ = project.job("llm.train", cfg)
    assert summary["metrics"]["global_step"] == 1
    # a batch the user chose is theirs: one sentence instead of TRL's
    with pytest.raises(ConfigError, match="KTO needs a batch_size of at least 2"):
        validate_config("llm.train", {**cfg, "batch_size": 1})


def test_sft_stop_then_resume(project: Project, datasets: dict[str, dict]) -> None:
    cfg = {
        **TRAIN,
        "method": "sft",
        "max_steps": 2,
        "model": str(project.model),
        "dataset": dataset(datasets, "sft"),
        "name": "adapter-sft",
    }
    summary, run_dir = project.job("llm.train", cfg, stop=True, run_id="sft-stop")
    assert summary["stopped"] and summary["metrics"]["global_step"] == 1
    assert (run_dir / "checkpoints" / "checkpoint-1").is_dir()
    summary, _ = project.job("llm.train", cfg, run_id="sft-stop", resume=True)
    assert not summary["stopped"] and summary["metrics"]["global_step"] == 2


def test_merge_and_evaluate(project: Project, trained: Trained) -> None:
    (adapter,) = trained("grpo")[0]["models"]
    summary, _ = project.job(
        "llm.merge", {"adapter": adapter["file"], "dtype": "bfloat16"}
    )
    (merged,) = summary["models"]
    assert merged["kind"] == "hf-merged" and adapter["file"] in merged["parents"]
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
    # the models, and the random and expert references on the same episodes
    assert list(report["results"]) == ["before", "after", "random", "expert"]
    for label, r in report["results"].items():
        assert r["episodes"] == 2 and 0 <= r["success_rate"] <= 1
        assert 0 <= r["invalid_action_rate"] <= 1
        assert sum(s["episodes"] for s in report["scenarios"][label].values()) == 2
        assert (run_dir / report["traces"][label]).is_file()
    assert report["results"]["expert"]["expert_agreement"] == 1.0
    assert "success_rate" in report["comparison"]
    assert (run_dir / "report.png").read_bytes().startswith(b"\x89PNG")
    lines = (run_dir / "report.csv").read_text().splitlines()
    assert lines[0].startswith("model,scenario,episodes,success_rate")
    assert sum(line.split(",")[1] == "all" for line in lines) == 4


def test_merge_registers_lineage(project: Project, trained: Trained) -> None:
    """The adapter a training run made, registered in the project, merged by
    its registered path: the merged model links back to it and the run."""
    from engine.store.project import Project as Store

    train_summary, train_dir = trained("grpo")
    run_id = train_dir.name
    store = Store.open(project.root / "store", create=True)
    try:
        (adapter_id,), problems = store.register_run_models(run_id, train_summary)
        assert problems == []
        adapter = next(m for m in store.list_models() if m.id == adapter_id)
        assert adapter.kind == "lora-adapter" and adapter.base == str(project.model)
        summary, run_dir = project.job(
            "llm.merge",
            {"adapter": adapter.path, "dtype": "float16", "name": "merged-fp16"},
        )
        (merged_id,), problems = store.register_run_models(run_dir.name, summary)
        assert problems == []
        links = set(store.lineage(merged_id))
        # the merge names the adapter by its registered path: linked by id
        assert (adapter_id, merged_id, "derived") in links
        assert (run_dir.name, merged_id, "trained") in links
        assert (run_id, adapter_id, "trained") in set(store.lineage(adapter_id))
        merged = next(m for m in store.list_models() if m.id == merged_id)
        config = json.loads((Path(merged.path) / "config.json").read_text())
        assert config["dtype"] == "float16" and merged.metrics["dtype"] == "float16"
    finally:
        store.close()


def _one_sentence_with_advice(text: str) -> None:
    assert "\n" not in text and text.endswith(".")
    assert ";" in text  # "what is wrong; what to do"


def _copy_model(project: Project, name: str) -> Path:
    import shutil

    folder = project.root / "bad" / name
    shutil.copytree(project.model, folder)
    return folder


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("no_weights", "has no weights"),
        ("no_tokenizer", "has no tokenizer"),
        ("no_config", "has no config.json"),
        ("encoder", "TRL cannot train"),
        ("wrong_columns", "lacks the column"),
    ],
)
def test_bad_input_is_refused_before_the_run(
    project: Project, datasets: dict[str, dict], case: str, words: str
) -> None:
    folder = _copy_model(project, case)
    config = {**TRAIN, "method": "dpo", "dataset": dataset(datasets, "dpo")}
    if case == "no_weights":
        for f in folder.glob("*.safetensors"):
            f.unlink()
    elif case == "no_tokenizer":
        for name in ("tokenizer.json", "vocab.json", "tokenizer.model"):
            (folder / name).unlink(missing_ok=True)
    elif case == "no_config":
        (folder / "config.json").unlink()
    elif case == "encoder":
        cfg = json.loads((folder / "config.json").read_text())
        cfg["architectures"] = ["BertForMaskedLM"]
        (folder / "config.json").write_text(json.dumps(cfg))
    else:
        config["dataset"] = dataset(datasets, "sft")
    with pytest.raises(ConfigError, match=words) as err:
        validate_config("llm.train", {**config, "model": str(folder)})
    assert err.value.field == ("dataset" if case == "wrong_columns" else "model")
    _one_sentence_with_advice(str(err.value))


def test_architecture_transformers_cannot_load(
    project: Project, datasets: dict[str, dict]
) -> None:
    """A *ForCausalLM name the validator accepts but transformers does not
    know fails the job with one sentence; the run folder stays readable."""
    folder = _copy_model(project, "unknown-arch")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"], cfg["model_type"] = ["MysteryForCausalLM"], "mystery"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="cannot be loaded as a causal") as err:
        project.job(
            "llm.train",
            {
                **TRAIN,
                "method": "sft",
                "model": str(folder),
                "dataset": dataset(datasets, "sft"),
            },
            run_id="sft-unknown-arch",
        )
    _one_sentence_with_advice(str(err.value))
    assert metrics_rows(project.root / "runs" / "sft-unknown-arch") == []


def test_out_of_memory_mid_training_leaves_a_resumable_run(
    project: Project, datasets: dict[str, dict]
) -> None:
    """The CPU allocator refuses a request at step 2: the job ends with one
    sentence and advice, metrics and the step-2 checkpoint stay readable, and
    the run resumes from there."""
    import torch
    from transformers import TrainerCallback

    from engine.llm.train import train_model

    class ExhaustMemory(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            if state.global_step == 2:
                torch.empty(1 << 50, dtype=torch.uint8)  # a petabyte

    raw = {
        **TRAIN,
        "method": "sft",
        "max_steps": 3,
        "save_steps": 1,
        "model": str(project.model),
        "dataset": dataset(datasets, "sft"),
        "name": "adapter-sft-oom",
    }
    cfg = validate_config("llm.train", raw)
    run_dir = project.root / "runs" / "sft-oom"
    run_dir.mkdir(parents=True)
    ctx = JobContext("sft-oom", run_dir, "llm.train", cfg)
    try:
        with pytest.raises(EngineError, match="ran out of memory at step 2") as err:
            train_model(ctx, get_kind("llm.train").load(cfg), [ExhaustMemory()])
    finally:
        ctx.close()
    assert "lower batch_size" in str(err.value)
    _one_sentence_with_advice(str(err.value))
    rows = metrics_rows(run_dir)  # every line parses
    assert max(r["step"] for r in rows if "train/loss" in r) == 2
    ckpt = run_dir / "checkpoints" / "checkpoint-2"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and (ckpt / "adapter_config.json").is_file()
    summary, _ = project.job("llm.train", raw, run_id="sft-oom", resume=True)
    assert summary["metrics"]["global_step"] == 3 and not summary["stopped"]


# ------------------------------------------------------ validation and health
def test_sft_scores_its_validation_split_on_schedule(
    project: Project, datasets: dict[str, dict]
) -> None:
    """eval/loss reaches the run's metric stream at each scheduled step and
    at the last one, beside train/loss; a healthy run has no warnings."""
    cfg = {
        **TRAIN,
        "method": "sft",
        "max_steps": 3,
        "eval_every_steps": 2,
        "model": str(project.model),
        "dataset": dataset(datasets, "sft"),
        "name": "adapter-sft-validated",
    }
    summary, run_dir = project.job("llm.train", cfg)
    rows = metrics_rows(run_dir)
    assert [r["step"] for r in rows if "eval/loss" in r] == [2, 3]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert not any(k.startswith("eval/runtime") for r in rows for k in r)
    last = [r["eval/loss"] for r in rows if "eval/loss" in r][-1]
    assert summary["metrics"]["eval_loss"] == pytest.approx(last)
    assert summary["warnings"] == [] and summary["early_stopped"] is None


def test_grpo_whose_reward_never_varies_is_flagged_early(
    project: Project, datasets: dict[str, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    """The untrained tiny model never writes a tool call, so the format
    reward scores every answer 0: the monitor says so within the first
    tenth of the steps (the test stops the run there, at the warning)."""
    from transformers import TrainerCallback

    from engine.llm.train import train_model

    log: list[str] = []  # the run's log: what the job writes to stderr

    class StopAtFirstWarning(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            log.append(capsys.readouterr().err)
            if "health:" in log[-1]:
                control.should_training_stop = True
            return control

    raw = {
        **TRAIN,
        "method": "grpo",
        "max_steps": 20,
        "model": str(project.model),
        "dataset": dataset(datasets, "grpo"),
        "rewards": [{"name": "format", "weight": 1.0}],
        "name": "adapter-grpo-flat",
    }
    cfg = validate_config("llm.train", raw)
    run_dir = project.root / "runs" / "grpo-flat"
    run_dir.mkdir(parents=True)
    ctx = JobContext("grpo-flat", run_dir, "llm.train", cfg)
    try:
        summary = train_model(
            ctx, get_kind("llm.train").load(cfg), [StopAtFirstWarning()]
        )
    finally:
        ctx.close()
    steps = summary["metrics"]["global_step"]
    assert steps <= 0.1 * raw["max_steps"]
    warnings = summary["warnings"]
    assert any("scored the same" in w for w in warnings), warnings
    # the adapter never moved: it completed, and learned nothing
    assert any(w.startswith("Completed, nothing learned") for w in warnings)
    log.append(capsys.readouterr().err)
    assert all(f"health: {w}" in "".join(log) for w in warnings)


def test_a_nan_loss_ends_the_run_failed_at_once(
    project: Project, datasets: dict[str, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    """Weights turned NaN before step 2: the run stops at step 2 (logging
    every step), saves nothing of them, and fails with one sentence."""
    import torch
    from transformers import TrainerCallback

    from engine.llm.train import train_model

    class PoisonWeights(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            if state.global_step == 1:
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        if "lora_A" in name:
                            p.fill_(float("nan"))

    raw = {
        **TRAIN,
        "method": "sft",
        "max_steps": 6,
        "save_steps": 1,
        "model": str(project.model),
        "dataset": dataset(datasets, "sft"),
        "name": "adapter-sft-nan",
    }
    cfg = validate_config("llm.train", raw)
    run_dir = project.root / "runs" / "sft-nan"
    run_dir.mkdir(parents=True)
    ctx = JobContext("sft-nan", run_dir, "llm.train", cfg)
    try:
        with pytest.raises(EngineError, match="Training stopped at step 2") as err:
            train_model(ctx, get_kind("llm.train").load(cfg), [PoisonWeights()])
    finally:
        ctx.close()
    _one_sentence_with_advice(str(err.value))
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-1"]  # none of the NaN weights
    assert not (project.root / "models" / "adapter-sft-nan").exists()
    assert f"health: {err.value}" in capsys.readouterr().err
