"""Language-model engine parts that need no model: parsing, chat families,
model folder checks, rewards (code execution included), datasets from
rule-based traces, validators, the accelerate command, metric names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.llm import base, datasets, rewards
from engine.llm.policy import ExpertPolicy, build_messages, format_ok, parse_tool
from engine.llm.rollouts import (
    TraceRecorder,
    collect_rollouts,
    iter_traces,
    resolve_env,
    rollout_stats,
)
from engine.llm.train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
STATUS_ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
TOOLS = ["move_to_done", "move_to_in_progress", "move_to_in_review", "merge"]


# ----------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("move_to_done", "move_to_done"),
        ("  `move_to_done`. ", "move_to_done"),
        ("MOVE_TO_DONE", "move_to_done"),
        ("Move To Done", "move_to_done"),
        ('{"tool": "merge", "arguments": {}}', "merge"),
        ('I will call {"name": "move_to_in_review"} now', "move_to_in_review"),
        ("tool: move_to_in_progress", "move_to_in_progress"),
        ("Action = merge", "merge"),
        ("First move_to_in_review, then move_to_done.", "move_to_in_review"),
        ("call Merge please", "merge"),
        ("move_to_donex and nothing else", None),
        ("I do not know", None),
        ("", None),
    ],
)
def test_parse_tool(text: str, expected: str | None) -> None:
    assert parse_tool(text, TOOLS) == expected


def test_parse_tool_prefers_longer_name_at_same_place() -> None:
    assert parse_tool("use merge_all now", ["merge", "merge_all"]) == "merge_all"


def test_format_ok() -> None:
    assert format_ok("merge", TOOLS)
    assert format_ok('{"tool": "merge"}', TOOLS)
    assert format_ok("tool: merge", TOOLS)
    assert not format_ok("I pick merge", TOOLS)


def test_messages_list_tools() -> None:
    msgs = build_messages("Status: To Do", TOOLS)
    assert msgs[0]["role"] == "system" and "move_to_done, " in msgs[0]["content"]
    assert msgs[1] == {"role": "user", "content": "Status: To Do"}


# -------------------------------------------------------------- base models
@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("{{'<|im_start|>' + m['role']}}", "chatml"),
        ("<|start_header_id|>{{ role }}<|end_header_id|>", "llama3"),
        ("[INST] {{ content }} [/INST]", "mistral"),
        ("<|user|>\n{{ c }}<|end|>\n<|assistant|>", "phi3"),
        ("<start_of_turn>user\n{{ c }}<end_of_turn>", "gemma"),
        ("{{ messages }}", "unknown"),
        (None, "unknown"),
    ],
)
def test_chat_family(template: str | None, family: str) -> None:
    assert base.detect_chat_family(template) == family


def _fake_model(
    folder: Path,
    *,
    weights: bool = True,
    tokenizer: bool = True,
    arch: str = "Qwen2ForCausalLM",
) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "architectures": [arch],
                "num_hidden_layers": 2,
                "hidden_size": 64,
            }
        )
    )
    if weights:
        (folder / "model.safetensors").write_bytes(b"\0" * 8)
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
        (folder / "tokenizer_config.json").write_text(
            json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
        )
        (folder / "chat_template.jinja").write_text("<|im_start|>{{ x }}")
    return folder


def test_inspect_model_reads_family_and_tokens(tmp_path: Path) -> None:
    info = base.inspect_model(_fake_model(tmp_path / "m"))
    assert info.kind == "hf" and info.model_type == "qwen2"
    assert info.chat_family == "chatml"
    assert info.special_tokens["eos"] == "<|im_end|>"
    assert "<|im_end|>" in info.stop_tokens
    base.check_trainable(info)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"weights": False}, "no weights"), ({"tokenizer": False}, "no tokenizer")],
)
def test_incomplete_model_folder(tmp_path: Path, kwargs: dict, words: str) -> None:
    folder = _fake_model(tmp_path / "m", **kwargs)
    with pytest.raises(ConfigError, match=words) as err:
        base.resolve_model(folder)
    assert err.value.field == "model"


def test_missing_model_says_where(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        base.resolve_model("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ConfigError, match="does not exist"):
        base.resolve_model(tmp_path / "nowhere")


def test_hub_id_from_cache(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    repo = cache / "models--org--tiny"
    snap = _fake_model(repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert base.resolve_model("org/tiny") == snap


def test_untrainable_architecture(tmp_path: Path) -> None:
    info = base.inspect_model(
        _fake_model(tmp_path / "m", arch="BertForSequenceClassification")
    )
    with pytest.raises(ConfigError, match="TRL cannot train"):
        base.check_trainable(info)


# ----------------------------------------------------------------- traces
@pytest.fixture(scope="module")
def expert_traces(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "expert.jsonl"
    rec = TraceRecorder(path)
    eps = collect_rollouts(
        resolve_env(STATUS_ENV),
        ExpertPolicy(noise=0.3, seed=1),
        episodes=24,
        recorder=rec,
        num_envs=4,
        seed=1,
    )
    assert len(eps) == 24
    stats = rollout_stats(eps)
    assert stats["success_rate"] > 0.8 and stats["invalid_action_rate"] > 0
    return path


def test_recorder_api(tmp_path: Path) -> None:
    rec = TraceRecorder(tmp_path / "t.jsonl")
    ep = rec.start_episode("env", task_id="T-1", seed=3)
    rec.record_step(
        ep,
        messages=[{"role": "user", "content": "x"}],
        completion="a",
        tool="a",
        action=0,
        parsed=True,
        valid=True,
        reward=0.5,
        reward_breakdown={"step": 0.5},
        state={"s": 1},
    )
    rec.end_episode(ep, success=True)
    (row,) = list(iter_traces(tmp_path / "t.jsonl"))
    assert (
        row["return"] == 0.5 and row["success"] and row["steps"][0]["state"] == {"s": 1}
    )


def test_datasets_from_traces(expert_traces: Path, tmp_path: Path) -> None:
    eps = list(iter_traces(expert_traces))
    step = eps[0]["steps"][0]
    assert step["state"]["task"] is not None and step["expert_tool"]
    for method in datasets.METHODS:
        stats = datasets.build_dataset(
            [expert_traces], method, tmp_path / method, validation_fraction=0.1, seed=0
        )
        assert stats["train"] > 0 and stats["validation"] >= 1
        assert (tmp_path / method / "train.parquet").is_file()
        assert json.loads((tmp_path / method / "stats.json").read_text())["rows"] > 0
        row = json.loads(
            (tmp_path / method / "train.jsonl").read_text().splitlines()[0]
        )
        assert set(datasets.COLUMNS[method]) <= set(row)
    kto = json.loads((tmp_path / "kto" / "stats.json").read_text())
    assert kto["desirable"] == kto["undesirable"]  # balanced
    dpo = [
        json.loads(x)
        for x in (tmp_path / "dpo" / "train.jsonl").read_text().splitlines()
    ]
    assert all(r["chosen"] != r["rejected"] for r in dpo)


def test_split_is_seeded() -> None:
    rows = [{"i": i} for i in range(50)]
    a = datasets.split(rows, 0.1, seed=3)
    assert a == datasets.split(rows, 0.1, seed=3)
    assert len(a[1]) == 5 and len(a[0]) == 45


def test_wrong_columns_name_the_dataset(expert_traces: Path, tmp_path: Path) -> None:
    datasets.build_dataset([expert_traces], "sft", tmp_path / "sft", seed=0)
    with pytest.raises(ConfigError, match="lacks the column") as err:
        datasets.load_split(tmp_path / "sft", "dpo")
    assert err.value.field == "dataset"


# ----------------------------------------------------------------- rewards
def _grpo_rows(expert_traces: Path, n: int = 6) -> list[dict]:
    return datasets.build_grpo(list(iter_traces(expert_traces)))[:n]


def test_env_reward_replays_saved_state(expert_traces: Path) -> None:
    rows = _grpo_rows(expert_traces)
    cols = {k: [r[k] for r in rows] for k in ("env", "env_state", "valid_tools")}
    good = [[{"role": "assistant", "content": r["expert_tool"]}] for r in rows]
    junk = [[{"role": "assistant", "content": "hello"}] for _ in rows]
    env_r = rewards.EnvReward()
    g, j = env_r(None, good, **cols), env_r(None, junk, **cols)
    assert all(x > y for x, y in zip(g, j, strict=True)) and j == [-1.0] * len(rows)
    assert g == env_r(None, good, **cols)  # deterministic replay
    valid = rewards.ToolValidityReward()(None, good, **cols)
    assert valid == [1.0] * len(rows)
    bad_tool = [[{"role": "assistant", "content": "move_to_to_do"}] for _ in rows]
    assert min(rewards.ToolValidityReward()(None, bad_tool, **cols)) == 0.0


def test_simple_rewards() -> None:
    fmt = rewards.FormatReward()
    cols = {"valid_tools": [TOOLS, TOOLS, TOOLS]}
    assert fmt(None, ["merge", "I pick merge", "nope"], **cols) == [1.0, 0.5, 0.0]
    eff = rewards.EfficiencyReward(target_chars=10)
    assert eff(None, ["short", "x" * 20]) == [1.0, 0.5]
    syn = rewards.PythonSyntaxReward()
    assert syn(None, ["```python\ndef f(x):\n    return x\n```", "def f(:"]) == [
        1.0,
        0.0,
    ]


def test_build_rewards_errors() -> None:
    fns = rewards.build_rewards([{"name": "env_reward", "weight": 2}, "format"])
    assert [f.__name__ for f in fns] == ["env_reward", "format"]
    assert fns[0].weight == 2.0
    with pytest.raises(ConfigError, match="Unknown reward") as err:
        rewards.build_rewards([{"name": "vibes"}])
    assert err.value.field == "rewards[0]"
    total = rewards.combined(
        rewards.build_rewards(
            [
                {"name": "efficiency", "weight": 2},
                {"name": "python_syntax", "weight": 1},
            ]
        )
    )
    assert total(None, ["x = 1"]) == [3.0]


# -------------------------------------------------------------- validators
@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory, expert_traces: Path) -> tuple[Path, Path]:
    tmp_path = tmp_path_factory.mktemp("validators")
    model = _fake_model(tmp_path / "model")
    datasets.build_dataset([expert_traces], "grpo", tmp_path / "grpo", seed=0)
    return model, tmp_path / "grpo"


HW = {
    "batch_size": 4,
    "lora_rank": 8,
    "num_generations": 4,
    "precision": "fp32",
    "gradient_checkpointing": False,
    "device": "cpu",
    "gpu_count": 0,
}


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        ({"method": "ppo"}, "method", "method must be one of"),
        ({"batch_size": 0}, "batch_size", "at least 1"),
        ({"batch_size": 4, "num_generations": 3}, "num_generations", "must divide"),
        ({"num_generations": 1, "batch_size": 2}, "num_generations", "at least 2"),
        ({"model": "/nowhere/model"}, "model", "does not exist"),
        ({"dataset": "/nowhere/ds"}, "dataset", "does not exist"),
        ({"method": "dpo"}, "dataset", "lacks the column"),
        ({"learning_rate": 5}, "learning_rate", "less than 1"),
        ({"precision": "fp16"}, "precision", "needs a GPU"),
        ({"rewards": [{"name": "nope"}]}, "rewards[0]", "Unknown reward"),
        ({"epochs": 3}, "epochs", "Unknown setting"),
    ],
)
def test_train_validator(model_and_data, override, field, words) -> None:
    from engine.llm.train import validate

    model, data = model_and_data
    cfg = {"method": "grpo", "model": str(model), "dataset": str(data), **override}
    with pytest.raises(ConfigError, match=words) as err:
        validate(cfg, hardware=HW)
    assert err.value.field == field


def test_train_validator_fills_hardware_defaults(model_and_data) -> None:
    from engine.llm.train import validate

    model, data = model_and_data
    out = validate({"model": str(model), "dataset": str(data)}, hardware=HW)
    assert isinstance(out, TrainConfig)
    assert out.batch_size == 4 and out.lora_rank == 8
    assert out.lora_alpha == 16 and out.num_generations == 4
    assert isinstance(out.seed, int) and out.rewards
    assert out.rewards[0]["name"] == "env_reward"


def test_a_hardware_batch_size_is_raised_to_what_grpo_accepts(
    model_and_data,
) -> None:
    from engine.llm.train import validate

    model, data = model_and_data
    cpu = {**HW, "batch_size": 1, "num_generations": 4}
    base = {"model": str(model), "dataset": str(data)}
    assert validate(base, hardware=cpu).batch_size == 4
    accumulated = {**base, "gradient_accumulation_steps": 2}
    assert validate(accumulated, hardware=cpu).batch_size == 2
    assert validate({**base, "num_generations": 3}, hardware=cpu).batch_size == 3
    # a batch the user chose is never changed: the mismatch is theirs to fix
    with pytest.raises(ConfigError, match="must divide") as err:
        validate({**base, "batch_size": 1}, hardware=cpu)
    assert err.value.field == "num_generations"


@pytest.mark.parametrize(
    ("method", "hardware_batch", "rows", "batch", "note"),
    [
        ("kto", 1, 100, 2, "KTO compares each row with the others of its batch"),
        ("dpo", 16, 3, 3, "the dataset has 3 rows"),
        ("sft", 16, 5, 5, "the dataset has 5 rows"),
        ("sft", 1, 5, 1, None),
        ("grpo", 1, 100, 4, "GRPO groups 4 answers per prompt"),
    ],
)
def test_a_hardware_batch_size_fits_the_method_and_the_dataset(
    method: str, hardware_batch: int, rows: int, batch: int, note: str | None
) -> None:
    from engine.llm.train import fit_to_hardware

    cfg = TrainConfig(method=method, batch_size=hardware_batch, num_generations=4)
    out, notes = fit_to_hardware(cfg, {"batch_size"}, rows)
    assert out.batch_size == batch
    expected = [f"batch_size {hardware_batch} -> {batch}: {note}."] if note else []
    assert notes == expected
    # the user's own batch size is never changed
    assert fit_to_hardware(cfg, set(), rows) == (cfg, [])


def test_hardware_generations_fit_the_users_grpo_batch(model_and_data) -> None:
    from engine.llm.train import validate

    model, data = model_and_data
    gpu = {**HW, "batch_size": 16, "num_generations": 16}
    out = validate(
        {"model": str(model), "dataset": str(data), "batch_size": 6}, hardware=gpu
    )
    assert out.batch_size == 6 and out.num_generations == 6
    assert out.notes == [
        "num_generations 16 -> 6: GRPO groups answers within batch_size x "
        "accumulation x processes = 6."
    ]


def test_other_validators(tmp_path: Path) -> None:
    from engine.llm import evaluate, merge, rollouts

    with pytest.raises(ConfigError) as err:
        rollouts.validate_collect({"env": STATUS_ENV, "policy": "llm"})
    assert err.value.field == "model"
    with pytest.raises(ConfigError) as err:
        rollouts.validate_collect({"env": STATUS_ENV, "policy": "rule", "episodes": 0})
    assert err.value.field == "episodes"
    with pytest.raises(ConfigError) as err:
        datasets.validate_dataset({"traces": "x.jsonl", "method": "ppo"})
    assert err.value.field == "method"
    with pytest.raises(ConfigError) as err:
        datasets.validate_dataset({"traces": "x.jsonl", "validation_fraction": 1.5})
    assert err.value.field == "validation_fraction"
    with pytest.raises(ConfigError) as err:
        merge.validate({"adapter": str(_fake_model(tmp_path / "full"))})
    assert err.value.field == "adapter" and "not a LoRA adapter" in str(err.value)
    with pytest.raises(ConfigError) as err:
        evaluate.validate(
            {"model": str(tmp_path / "full"), "env": STATUS_ENV, "episodes": -1}
        )
    assert err.value.field == "episodes"


@pytest.mark.parametrize(
    ("kind", "config", "bad", "field", "sentence"),
    [
        (
            "llm.collect",
            {"env": STATUS_ENV, "policy": "rule"},
            {"episodes": 0},
            "episodes",
            "episodes must be at least 1, not 0.",
        ),
        (
            "llm.dataset",
            {"traces": "x.jsonl"},
            {"method": "ppo"},
            "method",
            "method must be one of grpo, kto, dpo, sft, not 'ppo'.",
        ),
        (
            "reward.train",
            {},
            {"agent": "text"},
            "base_model",
            "A text reward model needs base_model (the language model).",
        ),
        (
            "hub.download",
            {"repo_id": "org/name"},
            {"revision": " "},
            "revision",
            "revision must name a branch, tag or commit.",
        ),
    ],
)
def test_a_validated_llm_config_is_its_typed_instance(
    kind: str, config: dict, bad: dict, field: str, sentence: str
) -> None:
    """Each kind's validation returns its config dataclass, frozen, with the
    seed drawn where the kind has one; a bad value is one sentence naming
    the field."""
    import dataclasses

    from engine.jobs.registry import get_kind

    job = get_kind(kind)
    cfg = job.validate(config)
    assert isinstance(cfg, job.config)
    assert job.load(job.record(cfg)) == cfg
    if hasattr(cfg, "seed"):
        assert isinstance(cfg.seed, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "x"
    with pytest.raises(ConfigError) as err:
        job.validate({**config, **bad})
    assert err.value.field == field and str(err.value) == sentence


# ------------------------------------------------------------------ misc
def test_accelerate_launch_files(tmp_path: Path) -> None:
    from engine.llm.distributed import launch_command, write_launch_files

    cfg = TrainConfig(
        device="cuda",
        strategy="deepspeed_zero3",
        precision="bf16",
        num_processes=8,
        num_machines=2,
        main_process_ip="10.0.0.1",
        main_process_port=29501,
        gradient_accumulation_steps=4,
    )
    path = write_launch_files(tmp_path, "r1", "llm.train", cfg, machine_rank=1)
    written = json.loads(path.read_text())
    assert written["distributed_type"] == "DEEPSPEED"
    assert written["deepspeed_config"]["zero_stage"] == 3
    assert written["machine_rank"] == 1 and written["mixed_precision"] == "bf16"
    assert written["num_processes"] == 8 and written["use_cpu"] is False
    # only machine 0 writes the job; the other machines read it
    assert not (tmp_path / "distributed" / "job.json").exists()
    cmd = launch_command(path, Path("/p/runs/r1"), resume=True)
    assert cmd[:5] == [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(path),
    ]
    assert cmd[-4:] == ["-m", "engine.llm.distributed", "/p/runs/r1", "--resume"]
    # torchrun's logs go to the run folder, not a torchelastic_* temp folder
    assert cmd[5:7] == ["--log_dir", "/p/runs/r1/distributed/torchrun"]


def test_metric_names() -> None:
    from engine.llm.train import studio_metric_keys

    row = studio_metric_keys(
        {
            "loss": 0.5,
            "learning_rate": 1e-5,
            "rewards/env_reward/mean": 0.3,
            "rewards/env_reward/std": 0.1,
            "reward": 0.2,
            "kl": 0.01,
            "completions/mean_length": 4.0,
            "logps/chosen": -3.0,
            "train_runtime": 3.0,
            "nan": float("nan"),
        },
        "grpo",
    )
    assert row == {
        "train/loss": 0.5,
        "train/learning_rate": 1e-5,
        "reward/env_reward_mean": 0.3,
        "reward/env_reward_std": 0.1,
        "reward/mean": 0.2,
        "train/kl": 0.01,
        "completion/mean_length": 4.0,
        "grpo/logps_chosen": -3.0,
    }


def test_the_report_by_scenario_its_csv_and_chart() -> None:
    """Each model's numbers per scenario (task) with a failed episode to look
    at, one CSV row per model and scenario, and a chart with axes and a
    legend (issue 30, item 5)."""
    import csv
    import io

    from PIL import Image

    from engine.llm.evaluate import CSV_COLUMNS, by_scenario, chart_png, report_csv

    def ep(task: str, success: bool, n: int, agreed: int) -> dict[str, object]:
        return {"task_id": task, "success": success, "return": float(success),
                "length": 4, "invalid": 1, "unparsed": 0, "trace_episode": n,
                "agreement": (agreed, 4)}  # fmt: skip

    eps = [ep("close", True, 0, 4), ep("close", False, 1, 2), ep("triage", True, 2, 3)]
    scenarios = by_scenario(eps)
    assert list(scenarios) == ["close", "triage"]
    close = scenarios["close"]
    assert close["episodes"] == 2 and close["success_rate"] == 0.5
    assert close["failed_example"] == 1 and close["expert_agreement"] == 6 / 8
    assert scenarios["triage"]["failed_example"] is None
    results = {
        "after": {"episodes": 3, "success_rate": 2 / 3, "mean_return": 0.7},
        "random": {"episodes": 3, "success_rate": 0.0, "mean_return": -1.0},
    }
    report = {"results": results, "scenarios": {"after": scenarios}}
    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["model"], r["scenario"]) for r in rows] == [
        ("after", "all"), ("after", "close"), ("after", "triage"), ("random", "all")
    ]  # fmt: skip
    assert rows[1]["failed_example"] == "1" and float(rows[1]["success_rate"]) == 0.5
    png = chart_png(results, "jira: 3 episodes a model")
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG" and image.size == (900, 360)


def test_out_of_memory_is_recognised() -> None:
    from engine.llm.train import _is_oom

    assert _is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert _is_oom(MemoryError())
    assert not _is_oom(RuntimeError("shape mismatch"))
