"""Agents on the Hugging Face Hub in the huggingface_sb3 layout (issue 31,
item 5), against a local server that follows the Hub's upload and download
API (tests/hub_server.py, pointed at by HF_ENDPOINT), never the internet:
``hub push`` of a tiny PPO policy writes the layout and uploads it (LFS for
the zip and the video), the files read back from the server, ``hub download
--agent`` registers it in another project with its lineage and the model
plays as the card says; another layout and refused uploads are one sentence
each with nothing half-written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import FakeHub

from engine.errors import EngineError
from engine.store.project import Project

ROOT = Path(__file__).resolve().parents[1]
ZIP = "ppo-CartPole-v1.zip"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CartPole PPO policy trained for 256 steps, saved as a checkpoint is
    (``state.json`` beside it names its env and algorithm)."""
    from stable_baselines3 import PPO

    folder = tmp_path_factory.mktemp("policy") / "best"
    folder.mkdir()
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=128, batch_size=64, seed=0)
    model.learn(256)
    model.save(folder / "model.zip")
    (folder / "state.json").write_text(
        json.dumps({"env": "CartPole-v1", "algo": "PPO"})
    )
    return folder / "model.zip"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    llm = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": b"w" * 64}
    with FakeHub({"org/llm": llm}) as server:
        yield server


def hub_env(hub: FakeHub, home: Path, token: str | None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))
    }
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        # The local server follows the Hub's LFS upload, not its Xet storage.
        HF_HUB_DISABLE_XET="1",
        PYTHONPATH=str(ROOT),
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def hub_cli(
    hub: FakeHub, home: Path, *args: str, token: str | None = "hf_test_token"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "hub", *args, "--quiet"],
        env=hub_env(hub, home, token),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _sentence(done: subprocess.CompletedProcess[str]) -> str:
    """The command's last line: one sentence, never a traceback."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rl-studio-engine hub: ") and last.endswith("."), last
    return last


def _card(text: str) -> dict[str, object]:
    from huggingface_hub import ModelCard

    return ModelCard(text).data.to_dict()


def test_push_then_download_into_another_project(
    hub: FakeHub, policy: Path, tmp_path: Path
) -> None:
    home = tmp_path / "hf"
    pushed = hub_cli(
        hub, home, "push", str(policy), "--repo", "org/agent",
        "--project", str(tmp_path / "p1"), "--video-frames", "60",
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    result = json.loads(pushed.stdout)
    # The huggingface_sb3 layout, read back from the server.
    files = hub.repos["org/agent"]
    assert sorted(files) == sorted(
        [ZIP, "config.json", "results.json", "replay.mp4", "README.md"]
    )
    assert files[ZIP] == policy.read_bytes()
    assert files["replay.mp4"][4:8] == b"ftyp"  # an MP4 container
    # The zip and the video went through git LFS, the rest as regular files.
    assert hashlib.sha256(files[ZIP]).hexdigest() in hub.lfs
    assert hashlib.sha256(files["replay.mp4"]).hexdigest() in hub.lfs
    (repo, summary, added) = hub.pushes[-1]
    assert repo == "org/agent" and sorted(added) == sorted(files)
    assert summary == "Upload a stable-baselines3 agent from RL Studio"
    results = json.loads(files["results.json"])
    assert results["n_eval_episodes"] == 10 and results["is_deterministic"] is True
    assert results["mean_reward"] == result["mean_reward"]
    config = json.loads(files["config.json"])
    assert "policy_class" in config and "system_info" in config
    card = _card(files["README.md"].decode())
    assert card["library_name"] == "stable-baselines3"
    assert "CartPole-v1" in card["tags"]  # type: ignore[operator]
    (index,) = card["model-index"]  # type: ignore[misc]
    (scored,) = index["results"]
    assert scored["dataset"]["type"] == "CartPole-v1"
    assert scored["metrics"][0]["type"] == "mean_reward"
    assert scored["metrics"][0]["value"] == (
        f"{results['mean_reward']:.2f} +/- {results['std_reward']:.2f}"
    )
    # Download it into another project: a registered SB3 model with lineage.
    down = hub_cli(
        hub, home, "download", "org/agent", "--agent", "--project", str(tmp_path / "p2")
    )
    assert down.returncode == 0, down.stderr
    commit = hub.commits["org/agent"]
    project = Project.open(tmp_path / "p2")
    try:
        (model,) = project.list_models()
        assert (model.kind, model.env, model.algo) == (
            "sb3-policy",
            "CartPole-v1",
            "PPO",
        )
        assert model.name == "agent" and model.source_run is not None
        assert Path(model.path).read_bytes() == policy.read_bytes()
        assert model.metrics["hub/mean_reward"] == results["mean_reward"]
        links = project.lineage(model.id)
        assert (f"hf://org/agent@{commit}", model.id, "derived") in links
        (run,) = project.list_runs()
        assert run.kind == "rl.hub_download" and run.status == "completed"
    finally:
        project.close()
    # It plays as the card says: the same ten seeded deterministic episodes.
    from stable_baselines3.common.env_util import make_vec_env

    from engine.rl import record
    from engine.rl.policy import EVAL_SEED_OFFSET, evaluate, load_policy

    played = evaluate(
        load_policy(model.path),
        make_vec_env("CartPole-v1", n_envs=10, seed=EVAL_SEED_OFFSET),
        episodes=10,
    )
    assert sum(played.rewards) / 10 == pytest.approx(results["mean_reward"])
    # Record video finds its env beside it, as for a trained model.
    assert record.validate({"model": model.path}).env == "CartPole-v1"


def test_another_layout_is_refused_before_anything_is_downloaded(
    hub: FakeHub, tmp_path: Path
) -> None:
    home = tmp_path / "hf"
    done = hub_cli(
        hub, home, "download", "org/llm", "--agent", "--project", str(tmp_path / "p")
    )
    said = _sentence(done)
    assert (
        "org/llm is not a stable-baselines3 agent in the huggingface_sb3 layout" in said
    )
    assert "no <algo>-<env>.zip model zip" in said
    assert not [r for r in hub.requests if "/resolve/" in r["path"]]
    assert not (home / "hub" / "models--org--llm").exists()
    project = Project.open(tmp_path / "p")
    try:
        assert project.list_models() == []
        (run,) = project.list_runs()
        assert run.status == "failed" and run.reason == said.removeprefix(
            "rl-studio-engine hub: "
        )
    finally:
        project.close()


def test_a_refused_upload_is_one_sentence_and_commits_nothing(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from engine.rl.hub import upload_folder

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(EngineError, match="HF_HUB_OFFLINE is set"):
        upload_folder(tmp_path, "org/new", "push")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    folder = tmp_path / "layout"
    folder.mkdir()
    (folder / ZIP).write_bytes(b"PK\x03\x04" + b"\0" * 100)
    (folder / "results.json").write_text('{"mean_reward": 1.0}')
    hub.repos["org/kept"] = {"README.md": b"old"}
    cases = [
        (None, {}, "refused the upload to org/new (HTTP 401): set HF_TOKEN"),
        ("hf_other", {}, "refused the upload to org/new (HTTP 403): set HF_TOKEN"),
        (
            "hf_test_token",
            {"commit": 500},
            "refused the upload to org/kept with HTTP 500",
        ),
        ("hf_test_token", {"batch": 403}, "refused the upload to org/kept (HTTP 403)"),
    ]
    for token, refuse, said in cases:
        if token is None:
            monkeypatch.delenv("HF_TOKEN", raising=False)
        else:
            monkeypatch.setenv("HF_TOKEN", token)
        hub.refuse = refuse
        repo = "org/new" if "org/new" in said else "org/kept"
        with pytest.raises(EngineError) as info:
            upload_folder(folder, repo, "push")
        message = str(info.value)
        assert said in message and message.endswith("nothing was committed."), message
        assert "\n" not in message and "Traceback" not in message
    assert "org/new" not in hub.repos
    assert hub.repos["org/kept"] == {"README.md": b"old"} and hub.pushes == []


@pytest.mark.slow
def test_an_atari_agent_is_evaluated_and_downloaded_as_it_plays(
    hub: FakeHub, tmp_path: Path
) -> None:
    """Pong's agent sees RL Zoo's 84x84 stack of four grey frames: the card's
    evaluation plays it so (a bare ``gym.make`` of the game gave the policy
    210x160 colour frames, which it refuses), and the downloaded agent's
    env check accepts it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from engine.envs import families

    game = "PongNoFrameskip-v4"
    folder = tmp_path / "best"
    folder.mkdir()
    venv = make_vec_env(
        families.vec_env_id(game), n_envs=1, seed=0, wrapper_class=families.wrap
    )
    model = PPO("CnnPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0)
    model.learn(16)
    venv.close()
    model.save(folder / "model.zip")
    (folder / "state.json").write_text(json.dumps({"env": game, "algo": "PPO"}))
    home = tmp_path / "hf"
    pushed = hub_cli(
        hub, home, "push", str(folder / "model.zip"), "--repo", "org/pong",
        "--project", str(tmp_path / "p1"), "--episodes", "1", "--video-frames", "0",
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    results = json.loads(hub.repos["org/pong"]["results.json"])
    # an unplayed agent loses 21 points to at most 20 (the game's own reward)
    assert results["n_eval_episodes"] == 1 and -21 <= results["mean_reward"] <= 20
    down = hub_cli(
        hub, home, "download", "org/pong", "--agent", "--project", str(tmp_path / "p2")
    )
    assert down.returncode == 0, down.stderr
    assert "cannot be made here" not in down.stderr
    project = Project.open(tmp_path / "p2")
    try:
        (registered,) = project.list_models()
        assert (registered.kind, registered.env) == ("sb3-policy", game)
    finally:
        project.close()
