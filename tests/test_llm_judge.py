"""The ``judge`` reward: an Ollama model (the fake server the Ollama tests use)
or a project model in-process ranks each GRPO group against a rubric. Good
verdicts, the cache, garbage, a timeout, a 500 and no server at all; bad
settings; the flow node; one real GRPO step rewarded by the judge."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from models_workspace_support import FakeOllama, fake_entry
from tiny_models import build_tiny_model

from engine.errors import ConfigError
from engine.llm import judge as judge_mod
from engine.llm.judge import Judge, JudgeConfig, check_config, parse_verdict
from engine.llm.rewards import JudgeReward, build_rewards
from engine.settings import fields_of

ROOT = Path(__file__).resolve().parents[1]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
RUBRIC = "The answer moves the issue to Done in one tool call."


def answers_of(body: dict[str, Any]) -> list[str]:
    """The numbered answers of a judge request, in order."""
    text = body["messages"][-1]["content"]
    return re.findall(
        r"Answer \d+:\n(.*?)(?=\n\nAnswer \d+:|\n\nScore all)", text, re.S
    )


def rank_by_done(body: dict[str, Any]) -> str:
    """A judge that likes answers naming move_to_done, as RULER asks: ids."""
    scores = [
        {"id": i, "score": 1.0 if "move_to_done" in a else 0.2}
        for i, a in enumerate(answers_of(body), start=1)
    ]
    return "Here is my verdict:\n```json\n" + json.dumps({"scores": scores}) + "\n```"


@pytest.fixture
def fake() -> Any:
    with FakeOllama() as server:
        server.models["judge:latest"] = fake_entry("judge:latest")
        yield server


def chats(fake: FakeOllama) -> list[dict[str, Any]]:
    return [body for _, path, body in fake.requests if path == "/api/chat"]


def reward(fake: FakeOllama, **settings: Any) -> JudgeReward:
    (r,) = build_rewards(
        [
            {
                "name": "judge",
                "weight": 0.5,
                "rubric": RUBRIC,
                "model": "judge",
                "host": fake.host,
                "timeout_s": 20,
                **settings,
            }
        ]
    )
    assert isinstance(r, JudgeReward)
    return r


PROMPTS = ["Issue A is In Progress."] * 3 + [
    [{"role": "user", "content": "Issue B is To Do."}]
] * 3
COMPLETIONS = [
    "move_to_done",
    "move_to_blocked",
    "move_to_done",
    [{"role": "assistant", "content": "move_to_in_progress"}],
    [{"role": "assistant", "content": "move_to_done"}],
    [{"role": "assistant", "content": "no idea"}],
]


def test_the_judge_ranks_each_group_and_caches_by_content(fake: FakeOllama) -> None:
    fake.chat_reply = rank_by_done
    r = reward(fake)
    assert r.weight == 0.5 and r.__name__ == "judge"
    scores = r(PROMPTS, COMPLETIONS)
    assert scores == [1.0, 0.2, 1.0, 0.2, 1.0, 0.2]
    asked = chats(fake)
    # one verdict per prompt; equal answers shown once
    assert len(asked) == 2
    assert answers_of(asked[0]) == ["move_to_done", "move_to_blocked"]
    assert "Issue B is To Do." in asked[1]["messages"][-1]["content"]
    assert RUBRIC in asked[0]["messages"][-1]["content"]
    assert asked[0]["model"] == "judge"
    # the same groups again: from the cache, not the server
    assert r(PROMPTS, COMPLETIONS) == scores
    assert len(chats(fake)) == 2 and r.judge.calls == 2
    # one answer alone has nothing to be ranked against
    assert r(["x", "x"], ["same", "same"]) == [0.5, 0.5]
    assert len(chats(fake)) == 2


def test_plain_score_lists_are_read_too() -> None:
    assert parse_verdict("[0.1, 1, 0.5]", 3) == [0.1, 1.0, 0.5]
    assert parse_verdict(
        '{"scores": [{"id": 2, "score": 0}, {"id": 1, "score": 1}]}', 2
    ) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("verdict", "why"),
    [
        ("Answer 1 is clearly the best.", "holds no JSON"),
        ('{"scores": [0.5]}', "1 scores for 2 answers"),
        ('{"scores": [7, 0.1]}', "outside 0 to 1"),
        ('{"scores": ["high", "low"]}', "not a number"),
        ('{"scores": [{"id": 1, "score": 1}, {"id": 1, "score": 0}]}', "each once"),
        ('{"verdict": "good"}', "no list of scores"),
    ],
)
def test_garbage_gets_the_fallback_and_one_warning(
    fake: FakeOllama, verdict: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.chat_reply = lambda body: verdict
    r = reward(fake, fallback=0.25)
    assert r(["p"] * 2, ["move_to_done", "move_to_blocked"]) == [0.25, 0.25]
    assert r(["q"] * 2, ["move_to_done", "move_to_blocked"]) == [0.25, 0.25]
    # not cached: a later group is asked again, and the warning is not repeated
    assert len(chats(fake)) == 2 and r.judge.failures == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("warning: The judge judge answered garbage (")
    assert why in lines[0] and "scored 0.25 (the fallback)" in lines[0]


def test_a_judge_past_its_timeout_gets_the_fallback(
    fake: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.chat_hold.clear()  # the server answers only once released
    r = reward(fake, timeout_s=0.5)
    assert r(["p"] * 2, ["a", "b"]) == [0.5, 0.5]
    fake.chat_hold.set()
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert "did not finish chat within the 0.5 s deadline" in err


def test_a_server_error_gets_the_fallback(
    fake: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.chat_status = 500
    r = reward(fake)
    assert r(["p"] * 2, ["a", "b"]) == [0.5, 0.5]
    err = capsys.readouterr().err
    assert "refused chat: model runner crashed" in err and err.count("\n") == 1
    # the server recovers: the next group is judged
    fake.chat_status = 200
    fake.chat_reply = rank_by_done
    assert r(["p"] * 2, ["move_to_done", "b"]) == [1.0, 0.2]


def test_no_server_and_an_unknown_model_get_the_fallback(
    fake: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    r = reward(fake, model="missing")
    assert r(["p"] * 2, ["a", "b"]) == [0.5, 0.5]
    assert "has no model named missing" in capsys.readouterr().err
    fake.__exit__()
    r = reward(fake)
    assert r(["p"] * 2, ["a", "b"]) == [0.5, 0.5]
    assert "No Ollama server answers at" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"rubric": "  "}, "rubric", "needs a rubric"),
        ({"model": ""}, "model", "needs a model"),
        ({"timeout_s": 0}, "timeout_s", "timeout_s must be"),
        ({"fallback": 1.5}, "fallback", "fallback must be"),
        ({"backend": "openai"}, "backend", "must be one of ollama, project"),
        ({"host": "ftp://x"}, "host", "is not an http:// or https:// URL"),
        ({"temperature": 1}, "temperature", "temperature"),
        ({"backend": "project", "model": "/no/such/model"}, "model", "/no/such/model"),
    ],
)
def test_bad_settings_are_one_sentence(
    settings: dict[str, Any], field: str, words: str
) -> None:
    spec = {"name": "judge", "rubric": RUBRIC, "model": "judge", **settings}
    with pytest.raises(ConfigError) as exc:
        build_rewards([spec])
    assert exc.value.field == f"judge.{field}"
    assert words in str(exc.value)
    assert str(exc.value).count(". ") == 0 and str(exc.value).endswith(".")


def test_a_project_model_judges_in_process(tmp_path: Path) -> None:
    """A tiny random model writes no verdict: the fallback, no crash; a
    verdict it did write is read as Ollama's are."""
    folder = build_tiny_model(tmp_path / "judge-model")
    cfg = check_config(
        {
            "backend": "project",
            "model": str(folder),
            "rubric": RUBRIC,
            "max_new_tokens": 16,
            "fallback": 0.1,
        }
    )
    warnings: list[str] = []
    judge = Judge(cfg, warn=warnings.append)
    assert judge.score_group("p", ["a", "b", "a"]) == [0.1, 0.1, 0.1]
    assert len(warnings) == 1 and "answered garbage" in warnings[0]
    assert judge.calls == 1
    # the model stays loaded; what it generates is its verdict
    assert isinstance(judge.ask(judge_mod.judge_messages(RUBRIC, "p", ["a"]), 30), str)


def test_the_flow_node_derives_its_parameters_from_the_config(fake: FakeOllama) -> None:
    from engine.nodes.registry import get

    node = get("llm.judge")
    assert node is not None
    params = {p.name: p for p in node.spec.params}
    for name, info in fields_of(JudgeConfig).items():
        assert params[name].default == info.default and params[name].help == info.help
    assert params["backend"].choices == ("ollama", "project")
    assert params["timeout_s"].min == 0.1 and params["fallback"].max == 1
    # graph validation says what is missing, in one sentence
    assert node.check is not None
    defaults = {name: p.default for name, p in params.items()}
    assert node.check(defaults) == [
        "The judge needs a rubric: say what a good answer does."
    ]
    good = {**defaults, "rubric": RUBRIC, "model": "judge", "host": fake.host}
    assert node.check(good) == []


def test_grpo_trains_a_step_rewarded_by_the_judge(
    fake: FakeOllama, tmp_path: Path
) -> None:
    from engine.jobs.context import JobContext
    from engine.jobs.registry import get_kind, validate_config

    fake.chat_reply = rank_by_done
    model = build_tiny_model(tmp_path / "base")

    def job(kind: str, config: dict[str, Any]) -> tuple[dict[str, Any], Path]:
        cfg = validate_config(kind, config)
        run_dir = tmp_path / "runs" / f"{kind}-{uuid.uuid4().hex[:6]}"
        run_dir.mkdir(parents=True)
        ctx = JobContext(run_dir.name, run_dir, kind, cfg)
        try:
            return get_kind(kind).entry(ctx), run_dir
        finally:
            ctx.close()

    job(
        "llm.collect",
        {"env": ENV, "policy": "expert", "episodes": 4, "seed": 0, "name": "ex"},
    )
    data, _ = job(
        "llm.dataset",
        {"traces": ["ex.jsonl"], "method": "grpo", "seed": 0, "name": "g"},
    )
    summary, run_dir = job(
        "llm.train",
        {
            "method": "grpo",
            "model": str(model),
            "dataset": data["dataset"],
            "max_steps": 1,
            "batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 4,
            "lora_rank": 4,
            "save_steps": 0,
            "seed": 0,
            "precision": "fp32",
            "device": "cpu",
            "gradient_checkpointing": False,
            "rewards": [
                {
                    "name": "judge",
                    "weight": 1.0,
                    "rubric": RUBRIC,
                    "model": "judge",
                    "host": fake.host,
                }
            ],
        },
    )
    assert summary["metrics"]["global_step"] == 1
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    means = [r["reward/judge_mean"] for r in rows if "reward/judge_mean" in r]
    assert means and all(0 <= m <= 1 for m in means)
    assert chats(fake)
