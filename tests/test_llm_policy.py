"""Language-model agents against tiny real models built here: chat family
and special tokens of saved folders, the policy's fallback and batched
generation, the recorder beside the rollout loop, dataset splits and formats,
the task-completion reward, and what the trainer streams (KL, tokens/s)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_models import build_tiny_model

from engine.errors import ConfigError
from engine.llm import base, datasets, rewards
from engine.llm.policy import (
    ExpertPolicy,
    GenerationSettings,
    LLMPolicy,
    env_mask,
    env_tools,
    expert_action,
    load_model,
)
from engine.llm.rollouts import (
    TraceRecorder,
    collect_rollouts,
    iter_traces,
    make_env,
    resolve_env,
)

ROOT = Path(__file__).resolve().parents[1]
ENV = resolve_env(str(ROOT / "resources/examples/envs/jira_status_update.env.json"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("policy-models")
    return {arch: build_tiny_model(root / arch, arch) for arch in ("qwen2", "llama")}


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("policy-traces") / "expert.jsonl"
    collect_rollouts(
        ENV,
        ExpertPolicy(noise=0.3, seed=4),
        episodes=30,
        recorder=TraceRecorder(path),
        num_envs=5,
        seed=4,
    )
    return path


# ------------------------------------------------------------ base models
@pytest.mark.parametrize(
    ("arch", "family", "eos", "stop"),
    [
        ("qwen2", "chatml", "<|im_end|>", "<|im_end|>"),
        ("llama", "llama3", "<|eot_id|>", "<|eot_id|>"),
    ],
)
def test_saved_folders_give_family_and_tokens(
    models: dict[str, Path], arch: str, family: str, eos: str, stop: str
) -> None:
    info = base.inspect_model(models[arch])
    assert info.kind == "hf" and info.has_chat_template
    assert info.chat_family == family and stop in info.stop_tokens
    assert info.special_tokens["eos"] == eos and "pad" in info.special_tokens
    assert info.num_layers == 2 and info.architectures[0].endswith("ForCausalLM")
    base.check_trainable(info)
    base.check_chat_template(info)


def test_hub_id_resolves_a_real_model_from_the_cache(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "hub" / "models--acme--tiny-chat"
    snap = repo / "snapshots" / "0123abcd"
    shutil.copytree(models["qwen2"], snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    info = base.inspect_model("acme/tiny-chat")
    assert Path(info.path) == snap and info.chat_family == "chatml"
    # the id loads like a folder (offline: conftest sets HF_HUB_OFFLINE)
    model, tok = load_model("acme/tiny-chat")
    assert model.config.num_hidden_layers == 2 and tok.eos_token == "<|im_end|>"


def test_no_chat_template_is_refused_with_a_suggestion(
    models: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(models["qwen2"], folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    info = base.inspect_model(folder)
    assert not info.has_chat_template and info.chat_family == "unknown"
    with pytest.raises(ConfigError, match="no chat template") as err:
        base.check_chat_template(info)
    assert "chat_template.jinja" in str(err.value) and err.value.field == "model"
    # every job that prompts the model refuses it before starting
    from engine.jobs.registry import validate_config

    for kind, cfg in (
        ("llm.collect", {"policy": "llm", "model": str(folder)}),
        ("llm.evaluate", {"model": str(folder)}),
        ("llm.evaluate", {"model": str(models["qwen2"]), "baseline": str(folder)}),
    ):
        with pytest.raises(ConfigError, match="no chat template") as err:
            validate_config(kind, {"env": ENV, **cfg})
        assert err.value.field in ("model", "baseline")


# ----------------------------------------------------------------- policy
class CannedPolicy(LLMPolicy):
    """The real ``act`` (parsing, fallback, counting) over fixed answers."""

    answers: list[str] = []

    def generate(self, prompts: list[str]) -> tuple[list[str], list[int], list[int]]:
        n = len(prompts)
        return self.answers[:n], [1] * n, [1] * n


def _envs(n: int, seed: int = 0) -> list[Any]:
    out = []
    for i in range(n):
        env = make_env(ENV)
        env.reset(seed=seed + i)
        out.append(env)
    return out


@pytest.mark.parametrize("fallback", ["noop", "rule", "expert"])
def test_invalid_output_falls_back_and_is_counted(
    models: dict[str, Path], fallback: str
) -> None:
    model, tok = load_model(str(models["qwen2"]))
    policy = CannedPolicy(model, tok, fallback=fallback, noop_action=2, seed=0)
    policy.answers = ["merge it", "no idea", "tool: move_to_done", "", '{"x": 1}']
    envs = _envs(5)
    decisions = policy.act(envs)
    assert [d.parsed for d in decisions] == [False, False, True, False, False]
    assert policy.invalid_outputs == 4 and policy.decisions == 5
    assert decisions[2].tool == "move_to_done" and not decisions[2].fallback
    assert decisions[2].action == env_tools(envs[2]).index("move_to_done")
    for env, d in zip(envs, decisions, strict=True):
        if d.parsed:
            continue
        assert d.fallback and d.tool is None
        if fallback == "noop":
            assert d.action == 2
        elif fallback == "expert":  # the designed workflow's shortest path
            assert d.action == expert_action(env)
        else:  # a tool valid in the env's current status
            assert env_mask(env)[d.action]


def test_fallback_must_be_known(models: dict[str, Path]) -> None:
    model, tok = load_model(str(models["qwen2"]))
    with pytest.raises(ValueError, match="fallback must be one of"):
        LLMPolicy(model, tok, fallback="guess")


def test_real_model_output_counts_match_the_fallbacks(
    models: dict[str, Path],
) -> None:
    policy = LLMPolicy.from_pretrained(
        str(models["llama"]),
        generation=GenerationSettings(max_new_tokens=4, batch_size=6),
        fallback="noop",
        noop_action=1,
    )
    decisions = policy.act(_envs(6))
    unparsed = [d for d in decisions if not d.parsed]
    assert policy.invalid_outputs == len(unparsed) > 0  # untrained: mostly junk
    assert all(d.action == 1 and d.fallback for d in unparsed)
    assert all(0 < d.completion_tokens <= 4 for d in decisions)
    assert policy.tokens_per_second > 0


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_batched_generation_matches_one_at_a_time(
    models: dict[str, Path], arch: str
) -> None:
    """Left padding in a batch must not change greedy answers: prompts of
    different lengths (different statuses and tasks) together and alone."""
    model, tok = load_model(str(models[arch]))
    envs = _envs(6, seed=11)
    for i, env in enumerate(envs):  # move some envs on: longer texts
        for _ in range(i % 3):
            env.step(int(np.flatnonzero(env_mask(env))[0]))
    gen = GenerationSettings(max_new_tokens=6, batch_size=6)
    batched = LLMPolicy(model, tok, generation=gen).act(envs)
    lengths = {d.prompt_tokens for d in batched}
    assert len(lengths) > 1, "the batch should mix prompt lengths"
    alone = LLMPolicy(
        model, tok, generation=GenerationSettings(max_new_tokens=6, batch_size=1)
    ).act(envs)
    assert [d.completion for d in batched] == [d.completion for d in alone]
    assert [d.prompt_tokens for d in batched] == [d.prompt_tokens for d in alone]


# --------------------------------------------------------------- recorder
def test_recorder_interleaves_episodes_and_survives_a_torn_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data" / "traces" / "mine.jsonl"
    rec = TraceRecorder(path)
    a = rec.start_episode("env-a", task_id="A", seed=1, policy="mine")
    b = rec.start_episode("env-b", task_id="B", seed=2)
    step = {"messages": [], "completion": "x", "tool": "x", "action": 0}
    rec.record_step(a, **step, parsed=True, valid=True, reward=1.0)
    rec.record_step(b, **step, parsed=False, valid=False, reward=-1.0)
    rec.record_step(a, **step, parsed=True, valid=True, reward=0.5, note="extra")
    rec.end_episode(b, success=False, truncated=True)
    rec.end_episode(a, success=True)
    with open(path, "a") as fh:  # a crash in the middle of a write
        fh.write('{"episode": 9, "steps": [')
    eps = list(iter_traces(path))
    assert [e["task_id"] for e in eps] == ["B", "A"]
    assert eps[1]["return"] == 1.5 and eps[1]["length"] == 2
    assert eps[1]["steps"][1]["note"] == "extra" and eps[1]["policy"] == "mine"
    assert eps[0]["truncated"] and not eps[0]["success"]
    # appending continues the episode numbers
    rec2 = TraceRecorder(path, append=True)
    assert rec2.start_episode("env-c") == 2


# --------------------------------------------------------------- datasets
def test_default_split_is_90_10_in_jsonl_and_parquet(
    traces: Path, tmp_path: Path
) -> None:
    cfg = datasets.validate_dataset({"traces": str(traces), "method": "grpo"})
    assert cfg.validation_fraction == 0.1
    stats = datasets.build_dataset(
        [traces], "grpo", tmp_path / "g", validation_fraction=0.1, seed=0
    )
    assert stats["validation"] == round(stats["rows"] * 0.1)
    assert stats["states"] == stats["rows"] and stats["tasks"] > 1
    import pyarrow.parquet as pq

    for name in ("train", "validation"):
        rows = datasets.load_rows(tmp_path / "g" / f"{name}.jsonl")
        table = pq.read_table(tmp_path / "g" / f"{name}.parquet")
        assert table.num_rows == len(rows) and set(table.column_names) == set(rows[0])
        assert table.to_pylist()[0]["env_state"] == rows[0]["env_state"]


def test_kto_balance_ratio(traces: Path) -> None:
    eps = list(iter_traces(traces))
    free = datasets.build_kto(eps, max_ratio=0)  # no balancing
    pos = sum(r["label"] for r in free)
    assert pos > 0 and pos != len(free) - pos
    for ratio in (1.0, 1.5):
        rows = datasets.build_kto(eps, max_ratio=ratio, seed=1)
        good = sum(r["label"] for r in rows)
        small, large = sorted((good, len(rows) - good))
        assert large <= round(small * ratio) and small == min(pos, len(free) - pos)


def test_dpo_pairs_share_the_prompt(traces: Path) -> None:
    eps = list(iter_traces(traces))
    seen: dict[str, set[str]] = {}
    for ep in eps:
        for st in ep["steps"]:
            seen.setdefault(json.dumps(st["messages"]), set()).add(st["completion"])
    rows = datasets.build_dpo(eps)
    assert rows
    for r in rows:
        recorded = seen[json.dumps(r["prompt"])]
        chosen, rejected = r["chosen"][0], r["rejected"][0]
        assert chosen["role"] == rejected["role"] == "assistant"
        assert chosen["content"] != rejected["content"]
        assert {chosen["content"], rejected["content"]} <= recorded


# ----------------------------------------------------------------- rewards
def test_task_completion_and_weighted_total(traces: Path) -> None:
    """At the last decision of a successful episode the recorded tool reaches
    the goal from the saved state; a wrong tool does not."""
    finals = [
        ep["steps"][-1]
        for ep in iter_traces(traces)
        if ep["success"] and ep["steps"][-1]["parsed"]
    ][:6]
    assert finals
    cols = {
        "env": [ENV] * len(finals),
        "env_state": [json.dumps(s["state"]) for s in finals],
        "valid_tools": [s["valid_tools"] for s in finals],
    }
    done = rewards.TaskCompletionReward()
    good = done(None, [s["tool"] for s in finals], **cols)
    assert good == [1.0] * len(finals)
    assert done(None, ["nothing"] * len(finals), **cols) == [0.0] * len(finals)
    specs = [
        {"name": "task_completion", "weight": 2.0},
        {"name": "format", "weight": 0.5},
        {"name": "efficiency", "weight": 1.0, "target_chars": 4},
    ]
    fns = rewards.build_rewards(specs)
    total = rewards.combined(fns)(None, [s["tool"] for s in finals], **cols)
    for t, s in zip(total, finals, strict=True):
        assert t == pytest.approx(2.0 + 0.5 + 4 / len(s["tool"]))


# ------------------------------------------------------------ hardware
def test_hardware_defaults_on_this_machine() -> None:
    from engine.llm.train import hardware_defaults

    hw = hardware_defaults()
    assert hw["device"] in ("cpu", "cuda", "mps")
    assert hw["batch_size"] >= 1 and hw["lora_rank"] >= 1
    assert hw["num_generations"] >= 2 and hw["precision"] in ("bf16", "fp16", "fp32")
    assert isinstance(hw["gradient_checkpointing"], bool)


def test_parquet_datasets_load_like_jsonl(
    traces: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    from engine.jobs.registry import validate_config

    datasets.build_dataset([traces], "sft", tmp_path / "sft", seed=0)
    only = tmp_path / "parquet-only"
    only.mkdir()
    for name in ("train.parquet", "validation.parquet"):
        shutil.copy(tmp_path / "sft" / name, only / name)
    a_train, a_val = datasets.load_split(tmp_path / "sft", "sft")
    b_train, b_val = datasets.load_split(only, "sft")
    assert b_train.to_list() == a_train.to_list()
    assert b_val is not None and b_val.to_list() == a_val.to_list()
    # a single parquet file is a training set too
    c_train, c_val = datasets.load_split(only / "train.parquet", "sft")
    assert len(c_train) == len(a_train) and c_val is None
    with pytest.raises(ConfigError, match="lacks the column"):
        datasets.load_split(only, "kto")
    cfg = validate_config(
        "llm.train",
        {"method": "sft", "model": str(models["qwen2"]), "dataset": str(only)},
    )
    assert cfg["dataset_rows"] == len(a_train)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match="not a readable parquet file"):
        datasets.check_columns(broken, "sft")


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "has no rows"), ("not json\n", "line 1"), ("[1, 2]\n", "JSON objects")],
)
def test_damaged_jsonl_dataset(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as err:
        datasets.check_columns(path, "sft")
    assert ";" in str(err.value) and err.value.field == "dataset"
